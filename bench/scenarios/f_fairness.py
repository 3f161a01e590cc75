"""F: fair share. Tenant acme enqueues 100,000 jobs on a shared queue, then tenant globex enqueues
one; a remote worker leases one job at a time (and then ten at a time) and the figure is how many
lease calls it takes until globex's job is handed out. Without fair share that job would wait
behind the whole backlog (100,000 calls at max_jobs 1). Also reported: the lease call's latency
with the 100,000-job backlog of one tenant in the queue (the claim's per-tenant probes).

Method: a fresh database, `--mode api` (the two tenants as API keys, the worker token) and
`--mode janitor`.
"""

from __future__ import annotations

import time

import aiohttp

from bench import client
from bench.context import Context, Scenario
from bench.harness import connect, servers
from bench.report import Figure, percentile

# Credentials, so the api runs without --dev (which refuses them); the remote worker leases with
# the harness's token, here the worker token.
KEYS = "--api-keys", "fair-acme:acme,fair-globex:globex", "--worker-token", client.TOKEN
QUEUE = "shared"


def figures(ctx: Context) -> list[Figure]:
    return [
        Figure("calls_until_leased_1", "max_jobs 1: lease calls until the waiting tenant's job", "calls"),
        Figure("calls_until_leased_10", "max_jobs 10: lease calls until the waiting tenant's job", "calls"),
        Figure("lease_p50_ms", "lease (max_jobs 10) with a 100,000-job backlog of one tenant, p50", "ms"),
        Figure("lease_p99_ms", "lease (max_jobs 10) with a 100,000-job backlog of one tenant, p99", "ms"),
    ]


async def _enqueue(http: aiohttp.ClientSession, base: str, key: str, count: int) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    for start in range(0, count, 1000):
        jobs = [
            {"task_name": "t", "payload": {"i": i}, "config": {"queue": QUEUE}}
            for i in range(start, min(count, start + 1000))
        ]
        async with http.post(f"{base}/api/v1/jobs/batch", json={"jobs": jobs}, headers=headers) as resp:
            if resp.status != 201:
                raise RuntimeError(f"batch -> {resp.status}: {await resp.text()}")


async def _calls_until_globex(
    http: aiohttp.ClientSession, base: str, max_jobs: int, latencies: list[float]
) -> int:
    for call in range(1, 100_001):
        started = time.perf_counter()
        leased = await client.lease(http, base, QUEUE, max_jobs, 0)
        latencies.append(1000 * (time.perf_counter() - started))
        for item in leased:
            await client.complete(http, base, item)
        if any(item["job"]["tenant_id"] == "globex" for item in leased):
            return call
    raise RuntimeError("globex's job was never leased")


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    out: dict[str, float] = {}
    backlog = ctx.n(100_000, 10_000)
    latencies: list[float] = []
    async with (
        ctx.database("fair") as dsn,
        servers(ctx.server(dsn, "api", *KEYS, dev=False), ctx.server(dsn, "janitor")) as (api, _),
        client.session() as http,
    ):
        await _enqueue(http, api.base_url, "fair-acme", backlog)
        # Steady state: autovacuum would analyze a table that grew by 100,000 rows within a
        # minute; without fresh statistics the first claims are planned for an empty table.
        conn = await connect(dsn)
        try:
            await conn.execute("ANALYZE queueflow.jobs")
        finally:
            await conn.close()
        for max_jobs in (1, 10):
            await _enqueue(http, api.base_url, "fair-globex", 1)
            out[f"calls_until_leased_{max_jobs}"] = await _calls_until_globex(
                http, api.base_url, max_jobs, []
            )
        for _ in range(200):  # the claim's cost with the backlog in place (the janitor's not involved)
            started = time.perf_counter()
            await client.lease(http, api.base_url, QUEUE, 10, 0)
            latencies.append(1000 * (time.perf_counter() - started))
    out["lease_p50_ms"] = percentile(latencies, 50)
    out["lease_p99_ms"] = percentile(latencies, 99)
    return out


SCENARIO = Scenario("F", "Fair share: a tenant's single job behind another tenant's 100,000", figures, run)
