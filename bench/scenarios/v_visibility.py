"""V: what visibility costs the claim path (docs/visibility.md, docs/tracing.md), in one run.

Method: a fresh database for each drain; 50,000 `echo` jobs (2,000 with --quick) enqueued before
any worker runs, as in W1 but longer, so that the drain spans several seconds of the log load; the
rate is the database's clock (first claim to last completion).
- logs: 100 jobs of another queue are leased and held by the harness; while the backlog drains,
  the harness posts 10 lines to each of them every second, the 100 jobs spread evenly over the
  second (1,000 lines/s in 100 calls/s, as 100 SDK workers with chatty handlers would). Against the same drain with the 100 jobs held and
  silent. The issue asks that the drain stay within 10% (ratio at least 0.9).
- traces: the same drain with OpenTelemetry export on in every server process
  (OTEL_EXPORTER_OTLP_ENDPOINT pointing at a sink in the harness that answers every export 200),
  against export off. The issue asks only that the cost be reported.
Each is drained in-process (`--mode worker --workers 16`, beside an api process that takes the
log calls and the leases of the held jobs) and through remote HTTP loops (8 x max_jobs 50, batch
acknowledgement; api + janitor); the shapes alternate within a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from bench import client
from bench.context import Context, Scenario
from bench.harness import connect, servers, wait_for_count
from bench.report import Figure

QUEUE = "default"
CHATTY_QUEUE = "chatty"
CHATTY_JOBS = 100
LINES_PER_CALL = 10
TIMEOUT_SECS = 600.0
DONE = "SELECT count(*) FROM queueflow.jobs WHERE status = 'completed' AND queue_name = 'default'"
WINDOW = """SELECT count(*) AS n, EXTRACT(EPOCH FROM max(completed_at) - min(started_at))::float8 AS secs
FROM queueflow.jobs WHERE status = 'completed' AND queue_name = 'default'"""
SHAPES = ("base", "logs", "traces")


def figures(ctx: Context) -> list[Figure]:
    out = []
    for where in ("inproc", "remote"):
        label = (
            "in-process (worker --workers 16)" if where == "inproc" else "remote (8 loops x 50, batch ack)"
        )
        out += [
            Figure(f"{where}_base_jobs_per_s", f"{label}: drain, 100 held jobs silent, DB clock", "jobs/s"),
            Figure(
                f"{where}_logs_jobs_per_s", f"{label}: drain while 1,000 lines/s go to 100 jobs", "jobs/s"
            ),
            Figure(f"{where}_logs_ratio", f"{label}: with the log load / without", "x"),
            Figure(f"{where}_logs_lines_per_s", f"{label}: log lines stored per second meanwhile", "lines/s"),
            Figure(f"{where}_traces_jobs_per_s", f"{label}: drain with OTLP export on", "jobs/s"),
            Figure(f"{where}_traces_ratio", f"{label}: export on / off", "x"),
            Figure(f"{where}_traces_exports", f"{label}: OTLP export requests the sink received", "requests"),
        ]
    return out


class OtlpSink:
    """An OTLP/HTTP receiver that accepts every export (200, an empty ExportTraceServiceResponse)
    and counts them; decoding is left out so that the harness spends nothing on it."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.url = ""

    async def _export(self, request: web.Request) -> web.Response:
        self.bytes += len(await request.read())
        self.requests += 1
        return web.Response(body=b"", content_type="application/x-protobuf")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[OtlpSink]:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._export)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        try:
            yield self
        finally:
            await runner.cleanup()


async def _hold_chatty(http: aiohttp.ClientSession, base: str) -> list[dict[str, Any]]:
    """CHATTY_JOBS jobs of the chatty queue, leased for the whole run."""
    for start in range(0, CHATTY_JOBS, 100):
        await client.create_batch(http, base, start, min(100, CHATTY_JOBS - start), CHATTY_QUEUE)
    held: list[dict[str, Any]] = []
    while len(held) < CHATTY_JOBS:
        held += await client.lease(http, base, CHATTY_QUEUE, min(100, CHATTY_JOBS - len(held)), 1, 3600)
    return held


async def _talk(
    http: aiohttp.ClientSession, base: str, held: list[dict[str, Any]], stop: asyncio.Event
) -> int:
    """LINES_PER_CALL lines to each held job every second, the jobs spread evenly over the second (as
    independent workers would be); returns the lines stored."""

    async def one(k: int, item: dict[str, Any]) -> int:
        stored, n = 0, 0
        url = f"{base}/api/v1/jobs/{item['job']['id']}/logs"
        next_at = time.perf_counter() + k / len(held)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.perf_counter()))
            if stop.is_set():
                return stored
            lines = [
                {"message": f"step {n}.{i}: processed a record of the import", "level": "info"}
                for i in range(LINES_PER_CALL)
            ]
            async with http.post(url, json={"lease_token": item["lease_token"], "lines": lines}) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"logs -> {resp.status}: {await resp.text()}")
                stored += int((await resp.json())["stored"])
            n += 1
            next_at += 1.0

    return sum(await asyncio.gather(*(one(k, item) for k, item in enumerate(held))))


async def _window(dsn: str, total: int) -> float:
    conn = await connect(dsn)
    try:
        await conn.execute("ANALYZE queueflow.jobs")
        row = await conn.fetchrow(WINDOW)
    finally:
        await conn.close()
    if row["n"] != total:
        raise RuntimeError(f"expected {total} completed jobs, found {row['n']}")
    return float(row["secs"])


async def _drain(ctx: Context, where: str, shape: str, sink: OtlpSink) -> dict[str, float]:
    total = ctx.n(50_000, 2_000)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": sink.url} if shape == "traces" else None
    exports_before = sink.requests
    async with ctx.database(f"v_{where}_{shape}") as dsn:
        setup_api = ctx.server(dsn, "api")
        async with servers(setup_api), client.session() as http:
            await client.enqueue_backlog(http, setup_api.base_url, total, QUEUE)
        if where == "inproc":
            # The log calls go to an api process of their own, as remote workers' calls would in a
            # deployment whose in-process workers run apart from its api pods.
            procs = [ctx.server(dsn, "api", env=env), ctx.server(dsn, "worker", "--workers", "16", env=env)]
        else:
            procs = [ctx.server(dsn, "api", env=env), ctx.server(dsn, "janitor", env=env)]
        conn = await connect(dsn)
        stop = asyncio.Event()
        try:
            async with servers(*procs), client.session() as http:
                base = procs[0].base_url
                held = await _hold_chatty(http, base)
                talking = asyncio.create_task(_talk(http, base, held, stop)) if shape == "logs" else None
                loops = []
                if where == "remote":
                    loops = [
                        asyncio.create_task(client.worker_loop(http, base, QUEUE, 50, 1, stop, ack="batch"))
                        for _ in range(8)
                    ]
                started = time.perf_counter()
                try:
                    await wait_for_count(conn, DONE, total, TIMEOUT_SECS, watch=loops)
                finally:
                    elapsed = time.perf_counter() - started
                    await client.stop_loops(loops, stop)
                    lines = await talking if talking is not None else 0
        finally:
            await conn.close()
        secs = await _window(dsn, total)
    out = {f"{where}_{shape}_jobs_per_s": total / secs}
    if shape == "logs":
        out[f"{where}_logs_lines_per_s"] = lines / elapsed
    if shape == "traces":
        out[f"{where}_traces_exports"] = float(sink.requests - exports_before)
    return out


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with OtlpSink().running() as sink:
        for where in ("inproc", "remote"):
            for shape in SHAPES:
                out.update(await _drain(ctx, where, shape, sink))
            for shape in ("logs", "traces"):
                out[f"{where}_{shape}_ratio"] = (
                    out[f"{where}_{shape}_jobs_per_s"] / out[f"{where}_base_jobs_per_s"]
                )
    return out


SCENARIO = Scenario("V", "Visibility: the drain beside a job-log load and with trace export on", figures, run)
