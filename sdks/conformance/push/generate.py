"""Writes vectors.json: the push-delivery signature vectors every SDK's verifier must pass.

    python3 sdks/conformance/push/generate.py            # rewrite vectors.json
    python3 sdks/conformance/push/generate.py --check    # exit 1 when vectors.json differs

Standard library only, and deterministic: the secrets, ids, bodies and clock are fixed, so the file
is the same on every run. The signatures are computed here, independently of the SDKs, as the
server signs a delivery (Standard Webhooks): base64 of HMAC-SHA256 keyed with the secret's decoded
bytes over "{webhook-id}.{webhook-timestamp}.{body}". README.md beside this file describes the
format and the rules the cases pin down.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "vectors.json"

NOW = 1767225600  # 2026-01-01T00:00:00Z
TOLERANCE = 300


def secret(label: str) -> str:
    return "whsec_" + base64.b64encode(hashlib.sha256(label.encode()).digest()).decode()


SECRET = secret("queueflow push vectors: the endpoint's secret")
OLD_SECRET = secret("queueflow push vectors: the endpoint's previous secret")
OTHER_SECRET = secret("queueflow push vectors: another endpoint's secret")

DELIVERY_ID = "0c5d3e0a-6f47-4a4e-9a57-3b1f0d8f2c11"
JOB_ID = "5f0e4b7a-2d7c-4d1e-8a8f-9c0b6a1e3d42"
LEASE_TOKEN = "b8d4c1f2-7e3a-4c59-a6d0-1f2e3d4c5b6a"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def job(**changes: Any) -> dict[str, Any]:
    """A job as the lease answer carries it (the payload has non-ASCII text: the bytes are signed)."""
    return {
        "id": JOB_ID,
        "queue_name": "emails",
        "task_name": "send-welcome",
        "payload": {"to": "zoë@example.com", "subject": "Grüße ✓ 日本"},
        "config": {"queue": "emails", "priority": 0, "max_retries": 3},
        "status": "running",
        "retry_count": 0,
        "delivery_count": 1,
        "created_at": "2025-12-31T23:59:58.123456Z",
        "scheduled_at": "2025-12-31T23:59:58.123456Z",
        "started_at": "2026-01-01T00:00:00.000001Z",
        "metadata": {},
        **changes,
    }


def body(**changes: Any) -> str:
    delivery = {"job": job(), "lease_token": LEASE_TOKEN, "attempt": 1, **changes}
    return json.dumps(delivery, ensure_ascii=False, separators=(",", ":"))


BODY = body()


def sign(key: str, msg_id: str, timestamp: str, payload: str) -> str:
    raw = base64.b64decode(key.removeprefix("whsec_"))
    mac = hmac.new(raw, f"{msg_id}.{timestamp}.{payload}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def headers(
    msg_id: str = DELIVERY_ID, timestamp: int | str = NOW, payload: str = BODY, key: str = SECRET, **extra: str
) -> dict[str, str]:
    stamp = str(timestamp)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": stamp,
        "webhook-signature": sign(key, msg_id, stamp, payload),
        **extra,
    }


def parsed(timestamp: int = NOW, traceparent: str | None = None, attempt: int = 1) -> dict[str, Any]:
    """What a verifier returns for a good delivery (the fields every SDK's tests compare)."""
    return {
        "id": DELIVERY_ID,
        "timestamp": timestamp,
        "job_id": JOB_ID,
        "task_name": "send-welcome",
        "payload": job()["payload"],
        "lease_token": LEASE_TOKEN,
        "attempt": attempt,
        "traceparent": traceparent,
    }


def valid(
    name: str, description: str, hdrs: dict[str, str], payload: str = BODY, key: str = SECRET, **expected: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "secret": key,
        "headers": hdrs,
        "body": payload,
        "now": NOW,
        "expect": {"valid": True, "delivery": parsed(**expected)},
    }


def invalid(
    name: str, description: str, hdrs: dict[str, str], reason: str, payload: str = BODY, key: str = SECRET
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "secret": key,
        "headers": hdrs,
        "body": payload,
        "now": NOW,
        "expect": {"valid": False, "reason": reason},
    }


def without(name: str) -> dict[str, str]:
    hdrs = headers()
    del hdrs[name]
    return hdrs


def with_signature(value: str) -> dict[str, str]:
    return {**headers(), "webhook-signature": value}


def cases() -> list[dict[str, Any]]:
    good = headers()["webhook-signature"]
    old = headers(key=OLD_SECRET)["webhook-signature"]
    other = headers(key=OTHER_SECRET)["webhook-signature"]
    pretty = json.dumps(json.loads(BODY), ensure_ascii=False, indent=2)
    retried = body(attempt=2)
    return [
        valid("good_signature", "A delivery signed with the endpoint's secret, stamped now.", headers()),
        valid(
            "header_names_in_any_case",
            "Header names are case-insensitive (a proxy may send Webhook-Id).",
            {"Webhook-Id": DELIVERY_ID, "WEBHOOK-TIMESTAMP": str(NOW), "Webhook-Signature": good},
        ),
        valid(
            "pretty_printed_body",
            "The signature covers the body's bytes as sent, whatever its layout: never re-serialise it.",
            headers(payload=pretty),
            payload=pretty,
        ),
        valid(
            "traceparent_passed_on",
            "The job's traceparent header is returned with the delivery.",
            headers(traceparent=TRACEPARENT),
            traceparent=TRACEPARENT,
        ),
        valid(
            "a_retry_is_a_new_attempt",
            "A later attempt of the job: a new body and timestamp, signed again.",
            headers(timestamp=NOW - 10, payload=retried),
            payload=retried,
            timestamp=NOW - 10,
            attempt=2,
        ),
        invalid(
            "tampered_body",
            "The body was changed after signing (attempt 1 became 2).",
            headers(),
            "signature_mismatch",
            payload=retried,
        ),
        invalid(
            "tampered_body_whitespace",
            "One space added to the body after signing.",
            headers(),
            "signature_mismatch",
            payload=BODY[:-1] + " }",
        ),
        invalid(
            "tampered_id",
            "The webhook-id header differs from the one signed.",
            {**headers(), "webhook-id": "0c5d3e0a-6f47-4a4e-9a57-3b1f0d8f2c12"},
            "signature_mismatch",
        ),
        invalid(
            "tampered_timestamp",
            "The timestamp was moved one second after signing (still within the tolerance).",
            {**headers(), "webhook-timestamp": str(NOW - 1)},
            "signature_mismatch",
        ),
        valid(
            "old_timestamp_at_the_tolerance",
            "Stamped exactly 300 seconds before now: still accepted.",
            headers(timestamp=NOW - TOLERANCE),
            timestamp=NOW - TOLERANCE,
        ),
        invalid(
            "old_timestamp",
            "Stamped 301 seconds before now, correctly signed: a replay, refused.",
            headers(timestamp=NOW - TOLERANCE - 1),
            "timestamp_too_old",
        ),
        invalid(
            "very_old_timestamp",
            "Stamped a day before now, correctly signed.",
            headers(timestamp=NOW - 86400),
            "timestamp_too_old",
        ),
        valid(
            "future_timestamp_at_the_tolerance",
            "Stamped exactly 300 seconds after now (clock skew): still accepted.",
            headers(timestamp=NOW + TOLERANCE),
            timestamp=NOW + TOLERANCE,
        ),
        invalid(
            "future_timestamp",
            "Stamped 301 seconds after now, correctly signed.",
            headers(timestamp=NOW + TOLERANCE + 1),
            "timestamp_too_new",
        ),
        invalid(
            "timestamp_in_milliseconds",
            "A timestamp in milliseconds is a valid integer, far in the future.",
            headers(timestamp=NOW * 1000),
            "timestamp_too_new",
        ),
        invalid(
            "wrong_secret",
            "Signed with another endpoint's secret.",
            headers(key=OTHER_SECRET),
            "signature_mismatch",
        ),
        valid(
            "rotation_new_secret",
            "During a rotation both secrets sign; the receiver holds the new one.",
            with_signature(f"{old} {good}"),
        ),
        valid(
            "rotation_old_secret",
            "During a rotation both secrets sign; the receiver still holds the old one.",
            with_signature(f"{old} {good}"),
            key=OLD_SECRET,
        ),
        invalid(
            "multiple_signatures_none_valid",
            "Two signatures, neither by this receiver's secret.",
            with_signature(f"{old} {other}"),
            "signature_mismatch",
        ),
        valid(
            "runs_of_spaces_between_signatures",
            "Entries are separated by one or more spaces; leading and trailing spaces are ignored.",
            with_signature(f"  {other}   {good} "),
        ),
        valid(
            "other_versions_ignored",
            "Entries of other versions (v1a, v2) are skipped; a matching v1 entry is enough.",
            with_signature(f"v1a,{good[3:]} v2,AAAA {good}"),
        ),
        invalid(
            "right_signature_under_another_version",
            "The right MAC labelled v2 does not count: only v1 entries are checked.",
            with_signature("v2," + good[3:]),
            "signature_mismatch",
        ),
        valid(
            "undecodable_v1_entry_ignored",
            "A v1 entry that is not base64 simply does not match; another entry does.",
            with_signature(f"v1,not*base64! {good}"),
        ),
        invalid(
            "truncated_signature",
            "The right signature with its last characters cut off.",
            with_signature(good[:-4]),
            "signature_mismatch",
        ),
        invalid(
            "signature_without_version",
            "A signature entry with no `version,` prefix is malformed.",
            with_signature(good[3:]),
            "malformed_header",
        ),
        invalid(
            "signature_entry_with_empty_version",
            "An entry whose version is empty (`,<signature>`) is malformed.",
            with_signature(good[2:]),
            "malformed_header",
        ),
        invalid("missing_signature", "No webhook-signature header.", without("webhook-signature"), "missing_header"),
        invalid(
            "empty_signature",
            "An empty (or all-space) webhook-signature header counts as missing.",
            with_signature("   "),
            "missing_header",
        ),
        invalid("missing_id", "No webhook-id header.", without("webhook-id"), "missing_header"),
        invalid("missing_timestamp", "No webhook-timestamp header.", without("webhook-timestamp"), "missing_header"),
        invalid(
            "non_numeric_timestamp",
            "The timestamp must be decimal digits.",
            headers(timestamp="17672256OO"),
            "malformed_header",
        ),
        invalid(
            "fractional_timestamp",
            "The timestamp is whole seconds.",
            headers(timestamp=f"{NOW}.5"),
            "malformed_header",
        ),
        invalid(
            "signed_timestamp",
            "A sign is not a digit (negative and +-prefixed timestamps are malformed).",
            headers(timestamp=f"+{NOW}"),
            "malformed_header",
        ),
        invalid(
            "timestamp_too_long",
            "More than 15 digits is malformed (every SDK reads the value exactly).",
            headers(timestamp="1" * 16),
            "malformed_header",
        ),
        invalid(
            "secret_without_prefix",
            "A secret must start with whsec_.",
            headers(),
            "malformed_secret",
            key=SECRET.removeprefix("whsec_"),
        ),
        invalid("empty_secret", "whsec_ and nothing after it.", headers(), "malformed_secret", key="whsec_"),
        invalid(
            "secret_not_base64",
            "The part after whsec_ must be standard base64.",
            headers(),
            "malformed_secret",
            key="whsec_not*base64!",
        ),
        invalid(
            "secret_without_padding",
            "Standard base64 with its padding: a secret missing its '=' is malformed.",
            headers(),
            "malformed_secret",
            key=SECRET.rstrip("="),
        ),
        invalid(
            "secret_not_canonical",
            "Base64 whose unused bits are not zero (QR== for the byte 0x41, canonically QQ==) is malformed.",
            headers(key="whsec_QQ=="),
            "malformed_secret",
            key="whsec_QR==",
        ),
        invalid(
            "secret_url_safe_alphabet",
            "The URL-safe alphabet (- and _) is not the standard one.",
            headers(),
            "malformed_secret",
            key="whsec_" + base64.urlsafe_b64encode(b"\xfb\xff\xfe" * 8).decode(),
        ),
        invalid(
            "body_not_json",
            "Correctly signed, but the body is not JSON.",
            headers(payload="not json"),
            "malformed_body",
            payload="not json",
        ),
        invalid(
            "body_not_an_object",
            "Correctly signed, but the body is a JSON array.",
            headers(payload="[1,2]"),
            "malformed_body",
            payload="[1,2]",
        ),
        *(
            invalid(
                f"body_{what}",
                f"Correctly signed, but the body's {what.replace('_', ' ')}.",
                headers(payload=text),
                "malformed_body",
                payload=text,
            )
            for what, text in [
                ("lacks_lease_token", json.dumps({"job": job(), "attempt": 1})),
                ("lacks_job", json.dumps({"lease_token": LEASE_TOKEN, "attempt": 1})),
                ("attempt_is_a_string", json.dumps({"job": job(), "lease_token": LEASE_TOKEN, "attempt": "1"})),
                ("job_is_a_string", json.dumps({"job": JOB_ID, "lease_token": LEASE_TOKEN, "attempt": 1})),
                (
                    "job_lacks_its_id",
                    json.dumps(
                        {"job": {k: v for k, v in job().items() if k != "id"}, "lease_token": LEASE_TOKEN, "attempt": 1}
                    ),
                ),
            ]
        ),
    ]


def document() -> str:
    doc = {
        "description": (
            "Push-delivery signature vectors (Standard Webhooks). Generated by generate.py; do not edit. "
            "Verify each case's headers and body with its secret at the time `now` (Unix seconds) and a "
            "tolerance of `tolerance_secs`; `expect` is the outcome: the parsed delivery, or the reason "
            "it is refused."
        ),
        "tolerance_secs": TOLERANCE,
        "reasons": [
            "malformed_secret",
            "missing_header",
            "malformed_header",
            "timestamp_too_old",
            "timestamp_too_new",
            "signature_mismatch",
            "malformed_body",
        ],
        "cases": cases(),
    }
    names = [case["name"] for case in doc["cases"]]
    assert len(names) == len(set(names)), "case names must be unique"
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def main() -> int:
    text = document()
    if "--check" in sys.argv[1:]:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} differs from what generate.py makes: run it and commit the file", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
