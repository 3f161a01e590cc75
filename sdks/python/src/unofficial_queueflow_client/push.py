"""Verifying push deliveries: QueueFlow calling your HTTP endpoint with a job.

A delivery is ``POST <your url>`` with the JSON body ``{"job", "lease_token", "attempt"}`` and the
Standard Webhooks headers ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``. Verify it
before you act on it:

    verifier = PushVerifier(os.environ["QUEUEFLOW_PUSH_SECRET"])   # "whsec_..."
    delivery = verifier.verify(request.headers, await request.read())

``verify`` checks the signature (HMAC-SHA256, compared in constant time; any one of several ``v1``
entries may match, as during a secret rotation) and the timestamp (at most 5 minutes off, either
way). It returns the parsed `PushDelivery`, or raises `InvalidPushDelivery` whose ``reason`` says
why. Pass the body's bytes exactly as received: the signature covers them, not their JSON.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Literal

import msgspec

from unofficial_queueflow_client.errors import QueueFlowError
from unofficial_queueflow_client.models import Job

__all__ = [
    "DEFAULT_TOLERANCE",
    "InvalidPushDelivery",
    "PushDelivery",
    "PushRejection",
    "PushVerifier",
]

DEFAULT_TOLERANCE = timedelta(minutes=5)
"""How far a delivery's timestamp may be from the receiver's clock, before or after."""

PushRejection = Literal[
    "malformed_secret",
    "missing_header",
    "malformed_header",
    "timestamp_too_old",
    "timestamp_too_new",
    "signature_mismatch",
    "malformed_body",
]

_PREFIX = "whsec_"
_TIMESTAMP = re.compile(r"[0-9]{1,15}")


class InvalidPushDelivery(QueueFlowError):
    """A push delivery (or the secret to check it with) failed verification.

    ``reason`` is one of `PushRejection`'s values, the same in every SDK
    (sdks/conformance/push/README.md): ``malformed_secret``, ``missing_header``,
    ``malformed_header``, ``timestamp_too_old``, ``timestamp_too_new``, ``signature_mismatch``,
    ``malformed_body``. Answer a refused delivery with a 4xx (QueueFlow treats most 4xx answers as
    a permanent failure of the job; see the SDK's README).
    """

    def __init__(self, reason: PushRejection, detail: str) -> None:
        self.reason: PushRejection = reason
        self.detail = detail
        super().__init__(f"push delivery refused ({reason}): {detail}")


class _Body(msgspec.Struct):
    job: Job
    lease_token: str
    attempt: int


_body_decoder = msgspec.json.Decoder(_Body)


class PushDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """A verified delivery."""

    id: str
    """The ``webhook-id``: the delivery's id, the same on every retry of one attempt (use it to
    drop a duplicate)."""
    timestamp: datetime
    """When QueueFlow sent it (``webhook-timestamp``), in UTC."""
    job: Job
    """The job, as a lease answer carries it."""
    lease_token: str
    """The job's lease: pass it to ``heartbeat``, ``complete`` or ``fail`` after answering 202."""
    attempt: int
    """Which attempt of the job this is."""
    traceparent: str | None = None
    """The job's W3C ``traceparent`` header, when it has one."""


def _decode_secret(secret: str) -> bytes:
    if not secret.startswith(_PREFIX):
        raise InvalidPushDelivery("malformed_secret", "a push secret starts with whsec_")
    encoded = secret[len(_PREFIX) :]
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        key = b""
    # Canonical standard base64 only, so that every SDK accepts exactly the same secrets.
    if not key or base64.b64encode(key).decode() != encoded:
        raise InvalidPushDelivery("malformed_secret", "the part after whsec_ is not standard base64 with padding")
    return key


def _lookup(headers: Mapping[str, str], name: str) -> str | None:
    """The header ``name`` (lowercase), whatever case the mapping has it in."""
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value


def _header(headers: Mapping[str, str], name: str) -> str:
    value = _lookup(headers, name)
    if value is None or not value.strip(" "):
        raise InvalidPushDelivery("missing_header", f"no {name} header")
    return value


class PushVerifier:
    """Checks push deliveries signed with one endpoint secret (``whsec_<base64>``).

    Raises `InvalidPushDelivery` (reason ``malformed_secret``) at once for a secret that is not of
    that form. ``tolerance`` is how far a delivery's timestamp may be from now, either way.
    """

    def __init__(self, secret: str, *, tolerance: timedelta = DEFAULT_TOLERANCE) -> None:
        self._key = _decode_secret(secret)
        self._tolerance = tolerance

    def verify(self, headers: Mapping[str, str], body: bytes | str, *, now: datetime | None = None) -> PushDelivery:
        """The delivery these headers and body make, once its signature and timestamp check out.

        ``headers`` is any mapping of the request's headers (aiohttp's ``request.headers``, a
        dict; names in any case); ``body`` the raw body (a ``str`` is taken as its UTF-8 bytes).
        ``now`` stands for the clock (tests); by default the current time.
        """
        raw = body.encode() if isinstance(body, str) else bytes(body)
        msg_id = _header(headers, "webhook-id")
        stamp = _header(headers, "webhook-timestamp")
        signatures = _header(headers, "webhook-signature")

        if not _TIMESTAMP.fullmatch(stamp):
            raise InvalidPushDelivery("malformed_header", "webhook-timestamp is not whole Unix seconds")
        candidates = []
        for entry in signatures.split(" "):
            if not entry:
                continue
            version, comma, value = entry.partition(",")
            if not comma or not version:
                raise InvalidPushDelivery("malformed_header", "a webhook-signature entry is not <version>,<signature>")
            if version == "v1":
                candidates.append(value)

        sent = int(stamp)
        clock = (now or datetime.now(UTC)).timestamp()
        tolerance = self._tolerance.total_seconds()
        if sent < clock - tolerance:
            raise InvalidPushDelivery("timestamp_too_old", f"sent at {sent}, more than {tolerance:g} s ago")
        if sent > clock + tolerance:
            raise InvalidPushDelivery("timestamp_too_new", f"sent at {sent}, more than {tolerance:g} s ahead")

        mac = hmac.new(self._key, f"{msg_id}.{stamp}.".encode() + raw, hashlib.sha256).digest()
        expected = base64.b64encode(mac)
        # Every candidate is compared (no early exit), each in constant time.
        matched = False
        for candidate in candidates:
            matched |= hmac.compare_digest(expected, candidate.encode("utf-8", "surrogateescape"))
        if not matched:
            raise InvalidPushDelivery("signature_mismatch", "no v1 signature matches this endpoint's secret")

        try:
            decoded = _body_decoder.decode(raw)
        except msgspec.DecodeError as err:
            raise InvalidPushDelivery("malformed_body", f"the body is not a delivery: {err}") from None
        return PushDelivery(
            id=msg_id,
            timestamp=datetime.fromtimestamp(sent, UTC),
            job=decoded.job,
            lease_token=decoded.lease_token,
            attempt=decoded.attempt,
            traceparent=_lookup(headers, "traceparent") or None,
        )
