"""Cron schedule repository: create, read, pause/resume, delete, and firing (the janitor's)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import structlog

from shared import cron, wire
from shared.db import jobs as jobs_db
from shared.db.queries import Q
from shared.domain import resolve_config

log = structlog.get_logger("queueflow.cron")


def to_cron(r: asyncpg.Record) -> wire.CronSchedule:
    return wire.CronSchedule(
        id=r["id"],
        name=r["name"],
        cron_expr=r["cron_expr"],
        task_name=r["task_name"],
        enabled=r["enabled"],
        next_run_at=r["next_run_at"],
        created_at=r["created_at"],
        payload=r["payload"],
        queue_name=r["queue_name"],
        config=None if r["config"] is None else wire.JobConfig(**r["config"]),
        last_enqueued_at=r["last_enqueued_at"],
        tenant_id=r["tenant_id"],
    )


async def create(db: Any, tenant: str, body: wire.CreateCronRequest) -> str | None:
    """The new schedule's id, or None when the tenant already has a schedule by that name."""
    cron.validate(body.cron_expr)
    first = cron.next_after(body.cron_expr, datetime.now(UTC))
    cron_id = "c_" + uuid.uuid4().hex
    config = None
    if body.config is not None:
        config = {
            k: v
            for k, v in {f: getattr(body.config, f) for f in body.config.__struct_fields__}.items()
            if v is not None
        }
    return await db.fetchval(
        Q.insert_cron,
        cron_id,
        body.name,
        body.cron_expr,
        body.task_name,
        body.payload or {},
        config,
        body.queue,
        tenant,
        first,
    )


async def resume(pool: asyncpg.Pool, tenant: str, cron_id: str) -> bool:
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(Q.lock_tenant_cron, cron_id, tenant)
        if row is None:
            return False
        now = await conn.fetchval("SELECT now()")
        upcoming = cron.next_after(row["cron_expr"], now) or row["next_run_at"]
        await conn.execute(Q.resume_cron, cron_id, tenant, upcoming)
    return True


async def fire_due(pool: asyncpg.Pool, default_queue: str, batch: int) -> int:
    """Fire every due schedule once, in one transaction: the job (with a per-occurrence
    idempotency key, so no occurrence is enqueued twice even across a crash) and the next alarm.
    Missed occurrences collapse into this one firing: the next alarm is computed from now."""
    fired = 0
    async with pool.acquire() as conn, conn.transaction():
        for row in await conn.fetch(Q.due_crons, batch):
            due: datetime = row["next_run_at"]
            job = jobs_db.NewJob(
                task_name=row["task_name"],
                queue=row["queue_name"] or default_queue,
                config=resolve_config(**(row["config"] or {})),
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
                upcoming = cron.next_after(row["cron_expr"], row["db_now"])
            except Exception:
                upcoming = None
            await conn.execute(Q.cron_fired, row["id"], upcoming)
            log.info("cron_fired", cron_id=row["id"], due_at=due.isoformat())
            fired += 1
    return fired


async def pause(db: Any, tenant: str, cron_id: str) -> bool:
    return await db.fetchval(Q.pause_cron, cron_id, tenant) is not None


async def delete(db: Any, tenant: str, cron_id: str) -> bool:
    return await db.fetchval(Q.delete_cron, cron_id, tenant) is not None


async def get(db: Any, tenant: str, cron_id: str) -> wire.CronSchedule | None:
    row = await db.fetchrow(Q.get_cron, cron_id, tenant)
    return None if row is None else to_cron(row)
