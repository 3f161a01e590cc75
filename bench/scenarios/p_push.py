"""P: drain a backlog of no-op jobs by push delivery to a local HTTP receiver (issue 39, "Speed").

Method, for each endpoint concurrency of `push_concurrency` (default 300, then the API's default
10): a fresh database; the receiver (`bench.push_receiver`: aiohttp on 127.0.0.1 in a process of
its own, answering every POST 200 `{}` on keep-alive connections) is started; a `--mode api`
process creates a push endpoint bound to the queue `pushed` with that concurrency and the
receiver's URL, and 20,000 `echo` jobs (2,000 with --quick) are enqueued on that queue in batches
of 1,000; the api is stopped. Then `serve --mode all` starts (as W1b's servers run), its pusher
drains the backlog, each job completed with the receiver's `{}`. Both servers get
`--push-allow-cidrs 127.0.0.0/8`, without which a loopback endpoint is refused.

The rate is on the database's clock, as W1's: N / (max(completed_at) - min(started_at)), from the
first claim of the backlog to the last completion. The claims and the completion statements are
counted from the rows: the jobs of one claim share its transaction's now() as started_at, and the
completions of one statement (a group commit) share its now() as completed_at, so the distinct
values of each are the statements that claimed and completed. The receiver's own count of
requests says how many deliveries it took (more than N would be redeliveries). CPU is % of one
core over the drain: the `--mode all` server, the receiver (not counted as the server's),
PostgreSQL, and everything else.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from bench import client, harness
from bench.context import (
    PROBE_FIGURES,
    Context,
    Scenario,
    Unsupported,
    cpu_figures,
    cpu_values,
    probe_commits,
)
from bench.harness import connect, servers, wait_for_count
from bench.probes import CpuMeter, cpu_seconds
from bench.report import Figure
from devkit.procs import ChildProcess

QUEUE = "pushed"
ALLOW = ("--push-allow-cidrs", "127.0.0.0/8")
ENDPOINTS = "/api/v1/push-endpoints"
COMPLETED = f"SELECT count(*) FROM queueflow.jobs WHERE status = 'completed' AND queue_name = '{QUEUE}'"
WINDOW = f"""SELECT count(*) AS n, EXTRACT(EPOCH FROM max(completed_at) - min(started_at))::float8 AS secs,
    count(DISTINCT started_at) AS claims, count(DISTINCT completed_at) AS completions
FROM queueflow.jobs WHERE status = 'completed' AND queue_name = '{QUEUE}'"""
TIMEOUT_SECS = 600.0


def _prefix(concurrency: int) -> str:
    return f"c{concurrency}_"


def figures(ctx: Context) -> list[Figure]:
    figs = []
    for c in ctx.push_concurrency:
        p, label = _prefix(c), f"concurrency {c}"
        figs += [
            Figure(
                f"{p}jobs_per_s",
                f"drain by push to a local receiver, endpoint {label}, DB clock",
                "jobs/s",
                "L.cycle10_rows_per_s",
            ),
            Figure(f"{p}claims_per_1k", f"claim statements per 1,000 jobs ({label})", "claims"),
            Figure(f"{p}completions_per_1k", f"completion statements per 1,000 jobs ({label})", "stmts"),
            Figure(
                f"{p}deliveries_per_1k", f"requests the receiver answered per 1,000 jobs ({label})", "reqs"
            ),
            *cpu_figures(p, f"during drain ({label})", "server (--mode all)", client=False),
            Figure(
                f"{p}cpu_receiver", f"CPU during drain ({label}): the receiver (not the server's)", "% core"
            ),
            *(Figure(f"{p}{f.key}", f"{f.label} ({label})", f.unit) for f in PROBE_FIGURES),
        ]
    return figs


@dataclass
class Receiver:
    proc: ChildProcess
    url: str
    requests: int | None = None  # its count of requests answered, once it has stopped


@contextlib.asynccontextmanager
async def receiver(ctx: Context) -> AsyncIterator[Receiver]:
    """The receiver process, ready; stopped on the way out, its request count then read."""
    argv = [sys.executable, "-m", "bench.push_receiver"]
    proc = harness.client(argv, ctx.log_dir / "push-receiver.log", "bench.push_receiver", pipes=True)
    got: Receiver | None = None
    try:
        said = await proc.read_line(30)
        if not said.startswith("ready "):
            raise RuntimeError(f"the push receiver said {said!r} instead of 'ready <port>'")
        got = Receiver(proc, f"http://127.0.0.1:{said.split()[1]}/hook")
        yield got
    finally:
        proc.send_line("stop")
        with contextlib.suppress(Exception):
            summary = json.loads(await proc.read_line(10) or "{}")
            if got is not None:
                got.requests = summary.get("requests")
        await harness.stop(proc, grace=10)


async def _endpoint(http: aiohttp.ClientSession, base: str, url: str, concurrency: int) -> None:
    body = {"name": "bench", "url": url, "queues": [QUEUE], "concurrency": concurrency}
    async with http.post(f"{base}{ENDPOINTS}", json=body) as resp:
        if resp.status == 404:
            raise Unsupported(f"no push delivery: the server answers 404 to POST {ENDPOINTS}")
        if resp.status != 201:
            raise RuntimeError(f"POST {ENDPOINTS} -> {resp.status}: {(await resp.read())[:300]!r}")


async def _drain(ctx: Context, concurrency: int, total: int) -> dict[str, float]:
    p = _prefix(concurrency)
    async with ctx.database(f"p_c{concurrency}") as dsn, receiver(ctx) as hook:
        api = ctx.server(dsn, "api", *ALLOW)
        async with servers(api), client.session() as http:
            await _endpoint(http, api.base_url, hook.url, concurrency)
            await client.enqueue_backlog(http, api.base_url, total, QUEUE)
        probe = await probe_commits(dsn, p)
        conn = await connect(dsn)
        try:
            server = ctx.server(dsn, "all", *ALLOW)
            async with servers(server):
                # The pusher claims during start-up, before /ready: the meters miss that fraction
                # of a second; the DB-clock rate does not.
                meter = CpuMeter([server.pid], ctx.postmaster)
                started, receiver_cpu = time.monotonic(), cpu_seconds(hook.proc.pid)
                await wait_for_count(conn, COMPLETED, total, TIMEOUT_SECS)
                receiver_cpu = cpu_seconds(hook.proc.pid) - receiver_cpu
                cpu = meter.percent()
                wall = time.monotonic() - started
            row = await conn.fetchrow(WINDOW)
        finally:
            await conn.close()
    if row["n"] != total:
        raise RuntimeError(f"expected {total} completed jobs, found {row['n']}")
    cpu.pop("client")  # only the completion poll runs in the harness here
    # The receiver is "other" to the machine meter: take it out of that and report it alone.
    receiver_pct = 100.0 * receiver_cpu / wall
    cpu["other"] = max(0.0, cpu["other"] - receiver_pct)
    requests = hook.requests
    out = {
        f"{p}jobs_per_s": total / row["secs"],
        f"{p}claims_per_1k": 1000 * row["claims"] / total,
        f"{p}completions_per_1k": 1000 * row["completions"] / total,
        **cpu_values(p, cpu),
        f"{p}cpu_receiver": receiver_pct,
        **probe,
    }
    if requests is not None:
        out[f"{p}deliveries_per_1k"] = 1000 * requests / total
    return out


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    if ctx.upstream is not None:
        raise Unsupported("upstream's Rust server has no push delivery")
    total = ctx.n(20_000, 2_000)
    out: dict[str, float] = {}
    for concurrency in ctx.push_concurrency:
        out.update(await _drain(ctx, concurrency, total))
    return out


SCENARIO = Scenario(
    "P", "Drain 20k no-op jobs by push delivery to a local receiver (--mode all)", figures, run
)
