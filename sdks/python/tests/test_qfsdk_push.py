"""The push-delivery verifier against the shared vectors (sdks/conformance/push), and the aiohttp
example receiving deliveries."""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from unofficial_queueflow_client import InvalidPushDelivery, PushVerifier

SDK = Path(__file__).resolve().parents[1]
VECTORS_DIR = SDK.parent / "conformance" / "push"
VECTORS = json.loads((VECTORS_DIR / "vectors.json").read_text(encoding="utf-8"))
CASES = {case["name"]: case for case in VECTORS["cases"]}
# Extra cases in the same format (QF_PUSH_VECTORS_EXTRA=<file>), e.g. real deliveries a server test captured.
EXTRA = os.environ.get("QF_PUSH_VECTORS_EXTRA")
EXTRA_CASES = json.loads(Path(EXTRA).read_text(encoding="utf-8"))["cases"] if EXTRA else []
SECRET = CASES["good_signature"]["secret"]


def at(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def signed(body: bytes, secret: str = SECRET, msg_id: str = "msg-1", stamp: int | None = None) -> dict[str, str]:
    """Headers as the server signs them (written here from the spec, not with the SDK's code)."""
    stamp_text = str(int(time.time()) if stamp is None else stamp)
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{stamp_text}.".encode() + body, hashlib.sha256).digest()
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": stamp_text,
        "webhook-signature": "v1," + base64.b64encode(mac).decode(),
        "content-type": "application/json",
    }


def test_the_vectors_file_is_what_its_generator_makes():
    done = subprocess.run(
        [sys.executable, str(VECTORS_DIR / "generate.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_the_vectors_cover_every_reason_and_both_outcomes():
    reasons = {case["expect"].get("reason") for case in VECTORS["cases"]} - {None}
    assert reasons == set(VECTORS["reasons"])
    assert any(case["expect"]["valid"] for case in VECTORS["cases"])
    assert VECTORS["tolerance_secs"] == 300


@pytest.mark.parametrize("case", [*CASES.values(), *EXTRA_CASES], ids=lambda case: case["name"])
def test_push_vector(case: dict[str, Any]):
    expect = case["expect"]
    try:
        delivery = PushVerifier(case["secret"]).verify(
            case["headers"], case["body"].encode("utf-8"), now=at(case["now"])
        )
    except InvalidPushDelivery as err:
        assert not expect["valid"], f"refused ({err.reason}): {err}"
        assert err.reason == expect["reason"], str(err)
        return
    assert expect["valid"], f"accepted, expected {expect['reason']}"
    want = expect["delivery"]
    got = {
        "id": delivery.id,
        "timestamp": int(delivery.timestamp.timestamp()),
        "job_id": delivery.job.id,
        "task_name": delivery.job.task_name,
        "payload": delivery.job.payload,
        "lease_token": delivery.lease_token,
        "attempt": delivery.attempt,
        "traceparent": delivery.traceparent,
    }
    assert got == want


def test_a_malformed_secret_is_refused_when_the_verifier_is_built():
    with pytest.raises(InvalidPushDelivery) as caught:
        PushVerifier("my-secret")
    assert caught.value.reason == "malformed_secret"


def test_a_delivery_signed_now_passes_with_the_real_clock_and_decodes_the_job():
    case = CASES["good_signature"]
    body = case["body"].encode()
    delivery = PushVerifier(SECRET).verify(signed(body, msg_id="d-1"), body)
    assert delivery.id == "d-1"
    assert abs(datetime.now(UTC) - delivery.timestamp) < timedelta(minutes=1)
    assert delivery.job.status == "running" and delivery.job.delivery_count == 1
    assert delivery.job.created_at == datetime(2025, 12, 31, 23, 59, 58, 123456, tzinfo=UTC)


def test_the_tolerance_is_an_option():
    stale = CASES["old_timestamp"]  # 301 s old
    PushVerifier(stale["secret"], tolerance=timedelta(minutes=10)).verify(
        stale["headers"], stale["body"], now=at(stale["now"])
    )
    recent = CASES["a_retry_is_a_new_attempt"]  # 10 s old
    with pytest.raises(InvalidPushDelivery) as caught:
        PushVerifier(recent["secret"], tolerance=timedelta(seconds=5)).verify(
            recent["headers"], recent["body"], now=at(recent["now"])
        )
    assert caught.value.reason == "timestamp_too_old"


# --- the aiohttp example --------------------------------------------------------------------------


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("push_aiohttp_example", SDK / "examples" / "push_aiohttp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
async def example_client(aiohttp_client):
    return await aiohttp_client(load_example().make_app(SECRET))


async def test_the_aiohttp_example_answers_a_signed_delivery_with_the_tasks_result(example_client):
    body = CASES["good_signature"]["body"].encode()
    resp = await example_client.post("/queueflow", data=body, headers=signed(body))
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"sent_to": "zoë@example.com"}


async def test_the_aiohttp_example_refuses_a_tampered_body_with_a_retryable_503(example_client):
    body = CASES["good_signature"]["body"].encode()
    tampered = body.replace(b'"attempt":1', b'"attempt":2')
    resp = await example_client.post("/queueflow", data=tampered, headers=signed(body))
    assert (resp.status, resp.headers.get("Retry-After")) == (503, "60")
    assert await resp.json() == {"error": "signature_mismatch"}


async def test_the_aiohttp_example_refuses_an_old_delivery_and_another_secret_with_503(example_client):
    body = CASES["good_signature"]["body"].encode()
    old = signed(body, stamp=int(time.time()) - 3600)
    resp = await example_client.post("/queueflow", data=body, headers=old)
    assert (resp.status, resp.headers.get("Retry-After"), (await resp.json())["error"]) == (
        503,
        "60",
        "timestamp_too_old",
    )
    other = signed(body, secret="whsec_" + base64.b64encode(b"another endpoint").decode())
    resp = await example_client.post("/queueflow", data=body, headers=other)
    assert (resp.status, resp.headers.get("Retry-After"), (await resp.json())["error"]) == (
        503,
        "60",
        "signature_mismatch",
    )
