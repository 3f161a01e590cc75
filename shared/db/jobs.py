"""Job and dead-letter repository: one function per database operation, answering with domain
types and raising domain errors.

Functions take a connection or the pool (an `Executor`), so the caller owns the transaction.
Outcome writes are lease-guarded (`status = 'running' AND lease_token = $token`); when one matches
nothing, `_explain` says why in the contract's terms: the job does not exist (NotFound), the same
token already finished it (an idempotent replay: its status), or the lease is lost (Conflict).
"""

from __future__ import annotations

import collections
import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import asyncpg
import msgspec

from shared import metrics, tracing
from shared.db import audit
from shared.db.listing import fetch_page
from shared.db.pool import (
    Connection,
    Executor,
    Pool,
    copy_rows,
    jsonb_binary,
    record,
    text_array,
    transaction,
)
from shared.db.queries import Q
from shared.db.queues import capped
from shared.domain.audit import AuditRecord
from shared.domain.errors import Conflict, DomainError, Gone, NotFound
from shared.domain.jobs import (
    DEFAULT_CONFIG,
    RETRYABLE_JOB_STATUSES,
    DeadLetter,
    Job,
    JobConfig,
    JobFilter,
    JobStatus,
    Lease,
    NewJob,
    Object,
    Progress,
    QueueGauge,
    ReplayedDeadLetter,
    StatsSnapshot,
    new_job_ids,
    retry_refusal,
)
from shared.domain.paging import ID_DIGITS, ListQuery, Page
from shared.domain.traces import Settled, TraceContext
from shared.tracing import Tracer

LEASE_LOST = "lease is no longer held; the job was reclaimed"
HEARTBEAT_LEASE_LOST = "lease is no longer held (it expired and the job was reclaimed)"


def to_job(r: asyncpg.Record) -> Job:
    return record(Job, r)


def to_dead_letter(r: asyncpg.Record) -> DeadLetter:
    return record(DeadLetter, r)


# --- enqueue -------------------------------------------------------------------------------------


class _InsertRow(msgspec.Struct, omit_defaults=True):
    """One row of insert_jobs' JSON parameter; short names keep a 1,000-job document small, and
    a field left out is NULL (the statement fills the defaults)."""

    id: uuid.UUID
    q: str
    t: str
    c: msgspec.Raw  # _stored_config
    p: Object | None = None
    pr: int = 0
    s: datetime | None = None
    m: Object | None = None
    k: str | None = None
    w: str | None = None
    st: str | None = None
    si: int | None = None
    sa: int | None = None
    lk: tuple[str, ...] | None = None
    tp: str | None = None
    ts: str | None = None
    l: bool = False  # noqa: E741 (lingers)
    # A hand-off's lease (insert_jobs_handed_off): its token, claim key, length, grace and worker.
    lt: uuid.UUID | None = None
    ck: uuid.UUID | None = None
    ls: int | None = None
    lg: int | None = None
    wk: str | None = None


@dataclass(frozen=True, slots=True)
class Handoff:
    """A lease call's terms for a job inserted straight into its hands (insert_handed_off): the
    lease as claim_jobs would write it, under a claim key of its own (release_unanswered_claim)."""

    lease_secs: int
    timeout_grace: int | None
    worker_id: str | None
    token: uuid.UUID = field(default_factory=uuid.uuid4)
    key: uuid.UUID = field(default_factory=uuid.uuid4)


# A job inserted: its id, and its lease when it was handed off (insert_handed_off).
Inserted = tuple[uuid.UUID, Lease | None]

_encode_rows = msgspec.json.Encoder().encode
# Always stored, default or not: a server of an earlier version, still running beside this one
# during a rolling upgrade, reads a missing timeout in its claim as none (migration 20).
_ALWAYS_STORED = "timeout_secs"
_DEFAULT_STORED = msgspec.Raw(_encode_rows({_ALWAYS_STORED: DEFAULT_CONFIG.timeout_secs}))
# JobConfig's fields and defaults, encoded without the defaults, except the timeout's: its default
# here is one no config has. (msgspec leaves them out in C: a dict of the differing fields cost a
# limited job more than its key's checks.)
_StoredConfig = msgspec.defstruct(
    "_StoredConfig",
    [(f.name, Any, -1 if f.name == _ALWAYS_STORED else f.default) for f in msgspec.structs.fields(JobConfig)],
    omit_defaults=True,
)


def _stored_config(config: JobConfig) -> msgspec.Raw:
    """A job's config as its row stores it: the fields that differ from the defaults, and the
    timeout, so a job that gives no policy stores `{"timeout_secs": 300}` (the complete default
    config was two thirds of a row, written again by the claim's and the outcome's row versions and
    their WAL). msgspec drops a default by identity: a default a client gave as a float or a large
    number may be kept, and reads the same. Readers decode it into a complete JobConfig (msgspec
    fills the defaults), and every fallback in the schema names the same defaults
    (tests/db/test_sql_defaults.py); rows stored complete read the same (ADR 0016)."""
    if config is DEFAULT_CONFIG:
        return _DEFAULT_STORED
    try:
        return _encoded_once(config)
    except TypeError:  # unhashable: built in code with a list of limits, not decoded
        return _encoded(config)


def _encoded(config: JobConfig) -> msgspec.Raw:
    return msgspec.Raw(_encode_rows(_StoredConfig(*msgspec.structs.astuple(config))))


# Encoded once per policy: a bulk enqueue repeats a few (a limit key per customer).
_encoded_once = functools.lru_cache(maxsize=4096)(_encoded)


def _stored_jsonb(config: JobConfig) -> bytes:
    """_stored_config in the jsonb binary form copy_rows takes."""
    return _DEFAULT_JSONB if config is DEFAULT_CONFIG else jsonb_binary(_stored_config(config))


_DEFAULT_JSONB = jsonb_binary(_DEFAULT_STORED)


async def insert_jobs(
    db: Executor, tenant: str | None, jobs: Sequence[NewJob], audited: Sequence[tuple[int, AuditRecord]] = ()
) -> list[uuid.UUID]:
    """Insert `jobs` in one statement; returns their ids in input order. A job whose idempotency key
    the tenant already used gets the original job's id and inserts nothing; so does one whose unique
    key another job holds (migration 13's trigger decides), which gets the holder's id. A queue
    new to the tenant past its cap refuses the whole statement (TooManyQueues).

    `audited`: audit entries, each with the index of the job its request enqueued, that the same
    statement writes, each naming its job (shared/db/audit.py); only for jobs that each insert a
    row of their own (`inserts_every_row`)."""
    with capped():
        if audited:
            assert inserts_every_row(jobs)
            return await _insert_jobs(db, tenant, jobs, unique=False, audited=audited)
        if not any(j.config.unique for j in jobs):
            return await _insert_jobs(db, tenant, jobs, unique=False)
        # The holders are read in the insert's own transaction: it has locked their keys' rows, so
        # no other writer can take a key over between the insert and the answer.
        if isinstance(db, asyncpg.Pool):
            async with transaction(db) as conn:
                return await _insert_jobs(conn, tenant, jobs, unique=True)
        conn = cast(Connection, db)
        async with conn.transaction():  # a savepoint when the caller's transaction is open
            return await _insert_jobs(conn, tenant, jobs, unique=True)


# A batch of at least this many jobs, none with an idempotency or unique key (a row the insert may
# keep out), goes in by COPY: 6.4 ms for 1,000 jobs against insert_jobs' 8.9 (one JSON document
# parsed into rows, and its payloads and configs parsed again as jsonb), the same at 10 jobs
# (ADR 0017). The same triggers run, and the same rows result.
COPY_MIN_JOBS = 50
# Every batch copies these; each of the rest only when a job of the batch sets it (the usual bulk
# enqueue sets none and leaves them to their defaults: 0.7 ms less a 1,000-job batch; a batch with
# limits copies limit_keys alone, not the eight other columns at their defaults: 0.7 ms less again).
_COPIED = ("id", "queue_name", "task_name", "payload", "config", "tenant_id")
_COPIED_REST = (
    "priority", "metadata", "workflow_id", "workflow_step_id", "step_index", "step_attempt",
    "limit_keys", "traceparent", "tracestate", "lingers",
)  # fmt: skip
_BINARY = frozenset({"config", "limit_keys"})  # given to copy_rows already encoded
_REST_DEFAULTS: tuple[Any, ...] = (0, {}, None, None, None, None, None, None, None, False)


def _rest(job: NewJob) -> tuple[Any, ...]:
    """A job's values for _COPIED_REST (_REST_DEFAULTS when it sets none)."""
    trace = job.trace
    return (
        job.config.priority,
        job.metadata,
        job.workflow_id,
        job.workflow_step,
        job.step_index,
        job.step_attempt,
        text_array(tuple(job.config.limits)) if job.config.limits else None,
        trace.traceparent if trace else None,
        trace.tracestate if trace else None,
        job.lingers,
    )


async def _copy_jobs(
    db: Executor, tenant: str | None, jobs: Sequence[NewJob], ids: Sequence[uuid.UUID], *, timed: bool
) -> None:
    """insert_jobs' rows, by COPY. `timed`: every job has its run_at; else none has, and each
    takes the column's default (the transaction's now(), as insert_jobs' COALESCE gives)."""
    count = len(jobs)
    names: list[str] = list(_COPIED)
    values: list[Sequence[Any]] = [
        ids,
        [j.queue for j in jobs],
        [j.task_name for j in jobs],
        [j.payload for j in jobs],
        [_stored_jsonb(j.config) for j in jobs],
        (tenant,) * count,
    ]
    # A column goes in only when some job differs from its default (tuple.count compares in C).
    transposed = zip(*map(_rest, jobs), strict=True)  # one tuple a column
    for name, default, column in zip(_COPIED_REST, _REST_DEFAULTS, transposed, strict=True):
        if column.count(default) != count:
            names.append(name)
            values.append(column)
    if timed:
        names.append("scheduled_at")
        values.append([j.run_at for j in jobs])
    records = list(zip(*values, strict=True))
    columns = tuple(names)
    status = await copy_rows(db, "queueflow", "jobs", columns, records, binary=_BINARY.intersection(columns))
    if status != f"COPY {len(records)}":  # nothing keeps a row of such a batch out
        raise RuntimeError(f"copying {len(records)} jobs answered {status!r}")


def _insert_row(j: NewJob, job_id: uuid.UUID, h: Handoff | None = None) -> _InsertRow:
    """A job's row of the insert statements' JSON parameter (with a hand-off's lease terms)."""
    return _InsertRow(
        id=job_id,
        q=j.queue,
        t=j.task_name,
        c=_stored_config(j.config),
        p=j.payload or None,
        pr=j.config.priority,
        s=j.run_at,
        m=j.metadata or None,
        k=j.idempotency_key,
        w=j.workflow_id,
        st=j.workflow_step,
        si=j.step_index,
        sa=j.step_attempt,
        lk=j.config.limits or None,
        tp=j.trace.traceparent if j.trace else None,
        ts=j.trace.tracestate if j.trace else None,
        l=j.lingers,
        lt=h.token if h else None,
        ck=h.key if h else None,
        ls=h.lease_secs if h else None,
        lg=h.timeout_grace if h else None,
        wk=h.worker_id if h else None,
    )


def _lock_order(job: NewJob) -> str:
    # Jobs go in ordered by unique key (stable: a batch's own duplicates keep their order), so two
    # concurrent batches take their keys' rows in the same order and cannot deadlock.
    return job.config.unique.key if job.config.unique else ""


def inserts_every_row(jobs: Sequence[NewJob]) -> bool:
    """Whether each of `jobs` inserts its own row whatever the table holds: none has an
    idempotency or a unique key (a row the insert may keep out)."""
    return not any(j.idempotency_key or j.config.unique for j in jobs)


async def _insert_jobs(
    db: Executor,
    tenant: str | None,
    given: Sequence[NewJob],
    *,
    unique: bool,
    audited: Sequence[tuple[int, AuditRecord]] = (),
) -> list[uuid.UUID]:
    ids = new_job_ids(len(given))
    ordered = unique and len(given) > 1
    order = sorted(range(len(given)), key=lambda n: _lock_order(given[n])) if ordered else []
    jobs = [given[n] for n in order] if ordered else given
    ids = [ids[n] for n in order] if ordered else ids
    keyed = any(j.idempotency_key for j in jobs)
    if not keyed and not unique and not audited and len(jobs) >= COPY_MIN_JOBS:
        timed = sum(j.run_at is not None for j in jobs)
        if timed in (0, len(jobs)):
            await _copy_jobs(db, tenant, jobs, ids, timed=timed > 0)
            metrics.JOBS_CREATED.inc(len(jobs))
            return ids
    rows = [_insert_row(j, i) for j, i in zip(jobs, ids, strict=True)]
    if keyed:
        inserted = await db.fetch(Q.insert_jobs_idempotent, _encode_rows(rows).decode(), tenant)
    else:
        entries = audit.entries(audited, ids)
        inserted = await db.fetch(Q.insert_jobs, _encode_rows(rows).decode(), tenant, entries)
    metrics.JOBS_CREATED.inc(len(inserted))
    answers = ids
    if len(inserted) < len(jobs):
        fresh = {r["id"] for r in inserted}
        kept_out = [j for j, i in zip(jobs, ids, strict=True) if i not in fresh]
        keys = [j.idempotency_key for j in kept_out if j.idempotency_key]
        by_key: dict[str, uuid.UUID] = {
            r["idempotency_key"]: r["id"]
            for r in (await db.fetch(Q.ids_for_idempotency_keys, tenant, keys) if keys else [])
        }
        held = [j.config.unique.key for j in kept_out if j.config.unique]
        holders: dict[str, uuid.UUID] = {
            r["key"]: r["job_id"]
            for r in (await db.fetch(Q.unique_key_holders, tenant, held) if held else [])
        }
        # A duplicate idempotency key: the original (possibly inserted by this same batch) wins;
        # a held unique key: its holder.
        answers = [
            i if i in fresh else by_key.get(j.idempotency_key or "") or holders[_lock_order(j)]
            for j, i in zip(jobs, ids, strict=True)
        ]
    if not ordered:
        return answers
    in_input_order = [answers[0]] * len(answers)
    for position, n in enumerate(order):
        in_input_order[n] = answers[position]
    return in_input_order


async def insert_handed_off(
    db: Executor,
    tenant: str | None,
    jobs: Sequence[NewJob],
    handoffs: Sequence[Handoff | None],
    audited: Sequence[tuple[int, AuditRecord]] = (),
) -> list[Inserted]:
    """Insert `jobs` in one statement, each with a `Handoff` written already leased on its terms
    (unless it has limits, is not due, or its tenant's queue is paused: then it waits as any job).
    Per job, in input order: its id, and its lease when it was leased. For jobs without an
    idempotency or unique key (the caller's choice: such an insert may keep a row out).
    `audited` as for `insert_jobs`: entries the same statement writes, each naming its job."""
    ids = new_job_ids(len(jobs))
    rows = [_insert_row(j, i, h) for j, i, h in zip(jobs, ids, handoffs, strict=True)]
    entries = audit.entries(audited, ids)
    with capped():
        inserted = await db.fetch(Q.insert_jobs_handed_off, _encode_rows(rows).decode(), tenant, entries)
    metrics.JOBS_CREATED.inc(len(inserted))
    by_id = {r["id"]: r for r in inserted}
    return [(row.id, to_lease(r) if (r := by_id[row.id])["status"] == "running" else None) for row in rows]


# --- reads and cancellation ----------------------------------------------------------------------


async def get_job(db: Executor, tenant: str, job_id: uuid.UUID) -> Job:
    row = await db.fetchrow(Q.get_job, job_id, tenant)
    if row is None:
        raise NotFound("job", job_id)
    return to_job(row)


async def get_job_watched(db: Executor, tenant: str, job_id: uuid.UUID) -> Job:
    """get_job for a caller that may be waiting for the job (GET /api/v1/jobs/{id}): an unfinished
    job of a queue that removes completed jobs is flagged watched, so its outcome stays readable
    for --removal-grace-secs after it completes instead of going with it."""
    row = await db.fetchrow(Q.get_job_watched, job_id, tenant)
    if row is None:
        raise NotFound("job", job_id)
    return to_job(row)


async def list_jobs(db: Executor, tenant: str, query: ListQuery) -> Page[Job]:
    """A page of the tenant's jobs. `id_digits` of a whole id looks it up by primary key; fewer
    digits are searched for in each id the page walks (the tenant's index, newest first, until the
    page is full); more than an id has match nothing without a scan."""
    equal: dict[str, Any] = {"status": query.status, "queue_name": query.queue, "task_name": query.task_name}
    contains: dict[str, str] = {}
    conditions: tuple[str, ...] = ()
    if (digits := query.id_digits) is not None:
        if len(digits) == ID_DIGITS:
            equal["id"] = uuid.UUID(digits)
        elif len(digits) < ID_DIGITS:
            contains = {"replace(id::text, '-', '')": digits}
        else:
            conditions = ("false",)  # PostgreSQL reads no row for it
    return await fetch_page(db, "jobs", "uuid", tenant, query.page, to_job, equal, conditions, contains)


def _cancelled(rows: Sequence[asyncpg.Record]) -> None:
    metrics.JOBS_CANCELLED.inc(len(rows))
    metrics.attempts_ended("cancelled", [(r["task_name"], r["secs"]) for r in rows if r["ended_attempt"]])


async def cancel_job(db: Executor, tenant: str, job_id: uuid.UUID) -> None:
    """Cancel a live job (a running one's attempt ends, in the history as cancelled); a finished
    one is a Conflict naming its status."""
    async with audit.change(db) as conn:
        if (row := await conn.fetchrow(Q.cancel_job, job_id, tenant)) is None:
            status = await conn.fetchval(Q.job_owner_state, job_id, tenant)
            if status is None:
                raise NotFound("job", job_id)
            raise Conflict(f"job is already {status}")
    _cancelled([row])


def _filter_args(tenant: str, which: JobFilter) -> tuple[object, ...]:
    """A JobFilter as the parameters $1..$7 of the by-filter statements."""
    statuses = [str(s) for s in which.statuses]
    return (
        tenant,
        statuses,
        which.queue,
        which.task_name,
        which.created_after,
        which.created_before,
        which.limit,
    )


def _selector(which: JobFilter) -> dict[str, object]:
    """A filter as the audit log keeps it (shared/db/audit.py `selected`)."""
    return {
        "statuses": [str(s) for s in which.statuses],
        "queue": which.queue,
        "task_name": which.task_name,
        "created_after": which.created_after,
        "created_before": which.created_before,
        "limit": which.limit,
    }


async def cancel_matching(db: Executor, tenant: str, which: JobFilter) -> int:
    async with audit.change(db) as conn:
        rows = await conn.fetch(Q.cancel_jobs_matching, *_filter_args(tenant, which))
        audit.selected(_selector(which), len(rows))
    _cancelled(rows)
    return len(rows)


async def retry_matching(db: Executor, tenant: str, which: JobFilter, job_id: uuid.UUID | None = None) -> int:
    """Run the tenant's matching failed or cancelled jobs again, in place; how many were."""
    async with audit.change(db) as conn:
        rows = await conn.fetch(Q.retry_jobs, *_filter_args(tenant, which), job_id)
        if job_id is None:
            audit.selected(_selector(which), len(rows))
    metrics.JOBS_RETRIED_IN_PLACE.inc(len(rows))
    return len(rows)


async def retry_job(db: Executor, tenant: str, job_id: uuid.UUID) -> Job:
    """Run one failed or cancelled job again, in place; the job as it now is."""
    async with audit.change(db) as conn:
        if not await retry_matching(
            conn, tenant, JobFilter(statuses=RETRYABLE_JOB_STATUSES, limit=1), job_id
        ):
            row = await conn.fetchrow(Q.job_retry_state, job_id, tenant)
            if row is None:
                raise NotFound("job", job_id)
            raise Conflict(retry_refusal(JobStatus(row["status"]), row["workflow_id"]))
    return await get_job(db, tenant, job_id)


# --- the worker protocol -------------------------------------------------------------------------


def to_lease(r: asyncpg.Record) -> Lease:
    """A claim_jobs row: built field by field (a claim returns hundreds of rows, and the generic
    `record` costs a dict and a conversion per row), the config decoded once per distinct text."""
    job = Job(
        id=r["id"],
        queue_name=r["queue_name"],
        task_name=r["task_name"],
        payload=r["payload"],
        config=_config_of(r["config"]),
        status=JobStatus(r["status"]),
        retry_count=r["retry_count"],
        delivery_count=r["delivery_count"],
        created_at=r["created_at"],
        scheduled_at=r["scheduled_at"],
        metadata=r["metadata"],
        started_at=r["started_at"],
        completed_at=r["completed_at"],
        next_retry_at=r["next_retry_at"],
        error_message=r["error_message"],
        result=r["result"],
        idempotency_key=r["idempotency_key"],
        tenant_id=r["tenant_id"],
        workflow_id=r["workflow_id"],
        workflow_step_id=r["workflow_step_id"],
    )
    traceparent = r["traceparent"]
    if traceparent is None:
        return Lease(job, r["lease_token"])
    return Lease(job, r["lease_token"], TraceContext(traceparent, r["tracestate"]))


def _settled(r: asyncpg.Record, status: str) -> Settled:
    """A traced outcome statement's row: what the outcome's span names."""
    traceparent = r["traceparent"]
    return Settled(
        job_id=r["id"],
        queue=r["queue_name"],
        task_name=r["task_name"],
        status=status,
        attempt=r["delivery_count"],
        tenant=r["tenant_id"],
        workflow_id=r["workflow_id"],
        trace=None if traceparent is None else TraceContext(traceparent, r["tracestate"]),
    )


_CONFIGS: dict[str, JobConfig] = {}
_decode_config = msgspec.json.Decoder(JobConfig).decode


def _config_of(text: str) -> JobConfig:
    config = _CONFIGS.get(text)
    if config is None:
        config = _decode_config(text)
        if len(_CONFIGS) < 1024:  # bounded: distinct policies are few, but not trusted to be
            _CONFIGS[text] = config
    return config


async def claim(
    db: Executor,
    queue: str,
    max_jobs: int,
    lease_secs: int,
    timeout_grace: int | None = None,
    rotation: int = 0,
    key: uuid.UUID | None = None,
    *,
    tenant: str | None = None,
    worker_id: str | None = None,
) -> list[Lease]:
    """Lease up to `max_jobs` due jobs, shared fairly between the queue's tenants (`rotation`
    changes which tenant leads); returned in priority, scheduled_at, created_at order. `key` (a
    new random one when None) lets `release_unanswered_claim` give the jobs back should the
    answer be lost. `tenant`, when given, claims only that tenant's jobs (a worker key's); `worker_id`,
    when given, is recorded as the attempts' worker."""
    rows = await db.fetch(
        Q.claim_jobs,
        queue,
        max_jobs,
        lease_secs,
        timeout_grace,
        rotation,
        key or uuid.uuid4(),
        tenant,
        worker_id,
    )
    if len(rows) > 1:
        rows.sort(key=lambda r: (-r["priority"], r["scheduled_at"], r["created_at"]))
    return [to_lease(r) for r in rows]


async def release_unanswered_claim(db: Executor, queue: str, key: uuid.UUID) -> int:
    """Give back (no retry spent) the jobs a claim with `key` leased, if it committed: for a claim
    whose answer was lost with its connection. Returns how many."""
    return len(await db.fetch(Q.release_unanswered_claim, queue, key))


async def _explain(
    db: Executor,
    attempts: Sequence[tuple[uuid.UUID, uuid.UUID | None]],
    lost: str,
    terminal_only: bool = True,
) -> list[JobStatus | DomainError]:
    """Why a lease-guarded write matched nothing, per (job id, token): NotFound, the status of a job
    the same token already finished (an idempotent replay), or a Conflict (the lease is lost)."""
    rows = {r["id"]: r for r in await db.fetch(Q.lease_states, [a[0] for a in attempts])}
    out: list[JobStatus | DomainError] = []
    for jid, token in attempts:
        row = rows.get(jid)
        if row is None:
            out.append(NotFound("job", jid))
            continue
        status = JobStatus(row["status"])
        same_holder = token is not None and row["lease_token"] == token
        finished = status.terminal or (not terminal_only and status is not JobStatus.RUNNING)
        out.append(status if same_holder and finished else Conflict(lost))
    return out


async def lease_refusal(db: Executor, job_id: uuid.UUID, token: uuid.UUID | None) -> DomainError:
    """Why a write that needs the job's latest lease matched nothing: NotFound, or a Conflict (the
    lease is lost)."""
    [answer] = await _explain(db, [(job_id, token)], LEASE_LOST, terminal_only=False)
    return answer if isinstance(answer, DomainError) else Conflict(LEASE_LOST)


async def heartbeat(
    db: Executor,
    job_id: uuid.UUID,
    token: uuid.UUID | None,
    extend_secs: int,
    lost: str,
    progress: Progress | None = None,
) -> JobStatus:
    """Extend the lease (and record `progress` when given): `running`. The holder of a job that
    left `running` learns its status (so it stops); anyone else gets a Conflict, and an unknown job
    NotFound."""
    if token is not None:
        if progress is None:
            beat = await db.fetchval(Q.heartbeat, job_id, token, extend_secs)
        else:
            beat = await db.fetchval(
                Q.heartbeat_progress, job_id, token, extend_secs, progress.percent, progress.message
            )
        if beat is not None:
            return JobStatus.RUNNING
    [answer] = await _explain(db, [(job_id, token)], lost, terminal_only=False)
    if isinstance(answer, DomainError):
        raise answer
    return answer


# One heartbeat of a group: (job id, lease token or None when it was not a UUID, extend_secs).
Beat = tuple[uuid.UUID, uuid.UUID | None, int]


async def heartbeat_many(db: Executor, items: Sequence[Beat], lost: str) -> list[JobStatus | DomainError]:
    """Heartbeats without progress, many in one statement (group commit). Per item, in order, what
    `heartbeat` would answer (`running` when the lease was extended) or the error it would raise."""
    held = sorted((item for item in items if item[1] is not None), key=lambda item: item[0])
    beaten: set[tuple[uuid.UUID, uuid.UUID | None]] = set()
    if held:
        rows = await db.fetch(
            Q.heartbeat_jobs, [i[0] for i in held], [i[1] for i in held], [i[2] for i in held]
        )
        beaten = {(r["id"], r["token"]) for r in rows}
    rest = [(jid, token) for jid, token, _ in items if (jid, token) not in beaten]
    explained = iter(await _explain(db, rest, lost, terminal_only=False) if rest else [])
    return [JobStatus.RUNNING if (jid, token) in beaten else next(explained) for jid, token, _ in items]


async def report_progress(db: Executor, job_id: uuid.UUID, token: uuid.UUID, progress: Progress) -> None:
    """Record an in-process handler's progress without touching its lease; a job no longer running
    under `token` is a Conflict (or NotFound)."""
    if not await db.fetchval(Q.report_progress, job_id, token, progress.percent, progress.message):
        raise await lease_refusal(db, job_id, token)


# The result is an object, or one already encoded as JSON (msgspec.Raw: written as it is).
Completion = tuple[uuid.UUID, uuid.UUID | None, Object | msgspec.Raw]


async def complete_many(
    db: Executor, items: Sequence[Completion], tracer: Tracer | None = None
) -> list[DomainError | None]:
    """Complete many jobs in one statement (group commit). Per item, in order: None when the job is
    completed (now, or already by the same token), else the error to answer with. With a `tracer`,
    each job completed now gets its `complete` span."""
    if tracer is None:
        done = await db.fetch(
            Q.complete_jobs, [i[0] for i in items], [i[1] for i in items], [i[2] for i in items]
        )
    else:
        started = tracing.now()
        done = await db.fetch(
            Q.complete_jobs_traced, [i[0] for i in items], [i[1] for i in items], [i[2] for i in items]
        )
        tracer.settled("complete", [_settled(r, JobStatus.COMPLETED) for r in done], started)
    finished = {(r["id"], r["token"]) for r in done}
    metrics.JOBS_COMPLETED.inc(len(finished))
    metrics.attempts_ended("completed", [(r["task_name"], r["secs"]) for r in done])
    rest = [(i[0], i[1]) for i in items if (i[0], i[1]) not in finished]
    explained = iter(await _explain(db, rest, LEASE_LOST) if rest else [])
    # The same job and token twice in one batch: the first completed it, the second is a replay;
    # another token for a job this batch completed is explained like any other (a lost lease).
    return [None if (jid, token) in finished else _error_or_none(next(explained)) for jid, token, _ in items]


def _error_or_none(answer: JobStatus | DomainError) -> DomainError | None:
    return answer if isinstance(answer, DomainError) else None


async def fail_held(
    db: Executor,
    job_id: uuid.UUID,
    token: uuid.UUID,
    error: str,
    retryable: bool,
    reason: str | None = None,
    delay_secs: int | None = None,
    tracer: Tracer | None = None,
) -> JobStatus | None:
    """A failure of the job running under `token` through the retry policy, counted: `retrying`
    (after `delay_secs` when given, e.g. a push receiver's Retry-After, else the job's backoff) or
    `failed` with its dead letter; None when the job is not running under that lease."""
    started = tracing.now() if tracer is not None else 0
    row = await db.fetchrow(Q.fail_job, job_id, token, error, retryable, reason, delay_secs)
    if row is None:
        return None
    if tracer is not None:
        tracer.settled("fail", [_settled(row, row["status"])], started)
    status = JobStatus(row["status"])
    _count_failures([(status, row["task_name"], row["secs"])])
    return status


def _count_failures(failed: list[tuple[JobStatus, str, float]]) -> None:
    for status, task, secs in failed:
        if status is JobStatus.RETRYING:
            metrics.JOBS_RETRIED.inc()
        else:
            metrics.JOBS_FAILED.inc()
            metrics.JOBS_DEAD_LETTERED.inc()
        metrics.attempts_ended("retry" if status is JobStatus.RETRYING else "failed", [(task, secs)])


async def fail(
    db: Executor,
    job_id: uuid.UUID,
    token: uuid.UUID | None,
    error: str,
    retryable: bool,
    reason: str | None = None,
    tracer: Tracer | None = None,
) -> JobStatus:
    """A failure through the retry policy: `retrying`, or `failed` with its dead letter written by
    the same statement. A replay by the holder answers the job's status; otherwise it raises. With
    a `tracer`, the failure written now gets its `fail` span."""
    if token is not None:
        status = await fail_held(db, job_id, token, error, retryable, reason, tracer=tracer)
        if status is not None:
            return status
    [answer] = await _explain(db, [(job_id, token)], LEASE_LOST, terminal_only=False)
    if isinstance(answer, DomainError):
        raise answer
    if answer is JobStatus.RUNNING:  # held by this token, yet the guarded write missed: not ours
        raise Conflict(LEASE_LOST)
    return answer


# One failure of a group: (job id, lease token or None when it was not a UUID, error, retryable).
Failure = tuple[uuid.UUID, uuid.UUID | None, str, bool]


async def fail_many(
    conn: Connection, items: Sequence[Failure], tracer: Tracer | None = None
) -> list[JobStatus | DomainError]:
    """Failures through the retry policy, many in one transaction (group commit): `fail`'s own
    statement once per item, sent together, in job id order (so two groups never wait on each
    other's rows in opposite orders), and one commit. Per item, in order, what `fail` would answer
    or the error it would raise. A job failed twice in one group (a replay, or another holder's
    stale token) is answered as `fail` answers the later call: from the job's state once the group
    is written."""
    held = sorted((item for item in items if item[1] is not None), key=lambda item: item[0])
    written: dict[uuid.UUID, JobStatus] = {}
    if held:
        started = tracing.now() if tracer is not None else 0
        async with conn.transaction():
            rows = await conn.fetchmany(Q.fail_job, [(*item, None, None) for item in held])
        if tracer is not None:
            tracer.settled("fail", [_settled(r, r["status"]) for r in rows], started)
        written = {row["id"]: JobStatus(row["status"]) for row in rows}
        _count_failures([(written[row["id"]], row["task_name"], row["secs"]) for row in rows])
    once = collections.Counter(item[0] for item in items)
    answers: list[JobStatus | DomainError | None] = [
        written.get(item[0]) if once[item[0]] == 1 else None for item in items
    ]
    rest = [index for index, answer in enumerate(answers) if answer is None]
    if rest:
        explained = await _explain(
            conn, [(items[i][0], items[i][1]) for i in rest], LEASE_LOST, terminal_only=False
        )
        for index, answer in zip(rest, explained, strict=True):
            # Held by this token, yet the guarded write missed: not ours (as `fail` says).
            answers[index] = Conflict(LEASE_LOST) if answer is JobStatus.RUNNING else answer
    return cast(list[JobStatus | DomainError], answers)


async def release(db: Executor, leases: Sequence[tuple[uuid.UUID, uuid.UUID]]) -> int:
    """Give jobs back unfinished, each (job id, lease token) whose lease is still held: claimable
    again at once, no retry spent (each attempt is in the history as released). Returns how many."""
    if not leases:
        return 0
    return cast(
        int, await db.fetchval(Q.release_jobs, [job for job, _ in leases], [token for _, token in leases])
    )


# --- dead letters --------------------------------------------------------------------------------


async def get_dead_letter(db: Executor, tenant: str, dl_id: int) -> DeadLetter:
    row = await db.fetchrow(Q.get_dead_letter, dl_id, tenant)
    if row is None:
        raise NotFound("dead letter", dl_id)
    return to_dead_letter(row)


async def list_dead_letters(db: Executor, tenant: str, query: ListQuery) -> Page[DeadLetter]:
    replayed = {True: ("replayed_at IS NOT NULL",), False: ("replayed_at IS NULL",), None: ()}[query.replayed]
    equal = {"queue_name": query.queue, "task_name": query.task_name}
    return await fetch_page(db, "dead_letters", "bigint", tenant, query.page, to_dead_letter, equal, replayed)


async def _replay(conn: Connection, tenant: str, dl_id: int) -> uuid.UUID:
    """Replay one dead letter as a fresh detached job, at most once, in its own transaction."""
    [new_id] = new_job_ids(1)
    tx = conn.transaction()
    await tx.start()
    try:
        row = await conn.fetchrow(Q.replay_dead_letter, dl_id, tenant, new_id)
    except BaseException:
        await tx.rollback()
        raise
    assert row is not None
    if row["marked"] and not row["inserted"]:
        await tx.rollback()  # the original job was purged by retention: undo the mark
        raise Gone(f"dead letter {dl_id}: the original job was purged by retention")
    await tx.commit()
    if row["marked"]:
        metrics.JOBS_CREATED.inc()
        return new_id
    if await conn.fetchrow(Q.get_dead_letter, dl_id, tenant) is None:
        raise NotFound("dead letter", dl_id)
    raise Conflict(f"dead letter {dl_id} was already replayed")


async def replay_dead_letter(pool: Pool, tenant: str, dl_id: int) -> uuid.UUID:
    async with pool.acquire() as conn, audit.change(conn) as tx:
        job_id = await _replay(tx, tenant, dl_id)
        audit.made(job_id)
    return job_id


async def replay_matching(pool: Pool, tenant: str, which: JobFilter) -> list[ReplayedDeadLetter]:
    """Replay the tenant's matching dead letters, oldest first, each in its own transaction. One
    replayed or removed concurrently by another caller is left out of the answer."""
    args = (tenant, which.queue, which.task_name, which.created_after, which.created_before, which.limit)
    results: list[ReplayedDeadLetter] = []
    async with pool.acquire() as conn:
        for r in await conn.fetch(Q.dead_letters_to_replay, *args):
            try:
                results.append(ReplayedDeadLetter(r["id"], job_id=await _replay(conn, tenant, r["id"])))
            except Gone:
                results.append(ReplayedDeadLetter(r["id"], error="the original job was purged by retention"))
            except (NotFound, Conflict):
                continue
    # (each replay is a transaction of its own: the request's entry is written after them)
    audit.selected(_selector(which), sum(1 for r in results if r.job_id))
    return results


# --- figures -------------------------------------------------------------------------------------


async def tenant_stats(db: Executor, tenant: str) -> StatsSnapshot:
    row = await db.fetchrow(Q.tenant_stats, tenant)
    assert row is not None
    return StatsSnapshot(**{k: int(v) for k, v in row.items()})


async def queue_gauges(db: Executor, max_queues: int) -> list[QueueGauge]:
    """The busiest `max_queues` queues' backlog, and one row (queue None) summing the rest."""
    return [
        QueueGauge(r["queue_name"], r["pending"], r["scheduled"], r["running"], float(r["oldest_age"]))
        for r in await db.fetch(Q.queue_gauges, max_queues)
    ]
