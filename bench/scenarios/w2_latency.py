"""W2: enqueue-to-lease latency with workers idle in long-poll.

Method: a fresh database, `--mode api` plus `--mode janitor`. Four remote worker loops (Context
`latency_loops`) lease with max_jobs 1 (`latency_max_jobs`) and wait_secs 20, so between jobs they
are parked in the server's long-poll; the harness waits until the server's
`queueflow_long_poll_waiters` gauge shows all of them parked (a server without that gauge,
upstream's Rust server, gets one warm-up job instead, leased and completed before the timing
starts, and left out of every figure). Then one job
is enqueued every 5 ms (open loop: each POST is its own task, sent at t0 + i * 5 ms whether or not
the previous one has answered) for 2,000 jobs (200 with --quick); every leased job is completed.

A second, light phase on another queue (fresh loops, parked again) enqueues one job every 50 ms
for 200 jobs (50 with --quick): far below capacity, so it shows the wake-up path itself rather than
queueing behind a saturated database (skipped when Context `latency_slow_phase` is false).

Two measurements per job, both reported:
- client clock: lease receipt (worker loop, perf_counter) minus the moment the enqueuer started the
  POST; the same process and clock, so there is no skew. It includes the enqueue round trip.
- database clock: started_at - created_at (the claim's transaction start minus the insert's).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import asyncpg

from bench import client
from bench.context import PROBE_FIGURES, Context, Scenario, cpu_figures, cpu_values, probe_commits
from bench.harness import connect, servers, wait_for_count
from bench.probes import CpuMeter, prometheus_value
from bench.report import Figure, percentile
from devkit.procs import ServiceProcess

DB_LATENCY = """SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY
    EXTRACT(EPOCH FROM started_at - created_at)) AS p FROM queueflow.jobs
WHERE queue_name = $1 AND (payload->>'i')::int >= 0"""
COMPLETED = "SELECT count(*) FROM queueflow.jobs WHERE status = 'completed' AND queue_name = '{queue}'"
# (key prefix, queue, interval between enqueues, jobs, jobs with --quick)
PHASES = (("", "w2", 0.005, 2_000, 200), ("slow_", "w2-slow", 0.050, 200, 50))


def _phases(ctx: Context) -> tuple[tuple[str, str, float, int, int], ...]:
    return PHASES if ctx.latency_slow_phase else PHASES[:1]


def figures(ctx: Context) -> list[Figure]:
    ref = "L.cycle1_latency_ms"
    figs = []
    shape = ""
    if (ctx.latency_loops, ctx.latency_max_jobs) != (4, 1):
        shape = f" ({ctx.latency_loops} parked x max_jobs {ctx.latency_max_jobs})"
    for prefix, _, interval, _, _ in _phases(ctx):
        every = f"1 job / {interval * 1000:.0f} ms{shape}"
        figs += [
            Figure(f"{prefix}client_p{q}_ms", f"{every}: enqueue->lease p{q}, client clock", "ms", ref)
            for q in (50, 95, 99)
        ]
        figs += [
            Figure(f"{prefix}db_p{q}_ms", f"{every}: created_at->started_at p{q}, DB clock", "ms", ref)
            for q in (50, 95, 99)
        ]
        figs.append(Figure(f"{prefix}enqueue_rate", f"{every}: achieved enqueue rate", "jobs/s"))
    return [
        *figs,
        *cpu_figures("", "at 1 job / 5 ms", "api" if ctx.upstream else "api + janitor"),
        *PROBE_FIGURES,
    ]


WAITERS = "queueflow_long_poll_waiters"


async def _wait_parked(
    http: aiohttp.ClientSession,
    api: ServiceProcess,
    conn: asyncpg.Connection,
    queue: str,
    want: int,
    within: float = 10.0,
) -> int:
    """Until `want` lease calls are parked; returns how many warm-up jobs that took (0, or 1 on a
    server without the waiters gauge: the loops are running once one job went round)."""
    metrics = f"{api.metrics_url}/metrics"
    if await prometheus_value(http, metrics, WAITERS) is None:
        await client.post(http, f"{api.base_url}/api/v1/jobs", client.job_body(-1, queue), 201)
        await wait_for_count(conn, COMPLETED.format(queue=queue), 1, within, interval=0.05)
        return 1
    deadline = time.monotonic() + within
    while (await prometheus_value(http, metrics, WAITERS) or 0) < want:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {want} long-poll waiters parked after {within}s")
        await asyncio.sleep(0.05)
    return 0


async def _phase(
    ctx: Context,
    api: ServiceProcess,
    pids: list[int],
    http: aiohttp.ClientSession,
    dsn: str,
    prefix: str,
    queue: str,
    interval: float,
    total: int,
) -> dict[str, float]:
    sent: dict[str, float] = {}
    leased: dict[str, float] = {}
    stop = asyncio.Event()
    loops = [
        asyncio.create_task(
            client.worker_loop(
                http,
                api.base_url,
                queue,
                ctx.latency_max_jobs,
                20,
                stop,
                on_lease=lambda jid, t: leased.setdefault(jid, t),
            )
        )
        for _ in range(ctx.latency_loops)
    ]
    conn = await connect(dsn)
    try:
        warm = await _wait_parked(http, api, conn, queue, ctx.latency_loops)

        async def enqueue_one(i: int) -> None:
            t = time.perf_counter()
            sent[await client.create_job(http, api.base_url, i, queue)] = t

        meter = CpuMeter(pids, ctx.postmaster)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        posts = []
        for i in range(total):
            delay = t0 + i * interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            posts.append(asyncio.create_task(enqueue_one(i)))
        enqueue_secs = loop.time() - t0
        await asyncio.gather(*posts)
        await wait_for_count(
            conn, COMPLETED.format(queue=queue), total + warm, 120, interval=0.1, watch=loops
        )
        cpu = meter.percent()
        db_p = await conn.fetchval(DB_LATENCY, queue)
    finally:
        await conn.close()
        await client.stop_loops(loops, stop, grace=0.5)  # loops parked in a 20 s long-poll are cancelled
    lat = [1000 * (leased[j] - sent[j]) for j in sent]
    if len(lat) != total:
        raise RuntimeError(f"{len(lat)} of {total} jobs were seen leased")
    out = {f"{prefix}client_p{q}_ms": percentile(lat, q) for q in (50, 95, 99)}
    out.update({f"{prefix}db_p{q}_ms": 1000 * v for q, v in zip((50, 95, 99), db_p, strict=True)})
    out[f"{prefix}enqueue_rate"] = (total - 1) / enqueue_secs if enqueue_secs > 0 else float("nan")
    if not prefix:
        out.update(cpu_values("", cpu))
    return out


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with ctx.database("w2") as dsn:
        procs = ctx.api_side(dsn)
        api = procs[0]
        async with servers(*procs), client.session() as http:
            out.update(await probe_commits(dsn))
            for prefix, queue, interval, full, quick in _phases(ctx):
                out.update(
                    await _phase(
                        ctx,
                        api,
                        [p.pid for p in procs],
                        http,
                        dsn,
                        prefix,
                        queue,
                        interval,
                        ctx.n(full, quick),
                    )
                )
    return out


SCENARIO = Scenario("W2", "Enqueue-to-lease latency, remote workers parked in long-poll", figures, run)
