"""`python -m bench.stats_series [--jobs N] [--rounds R]`: what the stats rollup (migration 39)
costs, on an embedded PostgreSQL of its own (durable commits).

1. The chart queries: N (1,000,000) finished jobs spread over the last 24 hours (2 tenants, 10
   queues each, 5 % failed, with wait and run times), counted by the janitor's scan (the time of
   that recount of 24 hours is printed too); then `stats.series` as GET /api/v1/stats/series runs
   it, with every metric the console asks for, for the 15 min, 1 h, 6 h and 24 h windows, for one
   queue and for the tenant's queues together: the median and the worst of 20 calls each (wall
   clock from this process, round trips included).
2. The completing statement on a queue that removes completed jobs, with the capture the trigger
   jobs_deleted now writes and without it (the trigger of migration 37 put back), in rounds that
   alternate: microseconds per job of complete_many over batches of 200 (medians of the rounds).
   A queue that keeps its jobs runs no new statement (the trigger returns before the capture when
   the statement deleted nothing).

A benchmark figure, not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import time
from datetime import timedelta

import asyncpg

from devkit.pg import throwaway_cluster
from shared.db import jobs as jobs_db
from shared.db import queues, stats
from shared.db.migrate import apply_migrations, migration_files
from shared.db.pool import init_connection
from shared.domain.jobs import NewJob, Retention
from shared.domain.stats import DEFAULT_STEPS, WINDOWS, Metric, series_query

TENANTS = ("acme", "globex")
QUEUES = 10
BATCH = 200


async def load_finished(pool: asyncpg.Pool, jobs: int) -> None:
    """`jobs` finished jobs over the last 24 hours, in rounds of 100,000 rows."""
    await pool.execute(
        "INSERT INTO queueflow.tenant_queues (queue_name, tenant_key)"
        " SELECT 'q' || q, t FROM generate_series(0, $1 - 1) q, unnest($2::text[]) t ON CONFLICT DO NOTHING",
        QUEUES,
        list(TENANTS),
    )
    done = 0
    while done < jobs:
        n = min(100_000, jobs - done)
        await pool.execute(
            """
            INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, tenant_id, created_at,
                                        scheduled_at, started_at, attempt_started_at, completed_at, delivery_count)
            SELECT gen_random_uuid(), 'q' || (i % $3::int), 'task' || (i % 7), '{}'::jsonb,
                   CASE WHEN i % 20 = 0 THEN 'failed' ELSE 'completed' END, ($4::text[])[1 + i % 2],
                   c, c, c + w, c + w, c + w + r, 1
            FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) i,
                 LATERAL (SELECT now() - ((i * 7919) % 86400) * interval '1 second' AS c,
                                 ((i * 31) % 3000) * interval '1 millisecond' AS w,
                                 ((i * 17) % 2000) * interval '1 millisecond' AS r) t
            """,
            done,
            n,
            QUEUES,
            list(TENANTS),
        )
        done += n
    await pool.execute("VACUUM ANALYZE queueflow.jobs")


async def time_series(pool: asyncpg.Pool) -> None:
    metrics = [",".join(Metric)]
    for queue in ("q0", None):  # (acme has the even queues)
        for window in WINDOWS:
            query = series_query(metrics, queue, window, None)
            took = []
            for _ in range(20):
                started = time.perf_counter()
                await stats.series(pool, "acme", query)
                took.append((time.perf_counter() - started) * 1000)
            print(
                f"  series {window:>3} (step {DEFAULT_STEPS[window]:>3}) {'queue q0' if queue else 'all queues':<10}"
                f"  median {statistics.median(took):6.2f} ms   worst {max(took):6.2f} ms"
            )


def old_trigger() -> str:
    """jobs_deleted as migration 37 made it (no capture)."""
    text = dict(migration_files())["0037_removing_queues"]
    found = re.search(r"CREATE FUNCTION queueflow\.jobs_deleted\(\).*?END \$\$;", text, re.S)
    assert found is not None
    return found.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def new_trigger() -> str:
    text = dict(migration_files())["0039_stats_rollup"]
    found = re.search(r"CREATE OR REPLACE FUNCTION queueflow\.jobs_deleted\(\).*?END \$\$;", text, re.S)
    assert found is not None
    return found.group(0)


async def completion_round(pool: asyncpg.Pool, batches: int) -> float:
    """Microseconds per job of complete_many on the removing queue `fast`, over `batches`."""
    await jobs_db.insert_jobs(
        pool, "bench", [NewJob(task_name="t", queue="fast") for _ in range(batches * BATCH)]
    )
    spent = 0.0
    for _ in range(batches):
        leases = await jobs_db.claim(pool, "fast", BATCH, 60, tenant="bench")
        items = [(lease.job.id, lease.token, {}) for lease in leases]
        started = time.perf_counter()
        answers = await jobs_db.complete_many(pool, items)
        spent += time.perf_counter() - started
        assert answers == [None] * len(items)
    return spent / (batches * BATCH) * 1e6


async def time_completions(pool: asyncpg.Pool, rounds: int) -> None:
    await queues.set_retention(pool, "bench", "fast", Retention.REMOVE_COMPLETED)
    figures: dict[str, list[float]] = {"with the capture": [], "without (migration 37)": []}
    await completion_round(pool, 5)  # warm up
    for _ in range(rounds):
        for name, body in (("with the capture", new_trigger()), ("without (migration 37)", old_trigger())):
            await pool.execute(body)
            figures[name].append(await completion_round(pool, 20))
    await pool.execute(new_trigger())
    for name, values in figures.items():
        print(f"  complete_many, removing queue, {name:<24} median {statistics.median(values):6.1f} us/job")


async def main(jobs: int, rounds: int) -> None:
    with throwaway_cluster("qf-bench-stats-", fsync=True) as pg:
        url = await pg.create_database("bench")
        await apply_migrations(url)
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2, init=init_connection)
        try:
            started = time.perf_counter()
            await load_finished(pool, jobs)
            print(f"{jobs:,} finished jobs written in {time.perf_counter() - started:.1f} s")
            since = await pool.fetchval("SELECT date_trunc('minute', now() - interval '24 hours 1 minute')")
            await pool.execute("UPDATE queueflow.stats_rollup SET rolled_up_to = $1", since)
            started = time.perf_counter()
            counted = 0
            while True:
                scanned = await stats.scan(pool)
                counted += scanned.jobs
                if not scanned.advanced or scanned.stop - scanned.start < timedelta(
                    minutes=stats.SCAN_MINUTES
                ):
                    break
            took = time.perf_counter() - started
            print(
                f"the scan recounted 24 h ({counted:,} jobs counted) in {took:.1f} s ({took / 1441 * 1000:.1f} ms a minute)"
            )
            rows = await pool.fetchval(
                "SELECT (SELECT count(*) FROM queueflow.stats_minutes) + (SELECT count(*) FROM queueflow.stats_durations)"
            )
            print(f"rollup rows: {rows:,}")
            await pool.execute("VACUUM ANALYZE")
            await time_series(pool)
            await time_completions(pool, rounds)
        finally:
            await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.rounds))
