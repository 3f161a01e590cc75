"""Push delivery (docs/push.md): a tenant's HTTP endpoints, which the pusher service calls with each
job of their queues instead of a worker leasing it.

The rules live here once: what an endpoint may be (its URL, queues, concurrency, time-out and static
headers), its signing secrets (Standard Webhooks: `whsec_<base64>`, HMAC-SHA256 over
"{id}.{timestamp}.{body}"), which addresses a delivery may reach (the SSRF defence), what each answer
of the receiver does to the job, and the circuit breaker's schedule.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import ipaddress
import re
import secrets
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

from msgspec import Struct

from shared.domain.errors import Conflict, ValidationFailed
from shared.domain.jobs import MAX_DELAY_SECS, MAX_NAME_BYTES, check_queue_name

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
MAX_URL_CHARS = 2048
MAX_ENDPOINT_QUEUES = 100
MAX_CONCURRENCY = 1000
DEFAULT_CONCURRENCY = 10
MAX_TIMEOUT_SECS = 900
DEFAULT_TIMEOUT_SECS = 30
MAX_HEADERS = 32
MAX_HEADER_VALUE_CHARS = 4096
# What the attempt history keeps of an answer's body.
KEPT_BODY_BYTES = 1024
# A rotated-out secret keeps signing beside the new one for this long unless the rotation says.
DEFAULT_ROTATION_GRACE_SECS = 86_400
MAX_ROTATION_GRACE_SECS = 7 * 86_400

# Headers a delivery sets itself: static headers may not name them.
RESERVED_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "host",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "traceparent",
        "tracestate",
    }
)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

# The cloud metadata addresses: refused even when an allowed range covers them.
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class BreakerState(enum.StrEnum):
    CLOSED = "closed"  # deliveries flow
    OPEN = "open"  # the endpoint kept failing: its jobs wait until `open_until`
    HALF_OPEN = "half_open"  # one delivery at a time tells whether it recovered


class Breaker(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The endpoint's circuit breaker as its GET shows it."""

    state: BreakerState
    consecutive_failures: int
    open_until: datetime | None = None


class PushEndpoint(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """An endpoint as its tenant sees it (never its secret): `headers` left out when it has none."""

    id: uuid.UUID
    name: str
    url: str
    queues: list[str]
    concurrency: int
    timeout_secs: int
    paused: bool
    breaker: Breaker
    created_at: datetime
    updated_at: datetime
    headers: dict[str, str] | None = None
    # When a rotated-out secret stops signing (absent when none signs beside the current one).
    previous_secret_expires_at: datetime | None = None


class NewPushEndpoint(Struct, frozen=True, kw_only=True):
    """An endpoint to create, its rules checked (`new_endpoint`)."""

    name: str
    url: str
    queues: list[str]
    concurrency: int
    timeout_secs: int
    headers: dict[str, str] | None


class EndpointChange(Struct, frozen=True, kw_only=True):
    """A PATCH, its rules checked: None leaves a field as it is (`headers` {} removes them)."""

    name: str | None = None
    url: str | None = None
    queues: list[str] | None = None
    concurrency: int | None = None
    timeout_secs: int | None = None
    headers: dict[str, str] | None = None
    paused: bool | None = None


class Delivery(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One HTTP delivery of a job: what the attempt history and the endpoint's recent deliveries
    show. `status` is absent when no answer came (a time-out, a refused or failed connection)."""

    endpoint_id: uuid.UUID
    job_id: uuid.UUID
    attempt: int
    webhook_id: str
    outcome: str
    latency_ms: float
    delivered_at: datetime
    status: int | None = None
    body: str | None = None
    error: str | None = None


# --- endpoints -----------------------------------------------------------------------------------


def check_endpoint_name(name: str) -> str:
    if not name.strip() or len(name.encode()) > MAX_NAME_BYTES:
        raise ValidationFailed(f"name must be 1 to {MAX_NAME_BYTES} bytes and not blank")
    return name


def check_queues(queues: Sequence[str]) -> list[str]:
    """1 to MAX_ENDPOINT_QUEUES queue names, duplicates dropped, order kept."""
    if not queues:
        raise ValidationFailed("queues must name at least one queue")
    if len(queues) > MAX_ENDPOINT_QUEUES:
        raise ValidationFailed(f"queues may name at most {MAX_ENDPOINT_QUEUES} queues")
    return list(dict.fromkeys(check_queue_name(q) for q in queues))


def check_concurrency(value: int) -> int:
    if not 1 <= value <= MAX_CONCURRENCY:
        raise ValidationFailed(f"concurrency must be 1 to {MAX_CONCURRENCY}, not {value}")
    return value


def check_timeout(value: int) -> int:
    if not 1 <= value <= MAX_TIMEOUT_SECS:
        raise ValidationFailed(f"timeout_secs must be 1 to {MAX_TIMEOUT_SECS}, not {value}")
    return value


def check_headers(headers: dict[str, str] | None) -> dict[str, str] | None:
    """Static headers: HTTP field names (not one a delivery sets itself), values without line
    breaks or control characters. {} and None are no headers."""
    if not headers:
        return None
    if len(headers) > MAX_HEADERS:
        raise ValidationFailed(f"headers may hold at most {MAX_HEADERS} headers")
    seen: set[str] = set()
    for name, value in headers.items():
        lower = name.lower()
        if not _TOKEN.match(name):
            raise ValidationFailed(f"header name {name!r} is not an HTTP field name")
        if lower in RESERVED_HEADERS:
            raise ValidationFailed(f"header {name!r} is set by every delivery and cannot be static")
        if lower in seen:
            raise ValidationFailed(f"header {name!r} is given twice")
        seen.add(lower)
        if len(value) > MAX_HEADER_VALUE_CHARS or _BAD_VALUE.search(value):
            raise ValidationFailed(
                f"header {name!r} must be at most {MAX_HEADER_VALUE_CHARS} characters with no line"
                " breaks or control characters"
            )
    return dict(headers)


def check_url(url: str, allowed: Sequence[Network] = ()) -> str:
    """An http(s) URL with a host, no credentials and no fragment; a host that is an IP address (or
    `localhost`) is judged now against the SSRF rules (`refusal`). A name is judged when it is
    resolved (`check_resolved`), here and again at every delivery."""
    if len(url) > MAX_URL_CHARS:
        raise ValidationFailed(f"url must be at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise ValidationFailed(f"url is not a valid URL: {err}") from None
    if parts.scheme not in ("http", "https"):
        raise ValidationFailed("url must be an http:// or https:// URL")
    host = parts.hostname
    if not host:
        raise ValidationFailed("url has no host")
    if parts.username is not None or parts.password is not None:
        raise ValidationFailed("url may not carry credentials (use static headers)")
    if parts.fragment:
        raise ValidationFailed("url may not have a fragment")
    if port == 0:
        raise ValidationFailed("url's port must be 1 to 65535")
    literal = ip_literal(host)
    if literal is not None:
        why = refusal(literal, allowed)
        if why is not None:
            raise ValidationFailed(f"url's host {host} is {why}: push deliveries refuse it")
    elif is_local_name(host) and refusal(ipaddress.ip_address("127.0.0.1"), allowed) is not None:
        raise ValidationFailed(f"url's host {host} is a loopback name: push deliveries refuse it")
    return url


def new_endpoint(
    name: str,
    url: str,
    queues: Sequence[str],
    concurrency: int,
    timeout_secs: int,
    headers: dict[str, str] | None,
    allowed: Sequence[Network] = (),
) -> NewPushEndpoint:
    return NewPushEndpoint(
        name=check_endpoint_name(name),
        url=check_url(url, allowed),
        queues=check_queues(queues),
        concurrency=check_concurrency(concurrency),
        timeout_secs=check_timeout(timeout_secs),
        headers=check_headers(headers),
    )


def endpoint_change(
    *,
    name: str | None,
    url: str | None,
    queues: Sequence[str] | None,
    concurrency: int | None,
    timeout_secs: int | None,
    headers: dict[str, str] | None,
    paused: bool | None,
    allowed: Sequence[Network] = (),
) -> EndpointChange:
    return EndpointChange(
        name=None if name is None else check_endpoint_name(name),
        url=None if url is None else check_url(url, allowed),
        queues=None if queues is None else check_queues(queues),
        concurrency=None if concurrency is None else check_concurrency(concurrency),
        timeout_secs=None if timeout_secs is None else check_timeout(timeout_secs),
        headers=None if headers is None else (check_headers(headers) or {}),
        paused=paused,
    )


def queue_taken(queue: str, endpoint_name: str) -> Conflict:
    return Conflict(f"queue {queue!r} is already drained by push endpoint {endpoint_name!r}")


class PushedQueue(Struct, frozen=True):
    """A queue some tenants bound to a push endpoint: `tenants`, and whether they are all of the
    queue's tenants (`everyone`)."""

    tenants: frozenset[str]
    everyone: bool

    def refuses(self, tenant: str | None) -> bool:
        """Whether a lease is refused: a worker key's (`tenant`) when its tenant bound the queue;
        the worker token's (None, every tenant's jobs) only when no tenant is left to lease for,
        since its claims leave the bound tenants' jobs out."""
        return self.everyone if tenant is None else tenant in self.tenants


def queue_is_pushed(queue: str) -> Conflict:
    """The answer to a lease of a queue drained by push delivery."""
    return Conflict(
        f"queue {queue!r} is bound to a push endpoint and drained by push delivery only:"
        " it cannot be leased (docs/push.md)"
    )


def check_rotation_grace(secs: int | None) -> int:
    if secs is None:
        return DEFAULT_ROTATION_GRACE_SECS
    if not 0 <= secs <= MAX_ROTATION_GRACE_SECS:
        raise ValidationFailed(f"grace_secs must be 0 to {MAX_ROTATION_GRACE_SECS}, not {secs}")
    return secs


# --- signing -------------------------------------------------------------------------------------


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def secret_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret: its decoded bytes."""
    return base64.b64decode(secret.removeprefix(SECRET_PREFIX))


def sign(key: bytes, webhook_id: str, timestamp: int, body: bytes) -> str:
    """One `v1,<base64>` signature: HMAC-SHA256 over "{id}.{timestamp}.{body}"."""
    signed = b"%s.%d.%s" % (webhook_id.encode(), timestamp, body)
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def signature_header(keys: Iterable[bytes], webhook_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` value: one signature per signing key, space-separated (a receiver
    accepts the delivery when any one matches: during a rotation, both secrets sign)."""
    return " ".join(sign(key, webhook_id, timestamp, body) for key in keys)


def webhook_id(job_id: uuid.UUID, attempt: int) -> str:
    """The delivery's id: the same for every send of one attempt of one job."""
    return f"msg_{job_id.hex}_{attempt}"


# --- the SSRF defence ----------------------------------------------------------------------------


def parse_cidrs(entries: Iterable[str]) -> tuple[Network, ...]:
    """--push-allow-cidrs: each entry a CIDR (or a bare address); ValueError names a bad one."""
    out: list[Network] = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            raise ValueError(f"not a CIDR range: {entry!r}") from None
    return tuple(out)


def ip_literal(host: str) -> Address | None:
    """The address `host` spells, if it is one (IPv6 with or without brackets)."""
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def is_local_name(host: str) -> bool:
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def refusal(address: Address, allowed: Sequence[Network] = ()) -> str | None:
    """Why a delivery may not reach `address` (None: it may). Refused by default: loopback,
    private, link-local, multicast, unspecified and other non-global addresses, for IPv4, IPv6 and
    IPv4-mapped IPv6 alike; the cloud metadata addresses always. An address in an `allowed` range
    (--push-allow-cidrs) may be reached unless it is a metadata address."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    forms: list[Address] = [address] if mapped is None else [address, mapped]
    if any(form in METADATA_ADDRESSES for form in forms):
        return "a cloud metadata address"
    if any(form in net for form in forms for net in allowed if form.version == net.version):
        return None
    for form in forms:  # (both forms of a mapped address: ::ffff:127.0.0.1 is loopback)
        if form.is_unspecified:
            return "an unspecified address"
    for form in forms:
        if form.is_loopback:
            return "a loopback address"
    for form in forms:
        if form.is_link_local:
            return "a link-local address"
    for form in forms:
        if form.is_multicast:
            return "a multicast address"
    if any(form.is_private or not form.is_global or form.is_reserved for form in forms):
        return "a private address"
    return None


def check_resolved(host: str, addresses: Sequence[Address], allowed: Sequence[Network] = ()) -> None:
    """Every address `host` resolved to must be one a delivery may reach: one refused address
    refuses the host (a name that resolves to a public and a private address could be steered to
    either)."""
    for address in addresses:
        why = refusal(address, allowed)
        if why is not None:
            raise ValidationFailed(
                f"url's host {host} resolves to {address}, {why}: push deliveries refuse it"
            )


# --- answers -------------------------------------------------------------------------------------


class Outcome(enum.StrEnum):
    """What a delivery did to its job (also the `outcome` label of the delivery metrics)."""

    COMPLETED = "completed"  # a 2xx with a result (or none)
    ACCEPTED = "accepted"  # a 202: the receiver finishes the job through the worker routes
    RETRY = "retry"  # a retryable failure (408, 409, 425, 429, 5xx, a time-out, a connection error)
    FAILED = "failed"  # not retryable (another answer, a refused address, a redirect)
    LOST = "lost"  # the job was no longer ours when the outcome was written (cancelled, reclaimed)


RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})


def outcome_of(status: int) -> Outcome:
    """What an HTTP answer's status does to the job."""
    if status == 202:
        return Outcome.ACCEPTED
    if 200 <= status < 300:
        return Outcome.COMPLETED
    if status in RETRYABLE_STATUSES or status >= 500:
        return Outcome.RETRY
    return Outcome.FAILED


def retry_after_secs(value: str | None, now: datetime) -> int | None:
    """A `Retry-After` header (seconds, or an HTTP date) as whole seconds from now, capped at the
    longest delay a job may have; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return min(int(text), MAX_DELAY_SECS)
    try:
        at = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if at.tzinfo is None:
        return None
    return max(0, min(int((at - now).total_seconds() + 0.999), MAX_DELAY_SECS))


def kept_body(body: bytes) -> str | None:
    """The first KiB of an answer's body, as text (invalid UTF-8 replaced), for the history."""
    if not body:
        return None
    return body[:KEPT_BODY_BYTES].decode("utf-8", "replace")


def failure_message(status: int | None, body: str | None, detail: str | None = None) -> str:
    """The job's error message for a failed delivery."""
    if status is None:
        return f"push delivery failed: {detail or 'no answer'}"
    text = f"push delivery answered HTTP {status}"
    if detail:
        text += f" ({detail})"
    if body:
        text += f": {body[:200]}"
    return text


# --- the circuit breaker -------------------------------------------------------------------------

BREAKER_MAX_OPEN_SECS = 300


def breaker_open_secs(failures: int, threshold: int, base_secs: float) -> float:
    """How long the breaker stays open after the `failures`-th consecutive failure (threshold
    reached: base, then doubling with each further failure, up to BREAKER_MAX_OPEN_SECS)."""
    return float(min(base_secs * 2.0 ** max(0, failures - threshold), BREAKER_MAX_OPEN_SECS))


def breaker_state(failures: int, open_until: datetime | None, now: datetime) -> BreakerState:
    if open_until is None:
        return BreakerState.CLOSED
    return BreakerState.OPEN if open_until > now else BreakerState.HALF_OPEN


def breaker_of(failures: int, open_until: datetime | None, now: datetime) -> Breaker:
    return Breaker(
        state=breaker_state(failures, open_until, now), consecutive_failures=failures, open_until=open_until
    )


def grace_until(now: datetime, grace_secs: int) -> datetime | None:
    return now + timedelta(seconds=grace_secs) if grace_secs > 0 else None
