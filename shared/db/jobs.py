"""Job and dead-letter repository: one function per database operation.

Functions take a connection or the pool (anything with fetch/fetchrow/fetchval), so the caller owns
the transaction. Outcome writes are lease-guarded; when one matches nothing, `lease_verdicts` says
why, in the contract's terms.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import asyncpg

from shared import metrics, wire
from shared.db.queries import Q
from shared.domain import TERMINAL_JOB_STATUSES


class Executor(Protocol):
    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]: ...
    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None: ...
    async def fetchval(self, query: str, *args: Any) -> Any: ...


@dataclass(slots=True)
class NewJob:
    task_name: str
    queue: str
    config: dict[str, Any]
    payload: dict[str, Any] = field(default_factory=dict)
    run_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None
    workflow_id: str | None = None
    workflow_step: str | None = None
    step_index: int | None = None
    step_attempt: int | None = None


def parse_id(raw: str) -> uuid.UUID | None:
    """A job id from a path or body; anything that is not a UUID names no job."""
    try:
        return uuid.UUID(raw)
    except (ValueError, AttributeError, TypeError):
        return None


def to_job(r: asyncpg.Record) -> wire.Job:
    return wire.Job(
        id=str(r["id"]),
        queue_name=r["queue_name"],
        task_name=r["task_name"],
        payload=r["payload"],
        config=r["config"],
        status=r["status"],
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


def to_dead_letter(r: asyncpg.Record) -> wire.DeadLetter:
    return wire.DeadLetter(
        id=r["id"],
        job_id=str(r["job_id"]),
        reason=r["reason"],
        created_at=r["created_at"],
        error_message=r["error_message"],
        queue_name=r["queue_name"],
        task_name=r["task_name"],
        replayed_at=r["replayed_at"],
        replay_job_id=None if r["replay_job_id"] is None else str(r["replay_job_id"]),
        tenant_id=r["tenant_id"],
    )


# --- enqueue -------------------------------------------------------------------------------------


async def insert_jobs(db: Executor, tenant: str | None, jobs: list[NewJob]) -> list[str]:
    """Insert `jobs` in one statement; returns their ids in input order. A job whose idempotency key
    the tenant already used gets the original job's id and inserts nothing."""
    ids = [uuid.uuid4() for _ in jobs]
    inserted = await db.fetch(
        Q.insert_jobs,
        ids,
        [j.queue for j in jobs],
        [j.task_name for j in jobs],
        [j.payload for j in jobs],
        [j.config for j in jobs],
        [int(j.config.get("priority", 0)) for j in jobs],
        [j.run_at for j in jobs],
        [j.metadata for j in jobs],
        tenant,
        [j.idempotency_key for j in jobs],
        [j.workflow_id for j in jobs],
        [j.workflow_step for j in jobs],
        [j.step_index for j in jobs],
        [j.step_attempt for j in jobs],
    )
    metrics.JOBS_CREATED.inc(len(inserted))
    if len(inserted) == len(jobs):
        return [str(i) for i in ids]
    fresh = {r["id"] for r in inserted}
    keys = [j.idempotency_key for j, i in zip(jobs, ids, strict=True) if i not in fresh and j.idempotency_key]
    existing = {
        r["idempotency_key"]: str(r["id"]) for r in await db.fetch(Q.ids_for_idempotency_keys, tenant, keys)
    }
    out = []
    for job, new_id in zip(jobs, ids, strict=True):
        if new_id in fresh:
            out.append(str(new_id))
        else:
            # A duplicate key: the original (possibly inserted by this same batch) wins.
            out.append(existing[job.idempotency_key])  # type: ignore[index]
    return out


# --- reads and cancellation ----------------------------------------------------------------------


async def get_job(db: Executor, tenant: str, job_id: str) -> wire.Job | None:
    jid = parse_id(job_id)
    if jid is None:
        return None
    row = await db.fetchrow(Q.get_job, jid, tenant)
    return None if row is None else to_job(row)


async def cancel_job(
    db: Executor, tenant: str, job_id: str
) -> tuple[Literal["cancelled", "missing", "conflict"], str | None]:
    """('cancelled', None), ('missing', None), or ('conflict', the terminal status it already has)."""
    jid = parse_id(job_id)
    if jid is None:
        return "missing", None
    if await db.fetchval(Q.cancel_job, jid, tenant) is not None:
        metrics.JOBS_CANCELLED.inc()
        return "cancelled", None
    status = await db.fetchval(Q.job_owner_state, jid, tenant)
    return ("missing", None) if status is None else ("conflict", str(status))


async def cancel_matching(
    db: Executor,
    tenant: str,
    statuses: list[str],
    queue: str | None,
    task_name: str | None,
    after: datetime | None,
    before: datetime | None,
    limit: int,
) -> int:
    rows = await db.fetch(Q.cancel_jobs_matching, tenant, statuses, queue, task_name, after, before, limit)
    metrics.JOBS_CANCELLED.inc(len(rows))
    return len(rows)


# --- the worker protocol -------------------------------------------------------------------------


async def claim(
    db: Executor,
    queue: str,
    max_jobs: int,
    lease_secs: int,
    timeout_grace: int | None = None,
    rotation: int = 0,
) -> list[asyncpg.Record]:
    """Lease up to `max_jobs` due jobs, shared fairly between the queue's tenants (`rotation`
    changes which tenant leads); returned in priority, scheduled_at, created_at order."""
    rows = await db.fetch(Q.claim_jobs, queue, max_jobs, lease_secs, timeout_grace, rotation)
    if len(rows) > 1:
        rows.sort(key=lambda r: (-r["priority"], r["scheduled_at"], r["created_at"]))
    return rows


Verdict = Literal["missing", "replay", "conflict"]


async def lease_verdicts(
    db: Executor, attempts: list[tuple[uuid.UUID, uuid.UUID | None]], terminal_only: bool = True
) -> list[tuple[Verdict, str | None]]:
    """Why a lease-guarded write matched nothing, per (job id, token): the job is 'missing' (404),
    the same token already finished it ('replay', an idempotent success), or the lease is lost
    ('conflict', 409). Returns the job's status alongside."""
    rows = {r["id"]: r for r in await db.fetch(Q.lease_states, [a[0] for a in attempts])}
    out: list[tuple[Verdict, str | None]] = []
    for jid, token in attempts:
        row = rows.get(jid)
        if row is None:
            out.append(("missing", None))
            continue
        same_holder = token is not None and row["lease_token"] == token
        finished = row["status"] in TERMINAL_JOB_STATUSES or (
            not terminal_only and row["status"] != "running"
        )
        out.append(("replay" if same_holder and finished else "conflict", row["status"]))
    return out


async def heartbeat(
    db: Executor, job_id: uuid.UUID, token: uuid.UUID | None, extend_secs: int
) -> tuple[Verdict | Literal["extended"], str | None]:
    if token is not None and await db.fetchval(Q.heartbeat, job_id, token, extend_secs) is not None:
        return "extended", "running"
    # Not extended: the holder learns the job's status (it stops), anyone else gets a conflict.
    [(verdict, status)] = await lease_verdicts(db, [(job_id, token)], terminal_only=False)
    return verdict, status


async def complete_many(
    db: Executor, items: list[tuple[uuid.UUID, uuid.UUID | None, dict[str, Any]]]
) -> list[tuple[Verdict | Literal["completed"], str | None]]:
    """Complete many jobs in one statement (group commit); one verdict per item, in order."""
    done = await db.fetch(
        Q.complete_jobs, [i[0] for i in items], [i[1] for i in items], [i[2] for i in items]
    )
    finished = {r["id"] for r in done}
    metrics.JOBS_COMPLETED.inc(len(finished))
    out: list[tuple[Verdict | Literal["completed"], str | None]] = []
    rest = [(i[0], i[1]) for i in items if i[0] not in finished]
    verdicts = iter(await lease_verdicts(db, rest) if rest else [])
    seen: set[uuid.UUID] = set()
    for jid, _token, _result in items:
        if jid in finished and jid not in seen:
            seen.add(jid)
            out.append(("completed", "completed"))
        elif jid in finished:
            # The same job twice in one batch: the first completed it, this one is a replay.
            out.append(("replay", "completed"))
        else:
            out.append(next(verdicts))
    return out


async def fail(
    db: Executor,
    job_id: uuid.UUID,
    token: uuid.UUID | None,
    error: str,
    retryable: bool,
    reason: str | None = None,
) -> tuple[Verdict | Literal["retrying", "failed"], str | None]:
    """A failure through the retry policy: 'retrying', or 'failed' with its dead letter written by
    the same statement; otherwise the verdict for a write that matched nothing."""
    row = None
    if token is not None:
        row = await db.fetchrow(Q.fail_job, job_id, token, error, retryable, reason)
    if row is not None:
        if row["status"] == "retrying":
            metrics.JOBS_RETRIED.inc()
        else:
            metrics.JOBS_FAILED.inc()
            metrics.JOBS_DEAD_LETTERED.inc()
        return row["status"], row["status"]
    [(verdict, status)] = await lease_verdicts(db, [(job_id, token)], terminal_only=False)
    if verdict == "replay" and status == "running":
        verdict = "conflict"
    return verdict, status


# --- dead letters --------------------------------------------------------------------------------


async def get_dead_letter(db: Executor, tenant: str, dl_id: int) -> wire.DeadLetter | None:
    row = await db.fetchrow(Q.get_dead_letter, dl_id, tenant)
    return None if row is None else to_dead_letter(row)


async def replay_one(
    conn: asyncpg.Connection, tenant: str, dl_id: int
) -> tuple[Literal["replayed", "missing", "replayed_before", "purged"], str | None]:
    """Replay one dead letter as a fresh detached job, at most once. Runs its own transaction."""
    new_id = uuid.uuid4()
    tx = conn.transaction()
    await tx.start()
    try:
        row = await conn.fetchrow(Q.replay_dead_letter, dl_id, tenant, new_id)
    except BaseException:
        await tx.rollback()
        raise
    assert row is not None
    if row["marked"] and not row["inserted"]:
        # The original job was purged by retention: undo the mark, nothing to replay.
        await tx.rollback()
        return "purged", None
    await tx.commit()
    if row["marked"]:
        metrics.JOBS_CREATED.inc()
        return "replayed", str(new_id)
    entry = await conn.fetchrow(Q.get_dead_letter, dl_id, tenant)
    return ("missing", None) if entry is None else ("replayed_before", None)


async def dead_letters_to_replay(
    db: Executor,
    tenant: str,
    queue: str | None,
    task_name: str | None,
    after: datetime | None,
    before: datetime | None,
    limit: int,
) -> list[int]:
    return [
        r["id"]
        for r in await db.fetch(Q.dead_letters_to_replay, tenant, queue, task_name, after, before, limit)
    ]


# --- system --------------------------------------------------------------------------------------


async def tenant_stats(db: Executor, tenant: str) -> wire.StatsSnapshot:
    row = await db.fetchrow(Q.tenant_stats, tenant)
    assert row is not None
    return wire.StatsSnapshot(**{k: int(v) for k, v in row.items()})


async def queue_gauges(db: Executor) -> list[tuple[str, int, int, int, float]]:
    return [
        (r["queue_name"], r["pending"], r["scheduled"], r["running"], float(r["oldest_age"]))
        for r in await db.fetch(Q.queue_gauges)
    ]
