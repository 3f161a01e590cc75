"""T: durable time in workflows (issue 15): a mass of sleeps falling due at once, and the latency
from an event to the step after the wait it ends.

Method: a fresh database; `--mode api` and `--mode workflow` processes (the workflow process owns
the timers and the advancer).

- Mass wake-up: one workflow of one sleep step is created through the API, then cloned in SQL into
  100,000 workflows (5,000 with --quick), all sleeping, vacuumed and checkpointed (the steady state
  of sleeps made over time), their wake-ups set to one instant a few seconds ahead (and the timers
  told, as arming does). Figure: seconds from that instant until every
  sleep step has completed, and its workflow with it (database clock: the last completed_at; polled
  every 0.1 s with one index probe), and the rate.
- Drain beside sleepers: 100,000 echo jobs (2,000 with --quick) drained in-process (`--mode all
  --workers 16`, W1b's method and DB-clock rate) in a fresh database with 1,000,000 sleeping steps
  (20,000 with --quick; cloned as above, due in a day) and in one with none, each vacuumed and
  checkpointed before the jobs go in; the figure is the ratio (the issue asks for within 5%).
- Event latency: 2,000 workflows (200 with --quick) of a wait for `t:<i>` followed by a task step on
  a queue nothing drains are created through the API; once every wait is armed, events `t:0`, `t:1`
  ... are posted open loop, one every 5 ms (200/s). Per workflow: the next step's job's created_at
  minus the event's created_at (both the database's clock: the two transactions' start times).
"""

from __future__ import annotations

import asyncio

from bench import client
from bench.context import PROBE_FIGURES, Context, Scenario, probe_commits
from bench.harness import connect, servers, wait_for_count
from bench.report import Figure, percentile
from bench.scenarios import w1_drain

NAP = {"name": "nap", "steps": [{"name": "nap", "sleep_secs": 86_400}]}
CLONE_WORKFLOWS = """
INSERT INTO queueflow.workflows
SELECT (jsonb_populate_record(w, jsonb_build_object('id', 'bench-' || g))).*
FROM queueflow.workflows w, generate_series(1, $2) g WHERE w.id = $1"""
CLONE_STEPS = """
INSERT INTO queueflow.workflow_steps
SELECT (jsonb_populate_record(s, jsonb_build_object('workflow_id', 'bench-' || g))).*
FROM queueflow.workflow_steps s, generate_series(1, $2) g WHERE s.workflow_id = $1"""
DUE_AT = """
WITH due AS (SELECT date_trunc('second', now()) + make_interval(secs => $1) AS at)
UPDATE queueflow.workflow_steps SET wake_at = (SELECT at FROM due) WHERE name = 'nap'
RETURNING (SELECT at FROM due)"""
SLEEP_DONE = "SELECT count(*) FROM queueflow.workflow_steps WHERE name = 'nap' AND status = 'completed'"
# Polled every 0.1 s while the sleepers wake: one probe of the live-workflows partial index (a
# count of 100,000 step rows each time cost PostgreSQL a third of a core, slowing what it measures).
NONE_LIVE = """
SELECT CASE WHEN EXISTS (SELECT 1 FROM queueflow.workflows WHERE status IN ('created', 'running'))
THEN 0 ELSE 1 END"""
EVENT_LATENCY = """
SELECT EXTRACT(EPOCH FROM j.created_at - e.created_at) AS secs
FROM queueflow.events e
JOIN queueflow.workflows w ON w.context->>'key' = e.key
JOIN queueflow.jobs j ON j.workflow_id = w.id AND j.workflow_step_id = 'next'"""
WAITING = "SELECT count(*) FROM queueflow.workflow_steps WHERE name = 'w' AND event_key IS NOT NULL"
NEXT_JOBS = "SELECT count(*) FROM queueflow.jobs WHERE workflow_step_id = 'next'"


def figures(ctx: Context) -> list[Figure]:
    n = ctx.n(100_000, 5_000)
    idle = ctx.n(1_000_000, 20_000)
    return [
        Figure("drain_none_jobs_per_s", "in-process drain, no sleeping steps, DB clock", "jobs/s"),
        Figure("drain_sleepers_jobs_per_s", f"in-process drain beside {idle:,} sleeping steps", "jobs/s"),
        Figure("drain_ratio", "drain beside the sleepers / without (goal >= 0.95)", "x"),
        Figure("sleepers", "sleeping steps falling due at one instant", "steps"),
        Figure("wake_all_secs", f"{n:,} sleeps due at once: due instant -> every one completed", "s"),
        Figure("wake_rate", "sleep steps completed per second during that", "steps/s"),
        Figure("event_p50_ms", "200 events/s: event -> the next step's job created, p50", "ms"),
        Figure("event_p99_ms", "200 events/s: event -> the next step's job created, p99", "ms"),
        Figure("event_rate", "events posted per second (open loop, target 200)", "events/s"),
        *PROBE_FIGURES,
    ]


async def _create(http, base: str, body: dict) -> str:
    async with http.post(f"{base}/api/v1/workflows", json=body) as resp:
        answer = await resp.json()
        if resp.status != 201:
            raise RuntimeError(f"create workflow -> {resp.status}: {answer}")
        return str(answer["workflow_id"])


async def _mass_wake_up(ctx: Context, http, base: str, conn) -> dict[str, float]:
    n = ctx.n(100_000, 5_000)
    template = await _create(http, base, NAP)
    await conn.execute(CLONE_WORKFLOWS, template, n - 1)
    await conn.execute(CLONE_STEPS, template, n - 1)
    # Steady state, as sleeps made over hours or days would be: autovacuum has been through them
    # (not the aftermath of a bulk load: hint bits to set on first read, autovacuum starting mid-run).
    await conn.execute("VACUUM ANALYZE queueflow.workflows")
    await conn.execute("VACUUM ANALYZE queueflow.workflow_steps")
    await conn.execute("CHECKPOINT")
    due = await conn.fetchval(DUE_AT, 3)
    await conn.execute("SELECT pg_notify('queueflow_timers', '')")
    await wait_for_count(conn, NONE_LIVE, 1, 900, interval=0.1)
    done = await conn.fetchval(SLEEP_DONE)
    if done != n:
        raise RuntimeError(f"every workflow ended but {done} of {n} sleeps completed")
    finished = await conn.fetchval(
        "SELECT max(completed_at) FROM queueflow.workflow_steps WHERE name = 'nap'"
    )
    secs = (finished - due).total_seconds()
    return {"sleepers": float(n), "wake_all_secs": secs, "wake_rate": n / max(secs, 1e-6)}


async def _event_latency(ctx: Context, http, base: str, conn) -> dict[str, float]:
    m = ctx.n(2_000, 200)
    gate = asyncio.Semaphore(16)

    async def create(i: int) -> str:
        body = {
            "name": f"wait-{i}",
            "context": {"key": f"t:{i}"},
            "steps": [
                {"name": "w", "wait_for_event": {"key": "{{context.key}}"}},
                {"name": "next", "task_name": "echo", "queue": "bench-t-undrained", "depends_on": ["w"]},
            ],
        }
        async with gate:
            return await _create(http, base, body)

    await asyncio.gather(*(create(i) for i in range(m)))
    await wait_for_count(conn, WAITING, m, 300, interval=0.1)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    sends = []
    for i in range(m):
        delay = t0 + i * 0.005 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        sends.append(asyncio.create_task(client.post(http, f"{base}/api/v1/events", {"key": f"t:{i}"}, 202)))
    await asyncio.gather(*sends)
    rate = m / (loop.time() - t0)
    await wait_for_count(conn, NEXT_JOBS, m, 300, interval=0.1)
    lat = [1000 * float(r["secs"]) for r in await conn.fetch(EVENT_LATENCY)]
    return {"event_p50_ms": percentile(lat, 50), "event_p99_ms": percentile(lat, 99), "event_rate": rate}


async def _clone_sleepers(http, base: str, conn, count: int) -> None:
    """`count` workflows of one step sleeping for a day (one made through the API, cloned in SQL)."""
    template = await _create(http, base, NAP)
    await conn.execute(CLONE_WORKFLOWS, template, count - 1)
    await conn.execute(CLONE_STEPS, template, count - 1)
    await conn.execute("ANALYZE")


async def _drain(ctx: Context, sleepers: int) -> float:
    total = ctx.n(100_000, 2_000)  # five seconds or so: a one-second drain cannot show 5%
    async with ctx.database(f"t_drain_{sleepers}") as dsn:
        conn = await connect(dsn)
        try:
            api = ctx.server(dsn, "api")
            async with servers(api), client.session() as http:
                if sleepers:
                    await _clone_sleepers(http, api.base_url, conn, sleepers)
                # Steady state, not the aftermath of a bulk load: the clone's rows vacuumed (so
                # autovacuum does not start on them mid-drain) and its pages written out.
                await conn.execute("VACUUM ANALYZE")
                await conn.execute("CHECKPOINT")
                await client.enqueue_backlog(http, api.base_url, total, w1_drain.QUEUE)
            async with servers(ctx.server(dsn, "all", "--workers", "16")):
                await wait_for_count(conn, w1_drain.COMPLETED, total, w1_drain.TIMEOUT_SECS)
            return await w1_drain._db_rate(conn, total)
        finally:
            await conn.close()


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with ctx.database("t") as dsn:
        procs = (ctx.server(dsn, "api"), ctx.server(dsn, "workflow"))
        async with servers(*procs) as (api, _), client.session() as http:
            out.update(await probe_commits(dsn))
            conn = await connect(dsn)
            try:
                out.update(await _mass_wake_up(ctx, http, api.base_url, conn))
                out.update(await _event_latency(ctx, http, api.base_url, conn))
            finally:
                await conn.close()
    # The two drains take turns going first, so that neither always follows the phase above.
    order = [("none", 0), ("sleepers", ctx.n(1_000_000, 20_000))]
    for name, sleepers in order if run_no % 2 else reversed(order):
        out[f"drain_{name}_jobs_per_s"] = await _drain(ctx, sleepers)
    out["drain_ratio"] = out["drain_sleepers_jobs_per_s"] / out["drain_none_jobs_per_s"]
    return out


SCENARIO = Scenario(
    "T", "Durable time: 100,000 sleeps due at once; event -> next step at 200/s", figures, run
)
