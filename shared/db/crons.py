"""Cron schedule repository: create, read, list, pause/resume, delete, and firing (the janitor's)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import asyncpg
import msgspec
import structlog

from shared.db import audit
from shared.db import jobs as jobs_db
from shared.db import queues as queues_db
from shared.db.listing import fetch_page
from shared.db.pool import Connection, Executor, Pool, record
from shared.db.queries import Q
from shared.domain import cron
from shared.domain.cron import CronSchedule
from shared.domain.errors import Conflict, NotFound, TooManyQueues, ValidationFailed
from shared.domain.jobs import (
    NewJob,
    Object,
    PartialJobConfig,
    check_queue_name,
    check_task_name,
    resolve_partial,
    utc_text,
)
from shared.domain.paging import ListQuery, Page
from shared.domain.workflows import WorkflowDefinition, WorkflowLimits, check_budget, normalise
from shared.domain.workflows import validate as validate_workflow

log = structlog.get_logger("queueflow.cron")


def to_cron(r: asyncpg.Record) -> CronSchedule:
    return record(CronSchedule, r).localized()


async def create(
    db: Executor,
    tenant: str,
    *,
    name: str,
    cron_expr: str,
    task_name: str | None,
    payload: Object | None,
    queue: str | None,
    config: PartialJobConfig | None,
    timezone: str | None = None,
    workflow: WorkflowDefinition | None = None,
    limits: WorkflowLimits,
) -> str:
    """The new schedule's id; a Conflict when the tenant already has a schedule by that name, or
    when its queue would be one more than the tenant's cap allows (TooManyQueues). A schedule has a
    task or a workflow (checked, against `limits` too, and stored normalised), never both; a
    workflow's queues are checked when each occurrence starts it."""
    if (task_name is None) == (workflow is None):
        raise ValidationFailed("a cron schedule needs exactly one of task_name or workflow")
    if task_name is not None:
        check_task_name(task_name)
    stored_workflow = None
    if workflow is not None:
        if payload or queue is not None or config is not None:
            raise ValidationFailed(
                "payload, queue and config belong to a task schedule; a workflow carries its own"
            )
        validate_workflow(workflow)
        check_budget(workflow, limits)
        stored_workflow = msgspec.to_builtins(normalise(workflow))
    if queue is not None:
        check_queue_name(queue)
    first = await asyncio.to_thread(_first_occurrence, cron_expr, timezone)
    stored = None if config is None else msgspec.to_builtins(config)
    async with audit.change(db) as conn:
        if queue is not None:
            await queues_db.check_room(conn, tenant, [queue])
        cron_id = await conn.fetchval(
            Q.insert_cron,
            cron.new_cron_id(),
            name,
            cron_expr,
            task_name,
            payload or {},
            stored,
            queue,
            tenant,
            first,
            timezone,
            stored_workflow,
        )
        if cron_id is None:
            raise Conflict(f"a cron schedule named '{name}' already exists")
        audit.made(cron_id)
    return str(cron_id)


def _first_occurrence(cron_expr: str, timezone: str | None) -> datetime | None:
    """A new schedule's expression checked and its first occurrence found: run in a worker thread,
    since croniter can search for tens of milliseconds (cron.validate)."""
    cron.validate(cron_expr)
    return cron.next_after(cron_expr, datetime.now(UTC), timezone)


async def get(db: Executor, tenant: str, cron_id: str) -> CronSchedule:
    row = await db.fetchrow(Q.get_cron, cron_id, tenant)
    if row is None:
        raise NotFound("cron schedule", cron_id)
    return to_cron(row)


async def list_crons(db: Executor, tenant: str, query: ListQuery) -> Page[CronSchedule]:
    return await fetch_page(db, "cron_schedules", "text", tenant, query.page, to_cron)


async def pause(db: Executor, tenant: str, cron_id: str) -> None:
    async with audit.change(db) as conn:
        if await conn.fetchval(Q.pause_cron, cron_id, tenant) is None:
            raise NotFound("cron schedule", cron_id)


async def delete(db: Executor, tenant: str, cron_id: str) -> None:
    async with audit.change(db) as conn:
        if await conn.fetchval(Q.delete_cron, cron_id, tenant) is None:
            raise NotFound("cron schedule", cron_id)


async def resume(pool: Pool, tenant: str, cron_id: str) -> None:
    """Resume from the next future occurrence: missed ones are not caught up."""
    async with audit.change(pool, atomic=True) as conn:
        row = await conn.fetchrow(Q.lock_tenant_cron, cron_id, tenant)
        if row is None:
            raise NotFound("cron schedule", cron_id)
        now = await conn.fetchval("SELECT now()")
        upcoming = cron.next_after(row["cron_expr"], now, row["timezone"]) or row["next_run_at"]
        await conn.execute(Q.resume_cron, cron_id, tenant, upcoming)


# Starts a workflow in the caller's transaction: (connection, tenant, definition) -> its id. The
# janitor passes the workflow runtime's; the db layer only calls it.
StartWorkflow = Callable[[Connection, "str | None", WorkflowDefinition], Awaitable[str]]


async def fire_due(pool: Pool, default_queue: str, batch: int, start_workflow: StartWorkflow) -> int:
    """Fire every due schedule once, in one transaction: the job (with a per-occurrence
    idempotency key, so no occurrence is enqueued twice even across a crash) or the workflow
    (`start_workflow`, named `<schedule>@<occurrence>`), and the next alarm. Missed occurrences
    collapse into this one firing: the next alarm is computed from now. An occurrence whose queue
    would take its tenant past the queue cap is skipped, with a warning, and the schedule moves on
    (the rest of the batch still fires)."""
    fired = 0
    async with pool.acquire() as conn, conn.transaction():
        for row in await conn.fetch(Q.due_crons, batch):
            due: datetime = row["next_run_at"]
            try:
                async with conn.transaction():  # a savepoint: a refused occurrence leaves no trace
                    started = await _fire(conn, row, due, default_queue, start_workflow)
            except TooManyQueues as err:
                log.warning("cron_skipped", cron_id=row["id"], due_at=due.isoformat(), error=err.message)
            else:
                log.info("cron_fired", cron_id=row["id"], due_at=due.isoformat(), **started)
                fired += 1
            await _moved_on(conn, row)
    return fired


async def _fire(
    conn: Connection, row: asyncpg.Record, due: datetime, default_queue: str, start_workflow: StartWorkflow
) -> dict[str, str]:
    """One occurrence's workflow or job; what the log line names of it."""
    if row["workflow"] is not None:
        definition = msgspec.convert(row["workflow"], WorkflowDefinition)
        named = msgspec.structs.replace(definition, name=cron.occurrence_name(row["name"], due))
        return {"workflow_id": await start_workflow(conn, row["tenant_id"], named)}
    config = None if row["config"] is None else msgspec.convert(row["config"], PartialJobConfig)
    job = NewJob(
        task_name=row["task_name"],
        queue=row["queue_name"] or default_queue,
        config=resolve_partial(config),
        payload=row["payload"],
        metadata={
            "cron_id": row["id"],
            "cron_name": row["name"],
            "cron_due_at": utc_text(due),
        },
        idempotency_key=f"cron:{row['id']}:{int(due.timestamp())}",
    )
    await jobs_db.insert_jobs(conn, row["tenant_id"], [job])
    return {}


async def _moved_on(conn: Connection, row: asyncpg.Record) -> None:
    """The schedule's next alarm, from now (so missed occurrences collapse into the one fired)."""
    try:
        upcoming = cron.next_after(row["cron_expr"], row["db_now"], row["timezone"])
    except Exception:  # a schedule that cannot be evaluated stops firing
        upcoming = None
    await conn.execute(Q.cron_fired, row["id"], upcoming)
