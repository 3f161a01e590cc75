"""Cron schedule repository: create, read, list, pause/resume, delete, and firing (the janitor's)."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg
import msgspec
import structlog

from shared.db import jobs as jobs_db
from shared.db.listing import fetch_page
from shared.db.pool import Executor, Pool, record
from shared.db.queries import Q
from shared.domain import cron
from shared.domain.cron import CronSchedule
from shared.domain.errors import Conflict, NotFound
from shared.domain.jobs import (
    NewJob,
    Object,
    PartialJobConfig,
    check_queue_name,
    check_task_name,
    resolve_partial,
)
from shared.domain.paging import ListQuery, Page

log = structlog.get_logger("queueflow.cron")


def to_cron(r: asyncpg.Record) -> CronSchedule:
    return record(CronSchedule, r).localized()


async def create(
    db: Executor,
    tenant: str,
    *,
    name: str,
    cron_expr: str,
    task_name: str,
    payload: Object | None,
    queue: str | None,
    config: PartialJobConfig | None,
    timezone: str | None = None,
) -> str:
    """The new schedule's id; a Conflict when the tenant already has a schedule by that name."""
    check_task_name(task_name)
    if queue is not None:
        check_queue_name(queue)
    cron.validate(cron_expr)
    first = cron.next_after(cron_expr, datetime.now(UTC), timezone)
    stored = None if config is None else msgspec.to_builtins(config)
    cron_id = await db.fetchval(
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
    )
    if cron_id is None:
        raise Conflict(f"a cron schedule named '{name}' already exists")
    return str(cron_id)


async def get(db: Executor, tenant: str, cron_id: str) -> CronSchedule:
    row = await db.fetchrow(Q.get_cron, cron_id, tenant)
    if row is None:
        raise NotFound("cron schedule", cron_id)
    return to_cron(row)


async def list_crons(db: Executor, tenant: str, query: ListQuery) -> Page[CronSchedule]:
    return await fetch_page(db, "cron_schedules", "text", tenant, query.page, to_cron)


async def pause(db: Executor, tenant: str, cron_id: str) -> None:
    if await db.fetchval(Q.pause_cron, cron_id, tenant) is None:
        raise NotFound("cron schedule", cron_id)


async def delete(db: Executor, tenant: str, cron_id: str) -> None:
    if await db.fetchval(Q.delete_cron, cron_id, tenant) is None:
        raise NotFound("cron schedule", cron_id)


async def resume(pool: Pool, tenant: str, cron_id: str) -> None:
    """Resume from the next future occurrence: missed ones are not caught up."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(Q.lock_tenant_cron, cron_id, tenant)
        if row is None:
            raise NotFound("cron schedule", cron_id)
        now = await conn.fetchval("SELECT now()")
        upcoming = cron.next_after(row["cron_expr"], now, row["timezone"]) or row["next_run_at"]
        await conn.execute(Q.resume_cron, cron_id, tenant, upcoming)


async def fire_due(pool: Pool, default_queue: str, batch: int) -> int:
    """Fire every due schedule once, in one transaction: the job (with a per-occurrence
    idempotency key, so no occurrence is enqueued twice even across a crash) and the next alarm.
    Missed occurrences collapse into this one firing: the next alarm is computed from now."""
    fired = 0
    async with pool.acquire() as conn, conn.transaction():
        for row in await conn.fetch(Q.due_crons, batch):
            due: datetime = row["next_run_at"]
            config = None if row["config"] is None else msgspec.convert(row["config"], PartialJobConfig)
            job = NewJob(
                task_name=row["task_name"],
                queue=row["queue_name"] or default_queue,
                config=resolve_partial(config),
                payload=row["payload"],
                metadata={
                    "cron_id": row["id"],
                    "cron_name": row["name"],
                    "cron_due_at": due.astimezone(UTC).isoformat().replace("+00:00", "Z"),
                },
                idempotency_key=f"cron:{row['id']}:{int(due.timestamp())}",
            )
            await jobs_db.insert_jobs(conn, row["tenant_id"], [job])
            try:
                upcoming = cron.next_after(row["cron_expr"], row["db_now"], row["timezone"])
            except Exception:  # a schedule that cannot be evaluated stops firing
                upcoming = None
            await conn.execute(Q.cron_fired, row["id"], upcoming)
            log.info("cron_fired", cron_id=row["id"], due_at=due.isoformat())
            fired += 1
    return fired
