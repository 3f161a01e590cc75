"""The stats rollup (migration 39) at the statements: each job counted once, by the janitor's scan
of its row or by a capture of the statement that deleted it first; retries captured by the failing
statements; a recount of scanned minutes replaces what it counted; SQL's buckets are Python's."""

from __future__ import annotations

import uuid

import asyncpg

from shared.db import janitor, queues, stats
from shared.db import jobs as jobs_db
from shared.domain.jobs import NewJob, Retention
from shared.domain.stats import bucket_of, series_query, window_of

TENANT = "acme"
# A scan with this lag counts the minute now is in too (the tests cannot wait for it to end).
NOW_INCLUDED = -60.0


async def enqueue(
    pool: asyncpg.Pool, queue: str, n: int = 1, tenant: str = TENANT, **fields: object
) -> list[uuid.UUID]:
    return await jobs_db.insert_jobs(
        pool, tenant, [NewJob(task_name="t", queue=queue, **fields) for _ in range(n)]
    )


async def claim(pool: asyncpg.Pool, queue: str, tenant: str = TENANT) -> dict[uuid.UUID, uuid.UUID]:
    leases = await jobs_db.claim(pool, queue, 100, 60, tenant=tenant)
    return {lease.job.id: lease.token for lease in leases}


async def complete(pool: asyncpg.Pool, leases: dict[uuid.UUID, uuid.UUID]) -> None:
    assert await jobs_db.complete_many(pool, [(j, t, {}) for j, t in leases.items()]) == [None] * len(leases)


async def totals(pool: asyncpg.Pool, queue: str = "", tenant: str = TENANT) -> dict[str, int]:
    """Everything the rollup holds for the queue ('': the tenant's queues together)."""
    row = await pool.fetchrow(
        "SELECT COALESCE(sum(enqueued), 0) AS enqueued, COALESCE(sum(completed), 0) AS completed,"
        " COALESCE(sum(failed), 0) AS failed, COALESCE(sum(retried), 0) AS retried"
        " FROM queueflow.stats_minutes WHERE tenant_key = $1 AND queue_name = $2",
        tenant,
        queue,
    )
    runs = await pool.fetchval(
        "SELECT COALESCE(sum(jobs), 0) FROM queueflow.stats_durations"
        " WHERE tenant_key = $1 AND queue_name = $2 AND kind = 'r'",
        tenant,
        queue,
    )
    return {**{k: int(v) for k, v in dict(row).items()}, "timed": int(runs)}


async def roll_up(pool: asyncpg.Pool) -> None:
    await stats.scan(pool, NOW_INCLUDED, 100_000)
    await stats.fold(pool)


async def test_jobs_removed_by_their_completion_are_counted_though_their_rows_are_gone(pool):
    await queues.set_retention(pool, TENANT, "fast", Retention.REMOVE_COMPLETED)
    ids = await enqueue(pool, "fast", 3)
    await complete(pool, await claim(pool, "fast"))
    assert await pool.fetchval("SELECT count(*) FROM queueflow.jobs WHERE id = ANY($1)", ids) == 0
    await roll_up(pool)
    expected = {"enqueued": 3, "completed": 3, "failed": 0, "retried": 0, "timed": 3}
    assert await totals(pool, "fast") == expected
    assert await totals(pool) == expected


async def test_kept_jobs_are_counted_by_the_scan_per_queue_and_for_the_tenant(pool):
    await enqueue(pool, "a", 2)
    await enqueue(pool, "b", 1)
    await complete(pool, await claim(pool, "a"))
    await roll_up(pool)
    assert await totals(pool, "a") == {"enqueued": 2, "completed": 2, "failed": 0, "retried": 0, "timed": 2}
    assert await totals(pool, "b") == {"enqueued": 1, "completed": 0, "failed": 0, "retried": 0, "timed": 0}
    assert await totals(pool) == {"enqueued": 3, "completed": 2, "failed": 0, "retried": 0, "timed": 2}


async def test_a_recount_of_scanned_minutes_replaces_what_they_counted(pool):
    await enqueue(pool, "a", 2)
    await complete(pool, await claim(pool, "a"))
    await roll_up(pool)
    await pool.execute("UPDATE queueflow.stats_rollup SET rolled_up_to = rolled_up_to - interval '1 hour'")
    await roll_up(pool)
    assert await totals(pool, "a") == {"enqueued": 2, "completed": 2, "failed": 0, "retried": 0, "timed": 2}


async def test_retries_and_failures_are_counted_when_they_happen(pool):
    [job] = await enqueue(pool, "flaky")
    for _ in range(2):
        [(job_id, token)] = (await claim(pool, "flaky")).items()
        await jobs_db.fail(pool, job_id, token, "boom", True)
        await pool.execute("UPDATE queueflow.jobs SET scheduled_at = now() WHERE id = $1", job)
    [(job_id, token)] = (await claim(pool, "flaky")).items()
    await jobs_db.fail(pool, job_id, token, "boom", False)
    await roll_up(pool)
    assert await totals(pool, "flaky") == {
        "enqueued": 1,
        "completed": 0,
        "failed": 1,
        "retried": 2,
        "timed": 1,
    }


async def test_a_lingering_job_is_counted_once_whether_it_goes_before_or_after_its_minute_is_scanned(pool):
    await queues.set_retention(pool, TENANT, "fast", Retention.REMOVE_COMPLETED)
    ids = await enqueue(pool, "fast", 2)
    await pool.execute("UPDATE queueflow.jobs SET lingers = true WHERE id = ANY($1)", ids)
    await complete(pool, await claim(pool, "fast"))
    assert await pool.fetchval("SELECT count(*) FROM queueflow.job_removals") == 2
    # One goes before the scan (captured), the other after it (counted by the scan, not again).
    await pool.execute(
        "UPDATE queueflow.job_removals SET completed_at = now() - interval '1 hour' WHERE job_id = $1", ids[0]
    )
    assert await janitor.remove_lingering(pool, 60, 100) == 1
    await roll_up(pool)
    await pool.execute("UPDATE queueflow.job_removals SET completed_at = now() - interval '1 hour'")
    assert await janitor.remove_lingering(pool, 60, 100) == 1
    await roll_up(pool)
    assert await totals(pool, "fast") == {
        "enqueued": 2,
        "completed": 2,
        "failed": 0,
        "retried": 0,
        "timed": 2,
    }


async def test_other_tenants_jobs_are_counted_for_them_only(pool):
    await enqueue(pool, "a", 2)
    await enqueue(pool, "a", 5, tenant="other")
    await roll_up(pool)
    assert (await totals(pool))["enqueued"] == 2
    assert (await totals(pool, tenant="other"))["enqueued"] == 5


async def test_the_sql_buckets_are_the_ones_python_reads_back(pool):
    for secs in (0.0, 0.00005, 0.0001, 0.00013, 0.001, 0.25, 1.0, 2.0, 3.7, 60.0, 3600.0, 86400.0 * 3):
        assert await pool.fetchval("SELECT queueflow.stats_bucket($1::float8)", secs) == bucket_of(secs), secs


async def test_a_series_window_ends_at_the_step_holding_the_last_counted_minute(pool):
    when = await pool.fetchval("SELECT timestamptz '2026-01-01 10:07:00+00'")
    start, end = window_of(series_query(["completed"], None, "1h", "15m"), when)
    assert (start.isoformat(), end.isoformat()) == ("2026-01-01T09:15:00+00:00", "2026-01-01T10:15:00+00:00")
    start, end = window_of(series_query(["completed"], None, "15m", None), when)
    assert (start.isoformat(), end.isoformat()) == ("2026-01-01T09:52:00+00:00", "2026-01-01T10:07:00+00:00")
