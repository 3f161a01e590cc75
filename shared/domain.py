"""The domain vocabulary: statuses, job configuration defaults and bounds, and domain errors.

Nothing here does I/O. The HTTP layer maps `DomainError` subclasses to status codes and the
contract's error body in one middleware.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

JOB_STATUSES = ("pending", "running", "completed", "failed", "retrying", "cancelled")
TERMINAL_JOB_STATUSES = frozenset({"completed", "failed", "cancelled"})
ACTIVE_JOB_STATUSES = ("pending", "retrying", "running")
BACKOFF_STRATEGIES = ("fixed", "linear", "exponential")

# Upstream defaults (API-NOTES section 6) and the bounds every entry point enforces.
DEFAULT_CONFIG: dict[str, Any] = {
    "priority": 0,
    "max_retries": 3,
    "timeout_secs": 300,
    "retry_backoff": "exponential",
    "retry_delay_secs": 60,
    "retry_max_delay_secs": 3600,
    "jitter_factor": 0.1,
}
MAX_RETRIES = 1000
MAX_TIMEOUT_SECS = 86_400
MAX_DELAY_SECS = 2_592_000  # 30 days
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_FAN_OUT = 10_000  # elements one fan-out step may spawn (FanOut.max_items defaults to it)
MAX_WORKFLOW_DEPTH = 8  # sub-workflows nest at most this deep
MAX_WORKFLOW_STEPS = 1000

WORKFLOW_STATUSES = ("created", "running", "completed", "failed", "partially_failed", "cancelled")
TERMINAL_WORKFLOW_STATUSES = frozenset({"completed", "failed", "partially_failed", "cancelled"})
TERMINAL_STEP_STATUSES = frozenset({"completed", "failed", "cancelled", "skipped"})


class DomainError(Exception):
    """An expected failure with an HTTP meaning; `message` is what the client sees."""

    status = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ValidationFailed(DomainError):
    status = 400

    def __init__(self, detail: str) -> None:
        super().__init__(f"validation error: {detail}")


class Unauthorized(DomainError):
    status = 401

    def __init__(self) -> None:
        super().__init__("unauthorized")


class Forbidden(DomainError):
    status = 403

    def __init__(self, message: str = "access denied") -> None:
        super().__init__(message)


class NotFound(DomainError):
    status = 404


class InvalidWorkflow(DomainError):
    status = 400

    def __init__(self, detail: str) -> None:
        super().__init__(f"invalid workflow: {detail}")


class Conflict(DomainError):
    status = 409

    def __init__(self, detail: str) -> None:
        super().__init__(f"conflict: {detail}")


class PayloadTooLarge(DomainError):
    status = 413


_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)


def is_utf8(text: str) -> bool:
    """False for a header value that was not UTF-8 (aiohttp hands such bytes over as surrogate
    escapes, which neither hashing nor PostgreSQL accepts)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def instant(name: str, value: datetime | None) -> datetime | None:
    """A request timestamp in UTC (naive means UTC), inside the range PostgreSQL stores finitely."""
    if value is None:
        return None
    try:
        value = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    except OverflowError:
        raise ValidationFailed(f"{name} is out of range") from None
    if not _EARLIEST <= value <= _LATEST:
        raise ValidationFailed(f"{name} is out of range")
    return value


def resolve_config(
    *,
    priority: int | None = None,
    max_retries: int | None = None,
    timeout_secs: int | None = None,
    retry_backoff: str | None = None,
    retry_delay_secs: int | None = None,
    retry_max_delay_secs: int | None = None,
    jitter_factor: float | None = None,
) -> dict[str, Any]:
    """A complete stored config: every omitted field takes its default. Bounds are checked by the
    wire types before this is called; `jitter_factor` is dropped only when explicitly null upstream,
    which a request cannot express, so it is always present here."""
    given = {
        "priority": priority,
        "max_retries": max_retries,
        "timeout_secs": timeout_secs,
        "retry_backoff": retry_backoff,
        "retry_delay_secs": retry_delay_secs,
        "retry_max_delay_secs": retry_max_delay_secs,
        "jitter_factor": jitter_factor,
    }
    return {k: (DEFAULT_CONFIG[k] if v is None else v) for k, v in given.items()}


def backoff_bounds(config: dict[str, Any], attempt: int) -> tuple[float, float]:
    """The (lowest, highest) retry delay in seconds the database function can pick for `attempt`.

    Used by tests to check the SQL; the database computes the actual delay.
    """
    base = float(config["retry_delay_secs"])
    cap = float(config["retry_max_delay_secs"])
    strategy = config["retry_backoff"]
    if strategy == "fixed":
        raw = base
    elif strategy == "linear":
        raw = base * (attempt + 1)
    else:
        raw = base * 2 ** min(attempt, 62)
    delay = min(cap, raw)
    jitter = min(max(float(config.get("jitter_factor") or 0.0), 0.0), 1.0)
    return max(0.0, round(delay * (1 - jitter))), min(cap, round(delay * (1 + jitter)))
