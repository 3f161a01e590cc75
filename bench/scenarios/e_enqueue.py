"""E: enqueue throughput, single POST /api/v1/jobs and 1,000-job POST /api/v1/jobs/batch.

Method: a fresh database and one `--mode api` process; no worker drains the queue.
- single: 16 concurrent client loops on one keep-alive session post one job each until 5,000
  jobs (1,000 with --quick) are created; jobs/s = N / wall time; per-request latency p50/p99.
- batch: 20 sequential batches of 1,000 jobs (5 with --quick), one request in flight at a time,
  as the upstream harness does; jobs/s = jobs / wall time.
"""

from __future__ import annotations

import asyncio
import time

from bench import client
from bench.context import PROBE_FIGURES, Context, Scenario, cpu_figures, cpu_values, probe_commits
from bench.harness import servers
from bench.probes import CpuMeter
from bench.report import Figure, percentile

QUEUE = "bench-e"
CONCURRENCY = 16


def figures(ctx: Context) -> list[Figure]:
    return [
        Figure(
            "single_jobs_per_s",
            f"single POST /jobs, {CONCURRENCY} concurrent clients",
            "jobs/s",
            "L.insert1_rows_per_s",
        ),
        Figure("single_p50_ms", "single POST /jobs latency p50", "ms", "L.insert1_latency_ms"),
        Figure("single_p99_ms", "single POST /jobs latency p99", "ms", "L.insert1_latency_ms"),
        *cpu_figures("", "during single", "api"),
        Figure(
            "batch_jobs_per_s",
            "batch POST /jobs/batch (1000/request, sequential)",
            "jobs/s",
            "L.insert1000_rows_per_s",
        ),
        Figure("batch_ms", "batch POST /jobs/batch, time per 1000-job request", "ms"),
        *cpu_figures("batch_", "during batch", "api"),
        *PROBE_FIGURES,
    ]


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    total = ctx.n(5_000, 1_000)
    batches = ctx.n(20, 5)
    latencies: list[float] = []
    async with ctx.database("e") as dsn:
        api = ctx.server(dsn, "api")
        async with servers(api), client.session() as http:
            probe = await probe_commits(dsn)
            next_i = 0

            async def poster() -> None:
                nonlocal next_i
                while next_i < total:
                    i, next_i = next_i, next_i + 1
                    t = time.perf_counter()
                    await client.create_job(http, api.base_url, i, QUEUE)
                    latencies.append(1000 * (time.perf_counter() - t))

            meter = CpuMeter([api.pid], ctx.postmaster)
            started = time.perf_counter()
            await asyncio.gather(*(poster() for _ in range(CONCURRENCY)))
            single_secs = time.perf_counter() - started
            cpu = meter.percent()

            meter = CpuMeter([api.pid], ctx.postmaster)
            started = time.perf_counter()
            for b in range(batches):
                await client.create_batch(http, api.base_url, total + b * 1000, 1000, QUEUE)
            batch_secs = time.perf_counter() - started
            batch_cpu = meter.percent()
    return {
        "single_jobs_per_s": total / single_secs,
        "single_p50_ms": percentile(latencies, 50),
        "single_p99_ms": percentile(latencies, 99),
        **cpu_values("", cpu),
        **cpu_values("batch_", batch_cpu),
        **probe,
        "batch_jobs_per_s": batches * 1000 / batch_secs,
        "batch_ms": 1000 * batch_secs / batches,
    }


SCENARIO = Scenario("E", "Enqueue throughput: single POST (16 clients) and 1000-job batches", figures, run)
