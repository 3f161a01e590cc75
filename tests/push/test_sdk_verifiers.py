"""Every SDK's push verifier against real deliveries: a real api and pusher deliver real jobs to a
loopback receiver, which captures each request as it arrived (headers and raw body bytes) beside
the endpoint's secret. Those captures become vectors in sdks/conformance/push's format (the real
delivery, valid; copies with a tampered body, a timestamp more than 5 minutes before the vector's
clock, or a wrong secret, refused), and each SDK's own vector test runs them through
QF_PUSH_VECTORS_EXTRA with its own toolchain (sdks/conformance/push/README.md, "Extra cases").

Each SDK also runs a control file in which real cases carry the opposite expectation: its test must
fail and name them, which shows that it read the extra file and checks every case's outcome (an
SDK that accepted a tampered delivery, or refused a real one, fails its run)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from devkit.pg import PgServer
from devkit.procs import ServiceProcess
from tests.push.receiver import Received, start_receiver
from tests.sdk.builds import build, locked, run_build_step
from tests.support.waiting import eventually

# The captures are made once per xdist worker that runs one of these (a session fixture); the group
# asks --dist loadgroup to keep the four on one worker. The time-out covers a cold Rust build of the
# verifier's test (a warm run takes seconds).
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("push-sdk-vectors")]

REPO = Path(__file__).resolve().parents[2]
SDKS = REPO / "sdks"
AUTH = {"Authorization": "Bearer dev"}
QUEUE = "signed"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
UNICODE_PAYLOAD = {
    "to": "zoë@example.com",
    "subject": "Grüße ✓ 日本",
    "parts": [1, 2.5, None, True, '"quoted" \\ back'],
    "nested": {"empty": {}, "list": []},
}
WRONG_SECRET = "whsec_" + base64.b64encode(hashlib.sha256(b"not the endpoint's secret").digest()).decode()
TOLERANCE_SECS = 300


@dataclass
class Capture:
    """One delivery as the receiver got it, what the server says it should carry, and the secrets
    that must verify it."""

    tag: str
    got: Received
    received_at: int  # Unix seconds at the receiver: the vector's clock
    job: dict[str, Any]  # GET /api/v1/jobs/{id}
    attempt: int
    traceparent: str | None
    secrets: dict[str, str]  # label -> a secret that signs it

    @property
    def timestamp(self) -> int:
        return int(self.got.headers["webhook-timestamp"])

    def delivery(self) -> dict[str, Any]:
        return {
            "id": self.got.headers["webhook-id"],
            "timestamp": self.timestamp,
            "job_id": self.job["id"],
            "task_name": self.job["task_name"],
            "payload": self.job["payload"],
            "lease_token": self.got.body["lease_token"],
            "attempt": self.attempt,
            "traceparent": self.traceparent,
        }


@dataclass
class Plan:
    """What the receiver answers: the statuses queued for a task's deliveries, then 200 {}."""

    statuses: dict[str, list[int]] = field(default_factory=dict)  # task name -> statuses
    arrived_at: dict[str, int] = field(default_factory=dict)  # webhook-id -> Unix seconds

    async def answer(self, got: Received) -> web.StreamResponse:
        self.arrived_at[got.headers["webhook-id"]] = int(time.time())
        queued = self.statuses.get(got.body["job"]["task_name"])
        if queued:
            return web.Response(status=queued.pop(0), text="not yet")
        return web.json_response({})


def signatures(got: Received) -> list[str]:
    return [s for s in got.headers["webhook-signature"].split() if s.startswith("v1,")]


async def capture_real_deliveries(database_url: str, log_dir: Path) -> list[Capture]:
    plan = Plan()
    receiver, receiver_runner = await start_receiver(plan.answer)
    args = ["--push-allow-cidrs", "127.0.0.0/8", "--worker-poll-secs", "1", "--shutdown-grace-secs", "2"]
    procs = [
        ServiceProcess(database_url, mode=mode, extra_args=args, log_dir=log_dir)
        for mode in ("api", "pusher")
    ]
    try:
        for proc in procs:
            await proc.start()
        async with aiohttp.ClientSession(base_url=procs[0].base_url, headers=AUTH) as http:
            return await _deliver_and_capture(http, receiver, plan)
    except BaseException:
        for proc in procs:
            if proc.started:
                print(proc.describe())
        raise
    finally:
        for proc in reversed(procs):
            if proc.started:
                await proc.terminate(grace=15.0)
        await receiver_runner.cleanup()


async def _deliver_and_capture(http: aiohttp.ClientSession, receiver: Any, plan: Plan) -> list[Capture]:
    async def call(method: str, path: str, body: Any = None, **headers: str) -> Any:
        async with http.request(method, path, json=body, headers=headers) as resp:
            got = await resp.json()
            assert resp.status in (200, 201), (method, path, resp.status, got)
            return got

    async def enqueue(task: str, payload: Any, **headers: str) -> str:
        config = {"queue": QUEUE, "retry_delay_secs": 0, "retry_backoff": "fixed", "jitter_factor": 0}
        made = await call(
            "POST", "/api/v1/jobs", {"task_name": task, "payload": payload, "config": config}, **headers
        )
        return str(made["job_id"])

    async def delivered(job_id: str, attempt: int) -> Received:
        async def found() -> Received | None:
            for got in receiver.received:
                if got.job_id == job_id and got.body["attempt"] == attempt:
                    return got
            return None

        return await eventually(found, timeout=30, message=f"delivery {attempt} of job {job_id}")

    async def completed(job_id: str) -> dict[str, Any]:
        async def done() -> dict[str, Any] | None:
            job = await call("GET", f"/api/v1/jobs/{job_id}")
            return dict(job) if job["status"] == "completed" else None

        return await eventually(done, timeout=30, message=f"job {job_id} completed")

    endpoint = await call(
        "POST",
        "/api/v1/push-endpoints",
        {"name": "verified", "url": receiver.url, "queues": [QUEUE], "concurrency": 1},
    )
    first_secret = endpoint["secret"]
    captures: list[Capture] = []

    def keep(
        tag: str, got: Received, job: dict[str, Any], attempt: int, secrets: dict[str, str], **more: Any
    ) -> None:
        arrived = plan.arrived_at[got.headers["webhook-id"]]
        captures.append(Capture(tag, got, arrived, job, attempt, more.get("traceparent"), secrets))

    # A payload of every JSON kind, non-ASCII text and escapes, in a trace.
    unicode_id = await enqueue("send-welcome", UNICODE_PAYLOAD, traceparent=TRACEPARENT)
    got = await delivered(unicode_id, 1)
    keep(
        "unicode_payload_in_a_trace",
        got,
        await completed(unicode_id),
        1,
        {"secret": first_secret},
        traceparent=TRACEPARENT,
    )

    # A 500, then the retry: two attempts of one job, each its own webhook-id.
    plan.statuses["resize"] = [500]
    retried_id = await enqueue("resize", {"n": 1})
    first, second = await delivered(retried_id, 1), await delivered(retried_id, 2)
    job = await completed(retried_id)
    assert job["delivery_count"] == 2 and first.headers["webhook-id"] != second.headers["webhook-id"]
    keep("first_attempt_answered_500", first, job, 1, {"secret": first_secret})
    keep("retried_attempt", second, job, 2, {"secret": first_secret})

    # After a rotation both secrets sign (once the pusher has read the new one: a delivery signed
    # before that carries one signature, so deliver again until one carries both).
    rotated = await call(
        "POST", f"/api/v1/push-endpoints/{endpoint['id']}/rotate-secret", {"grace_secs": 3600}
    )
    new_secret = rotated["secret"]
    assert new_secret != first_secret
    for _ in range(20):
        rotated_id = await enqueue("after-rotation", {"rotated": True})
        got = await delivered(rotated_id, 1)
        job = await completed(rotated_id)
        if len(signatures(got)) == 2:
            break
    else:
        raise AssertionError("no delivery signed with both secrets after the rotation")
    keep("during_a_rotation", got, job, 1, {"new_secret": new_secret, "previous_secret": first_secret})
    return captures


def vectors_of(capture: Capture) -> list[dict[str, Any]]:
    """The real delivery (valid with each secret that signs it, also at the tolerance's edge) and
    copies derived from it that every verifier must refuse."""
    raw, headers = capture.got.raw, capture.got.headers
    body = raw.decode("utf-8")
    name = f"real_{capture.tag}"
    valid = {"valid": True, "delivery": capture.delivery()}
    secret = next(iter(capture.secrets.values()))

    def case(suffix: str, description: str, expect: dict[str, Any], **change: Any) -> dict[str, Any]:
        return {
            "name": f"{name}_{suffix}" if suffix else name,
            "description": description,
            "secret": change.get("secret", secret),
            "headers": change.get("headers", headers),
            "body": change.get("body", body),
            "now": change.get("now", capture.received_at),
            "expect": expect,
        }

    def refused(reason: str) -> dict[str, Any]:
        return {"valid": False, "reason": reason}

    attempt = f'"attempt":{capture.attempt}'
    assert raw.count(attempt.encode()) == 1, raw
    tampered = body.replace(attempt, f'"attempt":{capture.attempt + 1}')
    cases = [
        case(
            f"with_the_{label}" if len(capture.secrets) > 1 else "",
            f"A real delivery, verified at its receipt with the {label}.",
            valid,
            secret=value,
        )
        for label, value in capture.secrets.items()
    ]
    cases += [
        case(
            "at_the_tolerance",
            "The real delivery verified exactly 300 s after its timestamp.",
            valid,
            now=capture.timestamp + TOLERANCE_SECS,
        ),
        case(
            "tampered_body",
            "The real delivery with its attempt changed in the body.",
            refused("signature_mismatch"),
            body=tampered,
        ),
        case(
            "body_with_a_trailing_space",
            "The real body plus one space: the same JSON, other bytes.",
            refused("signature_mismatch"),
            body=body + " ",
        ),
        case(
            "old_timestamp",
            "The real delivery verified 301 s after its timestamp (a replay).",
            refused("timestamp_too_old"),
            now=capture.timestamp + TOLERANCE_SECS + 1,
        ),
        case(
            "timestamp_from_the_future",
            "The real delivery verified 301 s before its timestamp.",
            refused("timestamp_too_new"),
            now=capture.timestamp - TOLERANCE_SECS - 1,
        ),
        case(
            "replayed_with_a_fresh_timestamp",
            "The real delivery replayed later with its timestamp rewritten to the replay's time.",
            refused("signature_mismatch"),
            headers={**headers, "webhook-timestamp": str(capture.timestamp + 600)},
            now=capture.received_at + 600,
        ),
        case(
            "wrong_secret",
            "The real delivery verified with another secret.",
            refused("signature_mismatch"),
            secret=WRONG_SECRET,
        ),
    ]
    return cases


def control_vectors(capture: Capture) -> list[dict[str, Any]]:
    """Real cases with the opposite expectation: every SDK's test must fail on each."""
    flipped = []
    for case in vectors_of(capture):
        if case["name"] == f"real_{capture.tag}":
            flipped.append({**case, "expect": {"valid": False, "reason": "signature_mismatch"}})
        elif case["expect"]["valid"] is False and not case["name"].endswith("from_the_future"):
            flipped.append({**case, "expect": {"valid": True, "delivery": capture.delivery()}})
    return [{**case, "name": case["name"].replace("real_", "control_", 1)} for case in flipped]


@dataclass(frozen=True)
class Vectors:
    real: Path
    control: Path
    real_names: list[str]
    control_names: list[str]


@pytest.fixture(scope="session")  # not "module": xdist may run other modules' tests between these
async def vectors(pg_cluster: PgServer, template_database: str, tmp_path_factory) -> Vectors:
    """Real deliveries captured once (per xdist worker), written as the real and the control files;
    the server, the receiver and the database are gone before the SDKs run."""
    directory = tmp_path_factory.mktemp("push-vectors")
    name = f"t_{uuid.uuid4().hex}"
    database_url = await pg_cluster.create_database(name, template=template_database)
    try:
        captures = await capture_real_deliveries(database_url, directory)
    finally:
        await pg_cluster.drop_database(name)
    real = [case for capture in captures for case in vectors_of(capture)]
    control = control_vectors(captures[0])
    assert len({case["name"] for case in real}) == len(real)
    files = {directory / "real.json": real, directory / "control.json": control}
    for path, cases in files.items():
        path.write_text(json.dumps({"tolerance_secs": TOLERANCE_SECS, "cases": cases}, ensure_ascii=False))
    return Vectors(
        directory / "real.json",
        directory / "control.json",
        [c["name"] for c in real],
        [c["name"] for c in control],
    )


# --- each SDK's own vector test --------------------------------------------------------------------


@dataclass(frozen=True)
class Sdk:
    tools: tuple[str, ...]
    cwd: Path
    argv: tuple[str, ...]
    passed: Callable[[str], str] | None  # a case name -> the pattern its pass prints (None: not listed)
    failed: Callable[[str], str]  # a case name -> the pattern its failure prints
    prepare: Callable[[], None] | None = None


def _build_typescript_tests() -> None:
    """What `npm test` builds before it runs: the SDK, its examples (push.test.js imports one) and
    the tests (shared with tests/sdk's build of the SDK, under its lock)."""
    build("typescript")
    with locked("typescript"):
        for script in ("build:examples", "build:test"):
            run_build_step("typescript", ["npm", "run", "--silent", script], SDKS / "typescript")


SDK_RUNS = {
    # The commands the Makefile's test-sdks target runs, narrowed to the verifier's vector test.
    "python": Sdk(
        (),
        REPO,
        (
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "sdks/python/tests/test_qfsdk_push.py",
            "-k",
            "test_push_vector",
        ),
        passed=lambda name: rf"test_push_vector\[{re.escape(name)}\] PASSED",
        failed=lambda name: rf"test_push_vector\[{re.escape(name)}\] FAILED",
    ),
    "go": Sdk(
        ("go",),
        SDKS / "go",
        ("go", "test", "-count=1", "-v", "-run", "^TestPushVectors$", "."),
        passed=lambda name: rf"--- PASS: TestPushVectors/{re.escape(name)} ",
        failed=lambda name: rf"--- FAIL: TestPushVectors/{re.escape(name)} ",
    ),
    "typescript": Sdk(
        ("node", "npm"),
        SDKS / "typescript",
        ("node", "--test", "--test-reporter=tap", "dist-test/push.test.js"),
        passed=lambda name: rf"(?m)^\s*ok \d+ - push vector {re.escape(name)} \(a header record\)",
        failed=lambda name: rf"(?m)^\s*not ok \d+ - push vector {re.escape(name)} \(a header record\)",
        prepare=_build_typescript_tests,
    ),
    "rust": Sdk(
        ("cargo",),
        SDKS / "rust",
        ("cargo", "test", "--quiet", "--test", "push", "every_push_vector"),
        passed=None,  # one test for every vector; the control run shows it reads and checks them
        failed=lambda name: rf"\"{re.escape(name)}\": got ",  # the name as a JSON string
    ),
}


def run_vector_test(sdk: Sdk, extra: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    return subprocess.run(
        sdk.argv,
        cwd=sdk.cwd,
        env={**env, "QF_PUSH_VECTORS_EXTRA": str(extra)},
        capture_output=True,
        text=True,
        timeout=840,
    )


@pytest.mark.parametrize("language", SDK_RUNS)
async def test_every_sdks_verifier_accepts_real_deliveries_and_refuses_tampered_old_and_wrongly_keyed_ones(
    language: str, vectors: Vectors
):
    sdk = SDK_RUNS[language]
    missing = [tool for tool in sdk.tools if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the {language} SDK's toolchain is not installed: no {', '.join(missing)} on PATH")
    if sdk.prepare is not None:
        sdk.prepare()

    done = run_vector_test(sdk, vectors.real)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{language}: the real vectors failed\n{output[-6000:]}"
    if sdk.passed is not None:
        unlisted = [n for n in vectors.real_names if not re.search(sdk.passed(n), output)]
        assert not unlisted, f"{language}: no pass reported for {unlisted}\n{output[-6000:]}"

    control = run_vector_test(sdk, vectors.control)
    output = control.stdout + control.stderr
    assert control.returncode != 0, f"{language}: passed cases whose expectation is wrong\n{output[-6000:]}"
    unflagged = [n for n in vectors.control_names if not re.search(sdk.failed(n), output)]
    assert not unflagged, f"{language}: no failure reported for {unflagged}\n{output[-6000:]}"
