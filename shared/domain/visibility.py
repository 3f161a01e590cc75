"""Visibility (docs/visibility.md): what a running job reports (progress, log lines), the history of
its attempts, and the workers that leased it. The records and their bounds, declared once; the wire
types and the OpenAPI document take the bounds from here.

An attempt is one lease of a job. The job row describes its current (or final, completed) attempt;
every attempt that ended otherwise is a history row written by the statement that ended it, so
`Attempt` records come from both (shared/db/visibility.py)."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Annotated

from msgspec import Meta, Struct

from shared.domain.errors import ValidationFailed
from shared.domain.jobs import MAX_NAME_BYTES
from shared.domain.jobs import MAX_PROGRESS_MESSAGE as MAX_PROGRESS_MESSAGE  # declared with the job,
from shared.domain.jobs import Progress as Progress  # which carries one
from shared.domain.push import Delivery

MAX_LOG_LINES = 100  # a call's
MAX_LOG_CALL_BYTES = 64 * 1024  # a call's messages, in bytes of UTF-8
MAX_LOG_MESSAGE = MAX_LOG_CALL_BYTES  # characters of one line (the call's byte bound is the real one)
MAX_LOG_LEVEL = 16
DEFAULT_JOB_LOG_MAX_BYTES = 1024 * 1024  # a job's, across its attempts (--job-log-max-bytes)
MAX_LOG_PAGE = 1000
DEFAULT_LOG_PAGE = 100
MAX_WORKER_ID_BYTES = 128
WORKER_LIVE_SECS = 120  # a worker seen within this is live
WORKER_SEEN_EVERY_SECS = 10.0  # an api process records one worker's lease calls at most this often
WORKER_SEEN_REMEMBERED = 10_000  # (worker, queue, tenants) an api process remembers, at most
MAX_WORKERS_LISTED = 1000
MAX_WORKER_TASKS = 256
MAX_WORKER_TEXT = 255  # hostname, sdk, version

# A worker id: 1 to 128 visible ASCII characters (so bytes and characters agree, and the document's
# pattern says exactly what the server takes).
WORKER_ID_PATTERN = "^[!-~]+$"
WorkerId = Annotated[str, Meta(min_length=1, max_length=MAX_WORKER_ID_BYTES, pattern=WORKER_ID_PATTERN)]
LOG_LEVEL_PATTERN = "^[A-Za-z]+$"
LogLevel = Annotated[str, Meta(min_length=1, max_length=MAX_LOG_LEVEL, pattern=LOG_LEVEL_PATTERN)]
WorkerText = Annotated[str, Meta(max_length=MAX_WORKER_TEXT)]
TaskName = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_BYTES)]


class NewLogLine(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A line a worker posts; `ts` defaults to the time the server stores it."""

    message: str
    ts: datetime | None = None
    level: str | None = None


class SeenRecently:
    """Which lease calls an api process records in the worker registry: each (worker, queue,
    tenants) once every WORKER_SEEN_EVERY_SECS, and every call that says what the worker is. The
    registry's `last_seen_at` then lags by at most that much, far inside WORKER_LIVE_SECS, and a
    fleet of lease loops (8 of them polling under one worker id) costs one upsert and one commit
    every ten seconds instead of one per call. `now` is a monotonic clock's reading."""

    def __init__(
        self, every: float = WORKER_SEEN_EVERY_SECS, remembered: int = WORKER_SEEN_REMEMBERED
    ) -> None:
        self.every = every
        self.remembered = remembered
        self._at: dict[tuple[str, str, tuple[str, ...]], float] = {}

    def due(self, worker_id: str, queue: str, tenants: tuple[str, ...], reported: bool, now: float) -> bool:
        """Whether this call is to be recorded; when it is, it counts as recorded at `now`."""
        key = (worker_id, queue, tenants)
        last = self._at.get(key)
        if not reported and last is not None and now - last < self.every:
            return False
        if len(self._at) >= self.remembered:
            self._at.clear()  # forgetting costs one upsert each, never a lost record
        self._at[key] = now
        return True

    def forget(self, worker_id: str, queue: str, tenants: tuple[str, ...]) -> None:
        """The record of a call counted as due did not land: the next call records again."""
        self._at.pop((worker_id, queue, tenants), None)


def cut_message(message: str) -> str:
    """A message as an in-process handler's `ctx.log` stores it: a NUL (which PostgreSQL text cannot
    hold) becomes U+FFFD and a lone surrogate `?`, and past MAX_LOG_CALL_BYTES of UTF-8 it is cut at
    a character boundary, so that one line always fits a call."""
    if "\x00" in message:
        message = message.replace("\x00", "\ufffd")
    try:
        encoded = message.encode()
    except UnicodeEncodeError:
        encoded = message.encode(errors="replace")
        message = encoded.decode()
    if len(encoded) <= MAX_LOG_CALL_BYTES:
        return message
    return encoded[:MAX_LOG_CALL_BYTES].decode(errors="ignore")


def check_log_lines(lines: tuple[NewLogLine, ...] | list[NewLogLine]) -> None:
    """A call's lines: at most MAX_LOG_LINES, and MAX_LOG_CALL_BYTES of message in all."""
    if len(lines) > MAX_LOG_LINES:
        raise ValidationFailed(f"at most {MAX_LOG_LINES} lines a call, not {len(lines)}")
    size = sum(len(line.message.encode(errors="surrogateescape")) for line in lines)
    if size > MAX_LOG_CALL_BYTES:
        raise ValidationFailed(f"a call's messages take at most {MAX_LOG_CALL_BYTES} bytes, not {size}")


class LogLine(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A stored line: `seq` counts from 1 per job; `attempt` is the attempt that was running."""

    seq: int
    attempt: int
    ts: datetime
    message: str
    level: str | None = None


class LogsAppended(Struct, frozen=True):
    """The answer to a log post: lines stored, lines of this call dropped past the job's cap, and
    the job's last seq."""

    stored: int
    dropped: int
    last_seq: int


class JobLogs(Struct, frozen=True, kw_only=True):
    """A page of a job's lines after a seq. `dropped` counts the job's lines refused past its cap
    (all attempts); `last_seq` is the job's newest line; `has_more` says a next page exists (ask
    again with `after` = the page's last seq)."""

    lines: list[LogLine]
    last_seq: int
    dropped: int
    has_more: bool


class AttemptOutcome(enum.StrEnum):
    RUNNING = "running"  # the current attempt: it has not ended
    COMPLETED = "completed"
    FAILED = "failed"  # the job failed for good with it (dead-lettered)
    RETRY = "retry"  # it failed and the job was scheduled again
    LEASE_EXPIRED = "lease_expired"  # the janitor reclaimed it (the job retried or failed)
    CANCELLED = "cancelled"  # the job was cancelled while it ran
    RELEASED = "released"  # given back unfinished (a worker shutting down): no retry spent


class Attempt(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One lease of a job: its number (the job's delivery_count when it began), its worker when the
    lease request named one, when its lease began and ended, and how it ended."""

    attempt: int
    outcome: AttemptOutcome
    worker_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_secs: float | None = None
    error_message: str | None = None
    # A pushed job's attempt: its last HTTP delivery (status, latency, the answer's first KiB).
    delivery: Delivery | None = None


class WorkerInfo(Struct, frozen=True, kw_only=True, omit_defaults=True, forbid_unknown_fields=True):
    """What a worker says of itself on lease (every field optional)."""

    hostname: WorkerText | None = None
    sdk: WorkerText | None = None
    version: WorkerText | None = None
    tasks: Annotated[tuple[TaskName, ...], Meta(max_length=MAX_WORKER_TASKS)] | None = None


class Worker(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A worker as a tenant sees it: the queues it leased from for the tenant, how many of the
    tenant's jobs it holds, when it was first and last seen, whether it is live (seen within
    WORKER_LIVE_SECS) and what it reported."""

    worker_id: str
    queues: list[str]
    in_flight: int
    first_seen_at: datetime
    last_seen_at: datetime
    live: bool
    info: WorkerInfo | None = None
