"""Jobs: their statuses, their execution policy (config) with its defaults and bounds, and the
records the db layer answers with.

Nothing here does I/O. The types are frozen msgspec Structs: decoding one validates it, and their
JSON encoding is the wire shape, so the API returns them as they are (shared/wire.py re-exports
the records; only request bodies and envelopes are wire types of their own).
"""

from __future__ import annotations

import enum
import os
import re
import time
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from shared.domain.errors import ValidationFailed
from shared.domain.traces import TraceContext

Object = dict[str, Any]

_RAND_A = (1 << 12) - 1
_RAND_B = (1 << 62) - 1
_V7 = (0x7 << 76) | (0b10 << 62)


def new_job_ids(count: int) -> list[uuid.UUID]:
    """`count` new job ids: UUIDs of version 7 (RFC 9562), a millisecond timestamp followed by 74
    random bits. Ids written together land side by side in the primary-key index instead of on
    random pages, which keeps inserts and lookups cheap however many jobs the table holds. 74 random
    bits per millisecond keep collisions negligible; the timestamp says when the job was created,
    which the job's own record says anyway (lease tokens, which are secrets, stay random)."""
    stamp = (time.time_ns() // 1_000_000) << 80 | _V7
    rand = os.urandom(10 * count)
    ids = []
    # Built as the uuid module builds its own UUIDs, without uuid.UUID()'s checks of its arguments
    # (the values are in range by construction): they were half the cost of a 1,000-job batch's ids.
    new, put, unknown = _new_object, _set_attribute, uuid.SafeUUID.unknown
    for i in range(count):
        r = int.from_bytes(rand[10 * i : 10 * i + 10])
        made = new(uuid.UUID)
        put(made, "int", stamp | (r >> 68 & _RAND_A) << 64 | (r & _RAND_B))
        put(made, "is_safe", unknown)
        ids.append(made)
    return ids


_new_object = object.__new__
_set_attribute = object.__setattr__


class JobStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    RETRYING = "retrying"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_JOB_STATUSES


class Retention(enum.StrEnum):
    """What becomes of a queue's completed jobs (docs/operations.md, "Retention"): kept until the
    global retention (--retention-hours) deletes them, the default, or deleted by the statement
    that completes them. Failed and cancelled jobs are kept either way (a failure's dead letter
    points to its job)."""

    KEEP = "keep"
    REMOVE_COMPLETED = "remove_completed"


def parse_queue_retention(entries: tuple[str, ...]) -> dict[str, Retention]:
    """`QUEUE=RETENTION` entries (--queue-retention) as a map; ValidationFailed names the entry
    that is not one, or a queue named twice."""
    found: dict[str, Retention] = {}
    for entry in entries:
        queue, sep, value = entry.rpartition("=")
        queue, value = queue.strip(), value.strip()
        if not sep or value not in {r.value for r in Retention}:
            choices = " or ".join(r.value for r in Retention)
            raise ValidationFailed(f"{entry!r} is not QUEUE=RETENTION with RETENTION {choices}")
        check_queue_name(queue)
        if queue in found:
            raise ValidationFailed(f"queue {queue!r} is named twice")
        found[queue] = Retention(value)
    return found


TERMINAL_JOB_STATUSES = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})
# Statuses a job can still leave by itself; cancel-by-filter and the claim index cover these.
ACTIVE_JOB_STATUSES = (JobStatus.PENDING, JobStatus.RETRYING, JobStatus.RUNNING)
# Statuses from which a job can be run again in place (POST /jobs/{id}/retry).
RETRYABLE_JOB_STATUSES = (JobStatus.FAILED, JobStatus.CANCELLED)


def retry_refusal(status: JobStatus, workflow_id: str | None) -> str:
    """Why a job cannot be retried in place (the Conflict's reason)."""
    if workflow_id is not None:
        return (
            f"job belongs to workflow {workflow_id}; retry the workflow with "
            f"POST /api/v1/workflows/{workflow_id}/retry"
        )
    return f"job is {status}; only a failed or cancelled job can be retried"


class BackoffStrategy(enum.StrEnum):
    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class DeadLetterReason(enum.StrEnum):
    MAX_ATTEMPTS_EXCEEDED = "max_attempts_exceeded"
    NON_RETRYABLE = "non_retryable"
    HANDLER_NOT_FOUND = "handler_not_found"


# Bounds every entry point enforces (the API through these annotations, SQL's enqueue functions
# by the same numbers; tests/db/test_sql_defaults.py checks that they agree).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
MAX_RETRIES = 1000
MAX_TIMEOUT_SECS = 86_400
MAX_DELAY_SECS = 2_592_000  # 30 days
MAX_NAME_BYTES = 255  # task names, idempotency keys, workflow and step names
MAX_QUEUE_BYTES = 128

# The characters str.isspace() and str.strip() treat as whitespace, and the control characters,
# spelled out as regular-expression classes that mean the same in Python and in a JSON Schema
# pattern (ECMA-262's `\s` differs from Python's). The checks below and the OpenAPI document's
# patterns (services/api/openapi.py) are built from these, so the two cannot drift apart.
SPACE_CHARS = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
CONTROL_CHARS = r"\x00-\x1f\x7f-\x9f"
# A queue name: no whitespace, no control characters (and 1 to MAX_QUEUE_BYTES bytes of UTF-8).
QUEUE_NAME_PATTERN = f"^[^{CONTROL_CHARS}{SPACE_CHARS}]+$"
# Text that says something: at least one character that is not whitespace, and no NUL.
NON_BLANK_PATTERN = f"^[^\\x00]*[^\\x00{SPACE_CHARS}][^\\x00]*$"
_BAD_QUEUE_CHARS = re.compile(f"[{CONTROL_CHARS}{SPACE_CHARS}]")


def _is_name(text: str, max_bytes: int) -> bool:
    """1 to `max_bytes` bytes of UTF-8 with no whitespace or control characters: a queue name's
    rule, and a limit key's. (Printable ASCII is every ASCII character but the controls, and the
    space is the one blank among them: the usual name is checked without the pattern.)"""
    if text.isascii():
        return 0 < len(text) <= max_bytes and text.isprintable() and " " not in text
    return 0 < len(text.encode(errors="surrogateescape")) <= max_bytes and not _BAD_QUEUE_CHARS.search(text)


Int32 = Annotated[int, Meta(ge=INT32_MIN, le=INT32_MAX)]
MaxRetries = Annotated[int, Meta(ge=0, le=MAX_RETRIES)]
TimeoutSecs = Annotated[int, Meta(ge=1, le=MAX_TIMEOUT_SECS)]
DelaySecs = Annotated[int, Meta(ge=0, le=MAX_DELAY_SECS)]
Jitter = Annotated[float, Meta(ge=0.0, le=1.0)]

# Flow control (docs/limits.md): a job names up to MAX_LIMIT_KEYS keys, each 1 to MAX_LIMIT_KEY_BYTES
# bytes of UTF-8 with no whitespace or control characters (the queue-name rule).
MAX_LIMIT_KEYS = 4
MAX_LIMIT_KEY_BYTES = 128
LimitKey = Annotated[str, Meta(min_length=1, max_length=MAX_LIMIT_KEY_BYTES)]
LimitKeys = Annotated[tuple[LimitKey, ...], Meta(max_length=MAX_LIMIT_KEYS)]


def check_limit_keys(keys: tuple[str, ...]) -> None:
    """The byte length and uniqueness the annotations cannot say (a key twice would take two slots)."""
    if len(keys) > MAX_LIMIT_KEYS:
        raise ValueError(f"limits takes at most {MAX_LIMIT_KEYS} keys, not {len(keys)}")
    for key in keys:
        if not _is_name(key, MAX_LIMIT_KEY_BYTES):
            raise ValueError(
                f"a limit key is 1 to {MAX_LIMIT_KEY_BYTES} bytes with no whitespace or control characters, not {key!r}"
            )
    if len(keys) > 1 and len(set(keys)) != len(keys):
        raise ValueError("limits names a key twice")


# Unique jobs over a window (docs/unique-jobs.md): a key of 1 to MAX_UNIQUE_KEY_BYTES bytes of UTF-8
# without control characters, held for 1 second to a year by the first job accepted with it.
MAX_UNIQUE_KEY_BYTES = 255
MAX_UNIQUE_WINDOW_SECS = 31_536_000
UniqueKey = Annotated[str, Meta(min_length=1, max_length=MAX_UNIQUE_KEY_BYTES)]
UniqueWindow = Annotated[int, Meta(ge=1, le=MAX_UNIQUE_WINDOW_SECS)]
_CONTROL = re.compile(f"[{CONTROL_CHARS}]")


class UniqueConflict(enum.StrEnum):
    """What a job whose key is held does: `skip` answers the holder (as an idempotency-key replay
    does); `replace` gives a holder that has not started its payload and schedule, and goes in
    beside one that has."""

    SKIP = "skip"
    REPLACE = "replace"


class UniquePolicy(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A job's `config.unique`. The database enforces it (migration 13's insert trigger), so every
    writer, the SQL enqueue functions included, shares one rule."""

    key: UniqueKey
    window_secs: UniqueWindow
    on_conflict: UniqueConflict = UniqueConflict.SKIP

    def __post_init__(self) -> None:
        if len(self.key.encode(errors="surrogateescape")) > MAX_UNIQUE_KEY_BYTES or _CONTROL.search(self.key):
            raise ValueError(
                f"a unique key is 1 to {MAX_UNIQUE_KEY_BYTES} bytes with no control characters, not {self.key!r}"
            )


class JobConfig(Struct, frozen=True, kw_only=True):
    """A job's execution policy, complete: every field has its default (API-NOTES section 6).

    Stored as the job's `config` column and returned as it is. Build one from a partial mapping
    with `JobConfig.of`, which validates the bounds and fills in the defaults.
    """

    priority: Int32 = 0
    max_retries: MaxRetries = 3
    timeout_secs: TimeoutSecs = 300
    retry_backoff: BackoffStrategy = BackoffStrategy.EXPONENTIAL
    retry_delay_secs: DelaySecs = 60
    retry_max_delay_secs: DelaySecs = 3600
    jitter_factor: Jitter = 0.1
    # Flow-control keys (an extension): left out of the JSON when the job has none, so the wire
    # shape upstream clients know is unchanged.
    limits: LimitKeys | UnsetType = UNSET
    # Unique jobs over a window (an extension, left out of the JSON when unused). Only jobs created
    # directly take one: a workflow's steps and a cron schedule's firings have their own identity.
    unique: UniquePolicy | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.limits is not UNSET:
            check_limit_keys(self.limits)

    @classmethod
    def of(cls, partial: Object | None = None, *, decoded: bool = False) -> JobConfig:
        """The complete config for `partial` (stored field names; absent or null takes the default).
        An unknown field or an out-of-range value is a ValidationFailed naming it. `decoded` says
        the values were decoded against these fields' own annotated types (a wire or partial config
        built from them): their bounds are not checked a second time, only the rules no annotation
        can say (__post_init__)."""
        given = {k: v for k, v in (partial or {}).items() if v is not None and v is not UNSET}
        if not given.get("limits", True):
            del given["limits"]  # an empty list names no key
        if not given:
            return DEFAULT_CONFIG  # frozen: one shared instance (most jobs give no policy)
        try:
            return cls(**given) if decoded else msgspec.convert(given, cls)
        except (msgspec.ValidationError, ValueError) as err:
            raise ValidationFailed(f"config: {err}") from None

    def backoff_bounds(self, attempt: int) -> tuple[float, float]:
        """The (lowest, highest) retry delay in seconds for retry number `attempt` (0-based).

        The database computes the actual delay (queueflow.retry_delay_secs); tests check it
        against these bounds. Jitter never pushes the delay past retry_max_delay_secs.
        """
        base, cap = float(self.retry_delay_secs), float(self.retry_max_delay_secs)
        if self.retry_backoff == BackoffStrategy.FIXED:
            raw = base
        elif self.retry_backoff == BackoffStrategy.LINEAR:
            raw = base * (attempt + 1)
        else:
            raw = base * 2 ** min(attempt, 62)
        delay = min(cap, raw)
        jitter = min(max(self.jitter_factor or 0.0, 0.0), 1.0)  # clamped, as SQL clamps it
        return max(0.0, round(delay * (1 - jitter))), min(cap, round(delay * (1 + jitter)))


# The policy of a job that gives none: one shared instance (the db layer encodes it once).
DEFAULT_CONFIG = JobConfig()


# The same fields, all optional: what a workflow step or a cron schedule stores as given (echoed
# back as given) and resolves with `resolve_partial` when it creates a job. Generated from
# JobConfig, so the fields and their bounds are declared once; the type checker sees a Struct.
class _CheckedLimits(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, kw_only=True):
    """The partial config's base: its limit keys are checked as a complete config's are, when the
    workflow or the cron schedule is written, not first when its job is."""

    def __post_init__(self) -> None:
        keys = getattr(self, "limits", None)
        if keys:
            check_limit_keys(keys)


if TYPE_CHECKING:
    PartialJobConfig = Struct
else:
    PartialJobConfig = msgspec.defstruct(
        "PartialJobConfig",
        [(f.name, f.type | None, None) for f in msgspec.structs.fields(JobConfig) if f.name != "unique"],
        bases=(_CheckedLimits,),
        frozen=True,
        forbid_unknown_fields=True,
        omit_defaults=True,
        kw_only=True,
    )


def resolve_partial(partial: PartialJobConfig | None) -> JobConfig:
    """The complete config for a partial one (its absent fields take their defaults)."""
    return JobConfig() if partial is None else JobConfig.of(msgspec.structs.asdict(partial), decoded=True)


_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)


def instant(name: str, value: datetime | None) -> datetime | None:
    """A timestamp in UTC (naive means UTC), inside the range PostgreSQL stores finitely."""
    if value is None:
        return None
    try:
        value = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    except OverflowError:
        raise ValidationFailed(f"{name} is out of range") from None
    if not _EARLIEST <= value <= _LATEST:
        raise ValidationFailed(f"{name} is out of range")
    return value


def utc_text(at: datetime) -> str:
    """An instant as the API writes it: RFC 3339 in UTC with `Z`."""
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_queue_name(name: str) -> str:
    """Wherever a queue is named (a job, a batch item, a step, a cron schedule, a lease, a pause):
    1 to 128 bytes of UTF-8 with no whitespace and no control characters."""
    if not _is_name(name, MAX_QUEUE_BYTES):
        raise ValidationFailed(
            f"queue name must be 1 to {MAX_QUEUE_BYTES} bytes with no whitespace or control characters, not {name!r}"
        )
    return name


def check_task_name(name: str) -> str:
    """A task name must say something: blank is a ValidationFailed."""
    if not name.strip():
        raise ValidationFailed("task_name is required")
    return name


class NewJob(Struct, frozen=True, kw_only=True):
    """A job to insert. The API, cron, DLQ replay and the workflow advancer all build these."""

    task_name: str
    queue: str
    config: JobConfig = JobConfig()
    payload: Object = msgspec.field(default_factory=dict)
    run_at: datetime | None = None
    metadata: Object = msgspec.field(default_factory=dict)
    idempotency_key: str | None = None
    workflow_id: str | None = None
    workflow_step: str | None = None
    step_index: int | None = None
    step_attempt: int | None = None
    # The W3C trace context the job was created in (shared/domain/traces.py), passed on at lease.
    trace: TraceContext | None = None
    # Its creator may read it back once it completed (a single create: upstream's client reads each
    # job it creates back and polls it to wait for it). On a queue that removes completed jobs it
    # is then kept for --removal-grace-secs after completing (docs/operations.md, "Retention").
    lingers: bool = False

    def __post_init__(self) -> None:
        check_task_name(self.task_name)
        check_queue_name(self.queue)


MAX_PROGRESS_MESSAGE = 1024  # characters
Percent = Annotated[float, Meta(ge=0, le=100)]
ProgressMessage = Annotated[str, Meta(max_length=MAX_PROGRESS_MESSAGE)]


class Progress(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """How far a running job got, as its worker last reported it (a heartbeat's `progress`, an
    extension: docs/visibility.md). Cleared when the job is claimed again."""

    percent: Percent
    message: ProgressMessage | None = None
    updated_at: datetime | None = None


class Job(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A job as stored; its JSON is the API's `Job`."""

    id: uuid.UUID
    queue_name: str
    task_name: str
    payload: Object
    config: JobConfig
    status: JobStatus
    retry_count: int
    delivery_count: int
    created_at: datetime
    scheduled_at: datetime
    metadata: Object
    started_at: datetime | None = None
    completed_at: datetime | None = None
    next_retry_at: datetime | None = None
    error_message: str | None = None
    result: Object | None = None
    idempotency_key: str | None = None
    tenant_id: str | None = None
    workflow_id: str | None = None
    workflow_step_id: str | None = None
    # An extension, left out when the job's worker never reported any.
    progress: Progress | None = None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_JOB_STATUSES


class Lease(Struct, frozen=True):
    """A claimed job and the token that proves the claim; every outcome write needs the token.
    `trace` is the trace context the job was created in, if any (the lease answer carries it)."""

    job: Job
    token: uuid.UUID
    trace: TraceContext | None = None


class DeadLetter(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A job that failed for good; replaying it enqueues a fresh copy, at most once."""

    id: int
    job_id: uuid.UUID
    reason: str
    created_at: datetime
    error_message: str | None = None
    queue_name: str | None = None
    task_name: str | None = None
    replayed_at: datetime | None = None
    replay_job_id: uuid.UUID | None = None
    tenant_id: str | None = None


class JobFilter(Struct, frozen=True, kw_only=True):
    """Which of a tenant's jobs or dead letters a bulk action (cancel, replay) applies to."""

    queue: str | None = None
    task_name: str | None = None
    statuses: tuple[JobStatus, ...] = ACTIVE_JOB_STATUSES
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int = 100


class ReplayedDeadLetter(Struct, frozen=True, omit_defaults=True):
    """One dead letter of a bulk replay: the new job, or why there is none."""

    dead_letter_id: int
    job_id: uuid.UUID | None = None
    error: str | None = None


class StatsSnapshot(Struct, frozen=True):
    """Durable counts for one tenant, read from the tables (never from process counters)."""

    jobs_created: int
    jobs_completed: int
    jobs_failed: int
    jobs_retried: int
    jobs_dead_lettered: int
    workflows_created: int
    workflows_completed: int
    workflows_failed: int


class QueueStats(Struct, frozen=True, omit_defaults=True):
    """One tenant's backlog on one queue."""

    queue: str
    pending: int
    scheduled: int
    running: int
    paused: bool
    oldest_pending_age_secs: int | None = None
    # An extension (migration 37): what becomes of the queue's completed jobs. The list of queues
    # names it only for a queue that removes them (upstream clients see nothing new); one queue's
    # settings (GET or PATCH /api/v1/queues/{queue}) always name it.
    retention: Retention | None = None


class QueueControl(Struct, frozen=True):
    """The state of a queue right after a pause or resume."""

    queue: str
    paused: bool
    pending: int
    running: int


class QueueGauge(Struct, frozen=True):
    """Fleet-wide backlog of one queue, for the Prometheus gauges; queue None sums the queues
    past the label bound."""

    queue: str | None
    pending: int
    scheduled: int
    running: int
    oldest_age_secs: float
