"""H: does the cost of a job grow with what the table holds? (issue goal 5)

Three databases, each fresh, each drained by `--mode all --workers 16` (the W1b server):

- **base**: a 20,000-job backlog and nothing else;
- **history**: the same backlog beside 10,000,000 finished jobs (100,000 with --quick) of the same
  tenant and queue, written straight into the table with SQL (completed, with results, spread over
  the past days, random version 4 ids as older servers wrote them), then VACUUM ANALYZE, as
  autovacuum would have left them;
- **backlog**: 1,000,000 pending jobs (100,000 with --quick), of which the first 20,000 drained
  are measured.

Each reports the drain rate of 20,000 jobs on the database's clock (from the first claim to the
20,000th completion) and a claim rate: the harness calls the server's own claim statement
(`shared.db.jobs.claim`, 50 at a time, sequentially) on 5,000 jobs of a second queue, before the
server starts, so that it measures the claim alone. The ratios history/base and backlog/base are
what goal 5 asks for (within 10% and 20%).
"""

from __future__ import annotations

import os
import time

import asyncpg

from bench import client
from bench.context import Context, Scenario
from bench.harness import connect, servers, wait_for_count
from bench.report import Figure
from shared.db import jobs as jobs_db
from shared.db.pool import init_connection

QUEUE = "default"
CLAIM_QUEUE = "claim-probe"
DRAINED = 20_000
CLAIM_JOBS = 5_000
TIMEOUT_SECS = 900.0

HISTORY_SQL = """
INSERT INTO queueflow.jobs
    (id, queue_name, task_name, payload, config, status, priority, created_at, scheduled_at,
     started_at, completed_at, result, tenant_id, delivery_count)
SELECT gen_random_uuid(), $1, 'echo', jsonb_build_object('i', g), $3::jsonb, 'completed', 0,
       t, t, t, t + interval '2 milliseconds', '{"ok": true}', $2, 1
FROM generate_series(1, $4::int) AS g,
     LATERAL (SELECT now() - interval '10 days' + g * interval '50 milliseconds' AS t) AS s
"""
BACKLOG_SQL = """
INSERT INTO queueflow.jobs (id, queue_name, task_name, payload, config, tenant_id)
SELECT gen_random_uuid(), $1, 'echo', jsonb_build_object('i', g), $3::jsonb, $2
FROM generate_series(1, $4::int) AS g
"""
CONFIG = '{"priority": 0, "max_retries": 3, "timeout_secs": 300, "retry_backoff": "exponential"}'


def completed_since(since: object) -> str:
    """The completion count wait_for_count polls (a literal: it takes no parameters); the range on
    completed_at keeps it on the terminal-jobs index, whatever the history."""
    return f"SELECT count(*) FROM queueflow.jobs WHERE status = 'completed' AND completed_at >= '{since}'::timestamptz"


WINDOW = """
SELECT (SELECT min(started_at) FROM queueflow.jobs
        WHERE status = 'completed' AND completed_at >= $1 AND queue_name = $3) AS first,
       (SELECT completed_at FROM queueflow.jobs WHERE status = 'completed' AND completed_at >= $1
        ORDER BY completed_at OFFSET $2 - 1 LIMIT 1) AS last
"""
# History last: writing ten million rows leaves gigabytes of dirty pages for the kernel to write
# back, which would slow whatever ran next.
SHAPES = ("base", "backlog", "history")


def figures(ctx: Context) -> list[Figure]:
    hist, backlog = f"{ctx.n(10_000_000, 100_000):,}", f"{ctx.n(1_000_000, 100_000):,}"
    label = {
        "base": "empty table, 20,000-job backlog",
        "history": f"{hist} finished jobs beside a 20,000-job backlog",
        "backlog": f"{backlog}-job backlog",
    }
    figs = []
    for shape in SHAPES:
        figs += [
            Figure(f"{shape}_drain_jobs_per_s", f"drain 20,000 ({label[shape]}), --workers 16", "jobs/s"),
            Figure(f"{shape}_claim_jobs_per_s", f"claim, 50 at a time ({label[shape]})", "jobs/s"),
        ]
    figs += [
        Figure("history_vs_base_drain", "drain: history / base (goal: >= 0.90)", "ratio"),
        Figure("history_vs_base_claim", "claim: history / base (goal: >= 0.90)", "ratio"),
        Figure("backlog_vs_base_drain", "drain: backlog / base (goal: >= 0.80)", "ratio"),
        Figure("backlog_vs_base_claim", "claim: backlog / base (goal: >= 0.80)", "ratio"),
        Figure("history_fill_secs", f"writing {hist} finished jobs (setup, not a goal)", "s"),
    ]
    return figs


async def _tenant_of_dev_token(http, base_url: str, conn: asyncpg.Connection) -> str:
    """The tenant id the bench's --dev token maps to (history must be that tenant's)."""
    job_id = await client.create_job(http, base_url, 0, "tenant-probe")
    tenant = await conn.fetchval("SELECT tenant_id FROM queueflow.jobs WHERE id = $1::uuid", job_id)
    await conn.execute("DELETE FROM queueflow.jobs WHERE id = $1::uuid", job_id)
    return str(tenant)


async def _claim_rate(conn: asyncpg.Connection) -> float:
    await init_connection(conn)
    started = time.perf_counter()
    claimed = 0
    while claimed < CLAIM_JOBS:
        got = await jobs_db.claim(conn, CLAIM_QUEUE, 50, 300)
        if not got:
            raise RuntimeError(f"claim probe: {claimed} of {CLAIM_JOBS} claimed, then nothing")
        claimed += len(got)
    return claimed / (time.perf_counter() - started)


async def _one(ctx: Context, shape: str) -> dict[str, float]:
    out: dict[str, float] = {}
    async with ctx.database(f"h_{shape}") as dsn:
        api = ctx.server(dsn, "api")
        conn = await connect(dsn)
        try:
            async with servers(api), client.session() as http:
                tenant = await _tenant_of_dev_token(http, api.base_url, conn)
                if shape == "history":
                    n = ctx.n(10_000_000, 100_000)
                    began = time.perf_counter()
                    for start in range(0, n, 1_000_000):
                        await conn.execute(HISTORY_SQL, QUEUE, tenant, CONFIG, min(1_000_000, n - start))
                    await conn.execute("VACUUM ANALYZE queueflow.jobs")
                    out["history_fill_secs"] = time.perf_counter() - began
                if shape == "backlog":
                    await conn.execute(BACKLOG_SQL, QUEUE, tenant, CONFIG, ctx.n(1_000_000, 100_000))
                    await conn.execute("VACUUM ANALYZE queueflow.jobs")
                else:
                    await client.enqueue_backlog(http, api.base_url, DRAINED, QUEUE)
                await client.enqueue_backlog(http, api.base_url, CLAIM_JOBS, CLAIM_QUEUE)
            await conn.execute("CHECKPOINT")
            os.sync()  # and the kernel's dirty pages written back, so the drain is not behind them
            out[f"{shape}_claim_jobs_per_s"] = await _claim_rate(conn)
            since = await conn.fetchval("SELECT now()")
            worker = ctx.server(dsn, "all", "--workers", "16", "--queues", QUEUE)
            async with servers(worker):
                await wait_for_count(conn, completed_since(since.isoformat()), DRAINED, TIMEOUT_SECS)
            row = await conn.fetchrow(WINDOW, since, DRAINED, QUEUE)
            out[f"{shape}_drain_jobs_per_s"] = DRAINED / (row["last"] - row["first"]).total_seconds()
        finally:
            await conn.close()
    return out


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for shape in SHAPES:
        out.update(await _one(ctx, shape))
    for shape in ("history", "backlog"):
        for what in ("drain", "claim"):
            out[f"{shape}_vs_base_{what}"] = (
                out[f"{shape}_{what}_jobs_per_s"] / out[f"base_{what}_jobs_per_s"]
            )
    return out


SCENARIO = Scenario("H", "Cost against history: 10M finished jobs, a 1M backlog (goal 5)", figures, run)
