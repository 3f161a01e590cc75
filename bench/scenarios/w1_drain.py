"""W1: drain a backlog of no-op jobs, (a) through remote HTTP workers, (b) through in-process workers.

Method (both): a fresh database; 20,000 `echo` jobs (2,000 with --quick) are enqueued in
batches of 1,000 *before* any worker runs, so the measurement is a pure drain of a backlog.

- W1a: `--mode api` plus a `--mode janitor` process. The harness runs `remote_loops` worker loops
  (default 8) in one aiohttp session; each leases `remote_batch` jobs (default 50, wait_secs 1),
  then sends one complete call per job, concurrently, as a real worker with a batch would. With
  `remote_processes` N > 0 the loops run instead in N client processes (`bench.remote_worker`),
  `remote_loops` in each, started and ready before the timer starts. `remote_ack` "batch" makes
  the loops acknowledge a whole lease with one `POST /api/v1/jobs/complete`; `remote_client` "sdk"
  runs the Python SDK's worker loop in those processes instead (concurrency and batch size
  `remote_batch`), which acknowledges the way the SDK does; "go-sdk" runs the Go SDK's worker loop
  instead (`bench/gosdk`, built with the machine's Go toolchain), and "rust-sdk" the Rust SDK's
  (its `bench_worker` example, built with cargo, on tokio's multi-threaded runtime), and "ts-sdk"
  the TypeScript SDK's (`bench/tssdk/main.mjs` under Node, the SDK's dist/ built first).
- W1b: the backlog is enqueued through a separate `--mode api` process, which is then stopped;
  then `--mode all --workers N` starts and drains the default queue with the built-in `echo`.
- W1c: W1b on a queue that removes completed jobs (`PATCH /api/v1/queues/default` with
  `{"retention": "remove_completed"}` before the backlog goes in; docs/operations.md,
  "Retention"), graphile-worker's semantics. Its jobs leave no row to count, so a statement trigger
  the harness adds to the bench database (not the schema's: `bench_removed`, one row per deleting
  statement, from the deleted rows it is given anyway) records each statement's count, its now()
  and the earliest started_at among its rows; the rate is the same DB-clock figure as W1b's.

Completion is counted from the database (status = 'completed', polled every 0.2 s). The headline
rate uses the database's own clock: N / (max(completed_at) - min(started_at)), i.e. from the first
claim to the last completion, so neither server start-up nor the polling interval is in it. The
client-observed rate (W1a: from starting the loops until the poll saw N) is reported beside it.
CPU figures are % of one core (the machine has two) over the drain window.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg

from bench import client, harness
from bench.context import PROBE_FIGURES, Context, Scenario, cpu_figures, cpu_values, probe_commits
from bench.harness import connect, servers, stop, wait_for_count
from bench.probes import CpuMeter, prometheus_samples
from bench.report import Figure
from devkit.procs import ChildProcess

QUEUE = "default"  # the in-process workers' queue; the remote loops use it too
COMPLETED = "SELECT count(*) FROM queueflow.jobs WHERE status = 'completed'"
DRAIN_WINDOW = """SELECT count(*) AS n, EXTRACT(EPOCH FROM max(completed_at) - min(started_at))::float8 AS secs
FROM queueflow.jobs WHERE status = 'completed'"""
TIMEOUT_SECS = 600.0


async def _db_rate(conn, total: int) -> float:
    row = await conn.fetchrow(DRAIN_WINDOW)
    if row["n"] != total:
        raise RuntimeError(f"expected {total} completed jobs, found {row['n']}")
    return total / row["secs"]


# --- W1a: remote HTTP workers ------------------------------------------------------------------------

SDK_NAMES = {"sdk": "Python", "go-sdk": "Go", "rust-sdk": "Rust", "ts-sdk": "TypeScript"}


def remote_figures(ctx: Context) -> list[Figure]:
    shape = f"{ctx.remote_loops} loops x max_jobs {ctx.remote_batch}"
    if ctx.remote_client in SDK_NAMES:
        shape = f"{SDK_NAMES[ctx.remote_client]} SDK worker loops: {shape}"
    elif ctx.remote_ack == "batch":
        shape = f"{shape}, batch acknowledgement"
    if ctx.remote_processes:
        shape = f"{ctx.remote_processes} processes x {shape}"
    return [
        Figure(
            "jobs_per_s", f"drain, remote HTTP workers ({shape}), DB clock", "jobs/s", "L.cycle10_rows_per_s"
        ),
        Figure("client_jobs_per_s", "drain, remote HTTP workers, client clock", "jobs/s"),
        Figure("lease_calls_per_1k", "lease calls per 1,000 jobs (the api's request counts)", "calls"),
        Figure("ack_calls_per_1k", "complete calls per 1,000 jobs, per-job and batch alike", "calls"),
        *cpu_figures("", "during drain", "api + janitor"),
        *PROBE_FIGURES,
    ]


async def _exited(proc: ChildProcess) -> None:
    """Ends (with an error) only if the process exits: a watch task for wait_for_count."""
    code = await proc.wait(within=None)
    raise RuntimeError(f"remote worker process {proc.pid} exited with {code} during the drain")


@contextlib.asynccontextmanager
async def remote_processes(ctx: Context, base_url: str) -> AsyncIterator[list[ChildProcess]]:
    """`ctx.remote_processes` bench.remote_worker processes, each with `ctx.remote_loops` loops, all
    ready (session open) but idle; the caller tells them `go`. Stopped and reaped on the way out."""
    program = [sys.executable, "-m", "bench.remote_worker"]
    if ctx.remote_client == "go-sdk":
        program = [str(go_sdk_worker(ctx.out_dir))]
    elif ctx.remote_client == "rust-sdk":
        program = [str(rust_sdk_worker())]
    elif ctx.remote_client == "ts-sdk":
        program = ts_sdk_worker()
    argv = [
        *program,
        "--base-url",
        base_url,
        "--queue",
        QUEUE,
        "--loops",
        str(ctx.remote_loops),
        "--max-jobs",
        str(ctx.remote_batch),
        "--wait-secs",
        "1",
    ]
    if ctx.remote_client not in ("go-sdk", "rust-sdk", "ts-sdk"):
        argv += ["--client", ctx.remote_client, "--ack", ctx.remote_ack]
    procs: list[ChildProcess] = []
    try:
        # extend() keeps the ones already started if a later launch fails, so the finally reaps them.
        procs.extend(
            harness.client(argv, ctx.log_dir / f"remote-worker-{i}.log", "bench.remote_worker", pipes=True)
            for i in range(ctx.remote_processes)
        )
        for proc in procs:
            if (said := await proc.read_line(60)) != "ready":
                raise RuntimeError(f"remote worker {proc.pid} said {said!r} instead of 'ready'")
        yield procs
    finally:
        for proc in procs:
            proc.send_line("stop")
        for proc in procs:
            with contextlib.suppress(Exception):
                summary = json.loads(await proc.read_line(10) or "{}")
                print(f"[bench] remote worker {proc.pid}: {summary}", file=sys.stderr, flush=True)
            await stop(proc, grace=10)


def go_sdk_worker(out_dir: Path) -> Path:
    """bench/gosdk (the Go SDK's worker loop behind remote_worker's line protocol), built with the
    machine's Go toolchain into the output folder; rebuilt on every call, which takes a second."""
    binary = out_dir.resolve() / "gosdk-bench"
    source = Path(__file__).resolve().parents[1] / "gosdk"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=source, check=True)
    return binary


def rust_sdk_worker() -> Path:
    """The Rust SDK's `bench_worker` example (the same line protocol), built in release mode in the
    SDK's own target directory (one per checkout: two checkouts sharing one once ran the other's
    build); cargo rebuilds only what changed."""
    crate = Path(__file__).resolve().parents[2] / "sdks" / "rust"
    subprocess.run(
        ["cargo", "build", "--quiet", "--release", "--example", "bench_worker"], cwd=crate, check=True
    )
    return crate / "target" / "release" / "examples" / "bench_worker"


def ts_sdk_worker() -> list[str]:
    """bench/tssdk/main.mjs (the TypeScript SDK's worker loop, same line protocol) under the
    machine's Node, after building the SDK's dist/ (tsc; a few seconds)."""
    root = Path(__file__).resolve().parents[2]
    sdk = root / "sdks" / "typescript"
    if not (sdk / "node_modules").is_dir():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=sdk, check=True)
    subprocess.run(["npm", "run", "--silent", "build"], cwd=sdk, check=True)
    return ["node", str(root / "bench" / "tssdk" / "main.mjs")]


async def _drain_in_processes(
    ctx: Context, api_url: str, conn: asyncpg.Connection, pids: list[int], total: int
) -> tuple[float, float, dict[str, float]]:
    """The measured window with the loops in client processes: (seen, started, cpu)."""
    async with remote_processes(ctx, api_url) as procs:
        meter = CpuMeter(pids, ctx.postmaster, client_pids=[p.pid for p in procs])
        watch = [asyncio.create_task(_exited(p)) for p in procs]
        started = time.monotonic()
        for proc in procs:
            proc.send_line("go")
        try:
            seen = await wait_for_count(conn, COMPLETED, total, TIMEOUT_SECS, watch=watch)
            cpu = meter.percent()
        finally:
            for task in watch:
                task.cancel()
    return seen, started, cpu


async def _drain_in_harness(
    ctx: Context,
    http: aiohttp.ClientSession,
    api_url: str,
    conn: asyncpg.Connection,
    pids: list[int],
    total: int,
) -> tuple[float, float, dict[str, float]]:
    """The measured window with the loops in the harness's own event loop: (seen, started, cpu)."""
    stop = asyncio.Event()
    meter = CpuMeter(pids, ctx.postmaster)
    started = time.monotonic()
    loops = [
        asyncio.create_task(
            client.worker_loop(http, api_url, QUEUE, ctx.remote_batch, 1, stop, ack=ctx.remote_ack)
        )
        for _ in range(ctx.remote_loops)
    ]
    try:
        seen = await wait_for_count(conn, COMPLETED, total, TIMEOUT_SECS, watch=loops)
        cpu = meter.percent()
    finally:
        await client.stop_loops(loops, stop)
    return seen, started, cpu


async def run_remote(ctx: Context, run_no: int) -> dict[str, float]:
    if ctx.remote_client != "raw" and not ctx.remote_processes:
        raise ValueError("W1a: the SDK's worker loops run in client processes (--remote-processes N)")
    total = ctx.n(20_000, 2_000)
    async with ctx.database("w1a") as dsn:
        api, janitor = ctx.server(dsn, "api"), ctx.server(dsn, "janitor")
        async with servers(api, janitor), client.session() as http:
            conn = await connect(dsn)
            try:
                await client.enqueue_backlog(http, api.base_url, total, QUEUE)
                probe = await probe_commits(dsn)
                pids = [api.pid, janitor.pid]
                if ctx.remote_processes:
                    seen, started, cpu = await _drain_in_processes(ctx, api.base_url, conn, pids, total)
                else:
                    seen, started, cpu = await _drain_in_harness(ctx, http, api.base_url, conn, pids, total)
                rate = await _db_rate(conn, total)
                calls = await _calls_per_1k(http, api.metrics_url, total)
            finally:
                await conn.close()
    return {
        "jobs_per_s": rate,
        "client_jobs_per_s": total / (seen - started),
        **calls,
        **cpu_values("", cpu),
        **probe,
    }


async def _calls_per_1k(http: aiohttp.ClientSession, metrics_url: str, total: int) -> dict[str, float]:
    """Lease and complete calls the api answered per 1,000 jobs: how well a worker loop batches
    (each call costs the server about as much as another)."""
    samples = await prometheus_samples(http, f"{metrics_url}/metrics", "queueflow_http_requests_total")

    def count(*routes: str) -> float:
        return sum(v for labels, v in samples if any(f'route="{r}"' in labels for r in routes))

    leases = count("/api/v1/queues/{queue}/lease")
    acks = count("/api/v1/jobs/complete", "/api/v1/jobs/{id}/complete")
    return {"lease_calls_per_1k": 1000 * leases / total, "ack_calls_per_1k": 1000 * acks / total}


REMOTE = Scenario(
    "W1a", "Drain 20k no-op jobs: remote HTTP workers (api + janitor processes)", remote_figures, run_remote
)


# --- W1b: in-process echo workers --------------------------------------------------------------------


def inprocess_figures(ctx: Context) -> list[Figure]:
    figs = []
    for n in ctx.drain_workers:
        figs += [
            Figure(
                f"w{n}_jobs_per_s",
                f"drain, in-process echo, --workers {n}, DB clock",
                "jobs/s",
                "L.cycle10_rows_per_s",
            ),
            *cpu_figures(f"w{n}_", f"during drain (--workers {n})", "server", client=False),
            *(Figure(f"w{n}_{f.key}", f"{f.label} (--workers {n})", f.unit) for f in PROBE_FIGURES),
        ]
    return figs


async def run_inprocess(ctx: Context, run_no: int) -> dict[str, float]:
    total = ctx.n(20_000, 2_000)
    out: dict[str, float] = {}
    for n in ctx.drain_workers:
        async with ctx.database(f"w1b_w{n}") as dsn:
            api = ctx.server(dsn, "api")
            async with servers(api), client.session() as http:
                await client.enqueue_backlog(http, api.base_url, total, QUEUE)
            probe = await probe_commits(dsn, f"w{n}_")
            conn = await connect(dsn)
            try:
                worker = ctx.server(dsn, "all", "--workers", str(n))
                async with servers(worker):
                    # Claiming starts during start-up, before /ready: the meter misses that
                    # fraction of a second; the DB-clock rate does not.
                    meter = CpuMeter([worker.pid], ctx.postmaster)
                    await wait_for_count(conn, COMPLETED, total, TIMEOUT_SECS)
                    cpu = meter.percent()
                out[f"w{n}_jobs_per_s"] = await _db_rate(conn, total)
                cpu.pop("client")  # only the completion poll runs in the harness here
                out.update(cpu_values(f"w{n}_", cpu), **probe)
            finally:
                await conn.close()
    return out


IN_PROCESS = Scenario(
    "W1b", "Drain 20k no-op jobs: in-process echo workers (--mode all)", inprocess_figures, run_inprocess
)


# --- W1c: W1b on a queue that removes completed jobs ---------------------------------------------------

REMOVED_MARKS = """
CREATE TABLE public.bench_removed (n bigint NOT NULL, at timestamptz NOT NULL, first_started timestamptz);
CREATE FUNCTION public.bench_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.bench_removed SELECT count(*), now(), min(started_at) FROM gone HAVING count(*) > 0;
    RETURN NULL;
END $$;
CREATE TRIGGER bench_removed AFTER DELETE ON queueflow.jobs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION public.bench_removed();
"""
REMOVED = "SELECT COALESCE(sum(n), 0) FROM public.bench_removed"
REMOVED_WINDOW = """SELECT sum(n) AS n, EXTRACT(EPOCH FROM max(at) - min(first_started))::float8 AS secs
FROM public.bench_removed"""
# What makes a queue remove its completed jobs: the setting bench.compare's removing row uses too.
REMOVE_COMPLETED = {"retention": "remove_completed"}


async def make_removing(http: aiohttp.ClientSession, base: str, queue: str) -> None:
    """The dev tenant's `queue` removes its completed jobs from now on."""
    async with http.patch(f"{base}/api/v1/queues/{queue}", json=REMOVE_COMPLETED) as resp:
        if resp.status != 200:
            raise RuntimeError(f"PATCH /api/v1/queues/{queue}: {resp.status} {await resp.text()}")


def removing_figures(ctx: Context) -> list[Figure]:
    return [
        Figure(
            f.key,
            f.label.replace("in-process echo", "in-process echo, a removing queue"),
            f.unit,
            f.ref,
        )
        for f in inprocess_figures(ctx)
    ]


async def run_removing(ctx: Context, run_no: int) -> dict[str, float]:
    total = ctx.n(20_000, 2_000)
    out: dict[str, float] = {}
    for n in ctx.drain_workers:
        async with ctx.database(f"w1c_w{n}") as dsn:
            api = ctx.server(dsn, "api")
            async with servers(api), client.session() as http:
                await make_removing(http, api.base_url, QUEUE)
                await client.enqueue_backlog(http, api.base_url, total, QUEUE)
            probe = await probe_commits(dsn, f"w{n}_")
            conn = await connect(dsn)
            try:
                await conn.execute(REMOVED_MARKS)
                worker = ctx.server(dsn, "all", "--workers", str(n))
                async with servers(worker):
                    meter = CpuMeter([worker.pid], ctx.postmaster)
                    await wait_for_count(conn, REMOVED, total, TIMEOUT_SECS)
                    cpu = meter.percent()
                row = await conn.fetchrow(REMOVED_WINDOW)
                if row["n"] != total or await conn.fetchval("SELECT count(*) FROM queueflow.jobs"):
                    raise RuntimeError(f"expected {total} jobs removed and none left, removed {row['n']}")
                out[f"w{n}_jobs_per_s"] = total / row["secs"]
                cpu.pop("client")
                out.update(cpu_values(f"w{n}_", cpu), **probe)
            finally:
                await conn.close()
    return out


IN_PROCESS_REMOVING = Scenario(
    "W1c",
    "Drain 20k no-op jobs: in-process echo workers (--mode all), on a queue that removes completed jobs",
    removing_figures,
    run_removing,
)
