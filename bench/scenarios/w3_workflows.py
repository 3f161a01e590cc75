"""W3: workflows. 1,000 four-step diamonds (a; b and c after a; d after b and c) of `echo` steps.

Method: a fresh database and the split topology as separate processes: `--mode api`, `--mode
workflow` (the advancer), `--mode worker --workers 16` (in-process echo) and `--mode janitor`.

- Throughput: 1,000 workflows created by 16 concurrent clients; workflows/s from the first create
  to the last workflow completed (database count, polled). Creating them all at once builds a
  backlog on the default queue, so step-to-step latency in this phase includes queueing behind
  other workflows' steps; it is reported as such.
- Latency: 200 more workflows created one every 50 ms (well below capacity). Step-to-step latency
  is, per edge, the dependent job's started_at (its lease) minus the completed_at of the last of
  its dependencies to finish (database clock): a -> b, a -> c, and max(b, c) -> d.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from bench import client
from bench.context import PROBE_FIGURES, Context, Scenario, probe_commits
from bench.harness import connect, servers, wait_for_count
from bench.report import Figure, percentile

DIAMOND = {
    "name": "diamond",
    "steps": [
        {"name": "a", "task_name": "echo"},
        {"name": "b", "task_name": "echo", "depends_on": ["a"]},
        {"name": "c", "task_name": "echo", "depends_on": ["a"]},
        {"name": "d", "task_name": "echo", "depends_on": ["b", "c"]},
    ],
}
EDGES = """
SELECT EXTRACT(EPOCH FROM dep.started_at - (
           SELECT max(up.completed_at) FROM queueflow.jobs up
           WHERE up.workflow_id = dep.workflow_id
             AND up.workflow_step_id = ANY(CASE dep.workflow_step_id WHEN 'd' THEN ARRAY['b', 'c']
                                                                     ELSE ARRAY['a'] END))) AS secs
FROM queueflow.jobs dep
WHERE dep.workflow_id = ANY($1::text[]) AND dep.workflow_step_id IN ('b', 'c', 'd')"""
COMPLETED = "SELECT count(*) FROM queueflow.workflows WHERE status = 'completed'"


def figures(ctx: Context) -> list[Figure]:
    return [
        Figure("workflows_per_s", "1,000 diamonds created at once: workflows/s to completion", "workflows/s"),
        Figure("burst_step_p50_ms", "burst: step completion -> dependent's lease p50 (incl. queueing)", "ms"),
        Figure("burst_step_p99_ms", "burst: step completion -> dependent's lease p99 (incl. queueing)", "ms"),
        Figure("step_p50_ms", "1 workflow / 50 ms: step completion -> dependent's lease p50", "ms"),
        Figure("step_p99_ms", "1 workflow / 50 ms: step completion -> dependent's lease p99", "ms"),
        *PROBE_FIGURES,
    ]


async def _create(http: aiohttp.ClientSession, base: str) -> str:
    async with http.post(f"{base}/api/v1/workflows", json=DIAMOND) as resp:
        body = await resp.json()
        if resp.status != 201:
            raise RuntimeError(f"create workflow -> {resp.status}: {body}")
        return str(body["workflow_id"])


async def _edges_ms(conn, ids: list[str]) -> list[float]:
    return [1000 * float(r["secs"]) for r in await conn.fetch(EDGES, ids)]


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    out: dict[str, float] = {}
    total = ctx.n(1000, 100)
    paced = ctx.n(200, 40)
    async with ctx.database("w3") as dsn:
        procs = (
            ctx.server(dsn, "api"),
            ctx.server(dsn, "workflow"),
            ctx.server(dsn, "worker", "--workers", "16"),
            ctx.server(dsn, "janitor"),
        )
        async with servers(*procs) as (api, *_), client.session() as http:
            out.update(await probe_commits(dsn))
            conn = await connect(dsn)
            try:
                gate = asyncio.Semaphore(16)

                async def create_one() -> str:
                    async with gate:
                        return await _create(http, api.base_url)

                started = time.perf_counter()
                burst = await asyncio.gather(*(create_one() for _ in range(total)))
                await wait_for_count(conn, COMPLETED, total, 600, interval=0.05)
                out["workflows_per_s"] = total / (time.perf_counter() - started)
                lat = await _edges_ms(conn, burst)
                out["burst_step_p50_ms"], out["burst_step_p99_ms"] = percentile(lat, 50), percentile(lat, 99)

                loop = asyncio.get_running_loop()
                t0 = loop.time()
                creates = []
                for i in range(paced):
                    delay = t0 + i * 0.05 - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    creates.append(asyncio.create_task(_create(http, api.base_url)))
                steady = await asyncio.gather(*creates)
                await wait_for_count(conn, COMPLETED, total + paced, 300, interval=0.05)
                lat = await _edges_ms(conn, steady)
                out["step_p50_ms"], out["step_p99_ms"] = percentile(lat, 50), percentile(lat, 99)
            finally:
                await conn.close()
    return out


SCENARIO = Scenario("W3", "Workflows: 1,000 four-step echo diamonds, split topology", figures, run)
