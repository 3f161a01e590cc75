"""M: 2,000 idle long-poll clients on one `--mode api` process: database connections and memory.

Method: a fresh database and one `--mode api --min-db-connections 2` process (max 50, the
default). The harness (RLIMIT_NOFILE raised, one aiohttp session with an unlimited connector) opens
2,000 lease loops (200 with --quick) on an empty queue with wait_secs 30. Once the server's
`queueflow_long_poll_waiters` gauge shows them all parked, it samples for 12 s (6 s with --quick),
every 0.2 s: pg_stat_activity of the run's database grouped by application_name (the pool is
`queueflow`, the LISTEN connection `queueflow-listener`; the harness's own `queueflow-bench`
connection is excluded), and the gauge. The window spans at least two 5 s safety polls, so the
connections those polls need are seen. Then: established sockets on the API port (server side),
the api process's VmHWM (peak RSS) and its CPU while "idle".

Targets: pool connections <= the floor (2) + the listener (1), none per waiter; peak RSS <= 200 MB.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict

import aiohttp

from bench import client
from bench.context import Context, Scenario, cpu_figures, cpu_values
from bench.harness import BENCH_APP, connect, servers
from bench.probes import CpuMeter, established_sockets, prometheus_value, vm_kib
from bench.report import Figure

QUEUE = "m-idle"
POOL_FLOOR = 2
QUIET_SECS = 6.0
ACTIVITY = """SELECT COALESCE(application_name, '') AS app, state, count(*) AS n FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND application_name <> $1
GROUP BY 1, 2"""
XACTS = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"


def figures(ctx: Context) -> list[Figure]:
    n = ctx.n(2_000, 200)
    return [
        Figure("clients", "idle long-poll clients opened", "clients"),
        Figure("parked_min", f"parked per server gauge (min over window; want {n})", "waiters"),
        Figure("sockets", "established sockets on the API port", "sockets"),
        Figure("park_secs", "time until all were parked", "s"),
        Figure("pool_peak", f"DB connections 'queueflow' open, peak (target <= {POOL_FLOOR})", "conns"),
        Figure(
            "pool_active_peak", "DB connections 'queueflow' active at once, peak (0.2 s samples)", "conns"
        ),
        Figure("idle_xact_rate", "DB transactions/s while every client idles (safety polls)", "xact/s"),
        Figure("listener_peak", "DB connections 'queueflow-listener' (target 1)", "conns"),
        Figure("other_peak", "other DB connections to the run's database, peak", "conns"),
        Figure("rss_base_mb", "api RSS before the clients (VmRSS)", "MB"),
        Figure("rss_peak_mb", "api peak RSS (VmHWM; target <= 200)", "MB"),
        *cpu_figures("", "while the clients idle", "api"),
    ]


async def _gauge(http: aiohttp.ClientSession, url: str) -> float:
    return await prometheus_value(http, f"{url}/metrics", "queueflow_long_poll_waiters") or 0.0


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    n = ctx.n(2_000, 200)
    window = ctx.n(12, 6)
    async with ctx.database("m") as dsn:
        api = ctx.server(dsn, "api", "--min-db-connections", str(POOL_FLOOR))
        async with servers(api), client.session() as http, aiohttp.ClientSession() as probe:
            rss_base = vm_kib(api.pid, "VmRSS") / 1024
            stop = asyncio.Event()
            started = time.monotonic()
            loops = [
                asyncio.create_task(client.worker_loop(http, api.base_url, QUEUE, 1, 30, stop))
                for _ in range(n)
            ]
            conn = await connect(dsn)
            try:
                while await _gauge(probe, api.metrics_url) < n:
                    for t in loops:
                        if t.done() and t.exception() is not None:
                            raise t.exception()  # type: ignore[misc]
                    if time.monotonic() - started > 60:
                        raise TimeoutError(f"not all {n} clients parked within 60 s")
                    await asyncio.sleep(0.2)
                park_secs = time.monotonic() - started
                meter = CpuMeter([api.pid], ctx.postmaster)
                peaks: dict[str, int] = defaultdict(int)
                parked_min = float(n)
                end = time.monotonic() + window
                while time.monotonic() < end:
                    rows = await conn.fetch(ACTIVITY, BENCH_APP)
                    by_app: dict[str, int] = defaultdict(int)
                    for r in rows:
                        by_app[r["app"]] += r["n"]
                        if r["app"] == "queueflow" and r["state"] == "active":
                            peaks["pool_active"] = max(peaks["pool_active"], r["n"])
                    other = sum(c for a, c in by_app.items() if a not in ("queueflow", "queueflow-listener"))
                    for key, count in (
                        ("queueflow", by_app["queueflow"]),
                        ("queueflow-listener", by_app["queueflow-listener"]),
                        ("other", other),
                    ):
                        peaks[key] = max(peaks[key], count)
                    parked_min = min(parked_min, await _gauge(probe, api.metrics_url))
                    await asyncio.sleep(0.2)
                cpu = meter.percent()
                # A quiet window (no sampling, no scrapes) longer than one 5 s safety poll: the
                # transactions the server runs on its own for idle waiters. Backends report their
                # counters at most once a second, hence the settling sleeps.
                await asyncio.sleep(1.1)
                xacts, quiet_start = await conn.fetchval(XACTS), time.monotonic()
                await asyncio.sleep(QUIET_SECS)
                idle_xact_rate = (await conn.fetchval(XACTS) - xacts - 1) / (time.monotonic() - quiet_start)
                sockets = established_sockets(api.api_port)
                rss_peak = vm_kib(api.pid, "VmHWM") / 1024
            finally:
                await conn.close()
                with contextlib.suppress(Exception):
                    await client.stop_loops(loops, stop, grace=0)
    return {
        "clients": n,
        "parked_min": parked_min,
        "sockets": sockets,
        "park_secs": park_secs,
        "pool_peak": peaks["queueflow"],
        "pool_active_peak": peaks["pool_active"],
        "idle_xact_rate": idle_xact_rate,
        "listener_peak": peaks["queueflow-listener"],
        "other_peak": peaks["other"],
        "rss_base_mb": rss_base,
        "rss_peak_mb": rss_peak,
        **cpu_values("", cpu),
    }


SCENARIO = Scenario(
    "M", "2,000 idle long-poll clients on one api process: DB connections, memory", figures, run
)
