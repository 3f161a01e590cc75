"""PgQueuer's side of `python -m bench.compare`: one workload per run, one JSON line out.

    bench/peers/.venv/bin/python bench/peers/pgqueuer_peer.py --dsn URL --figure drain|enqueue|latency

Runs in its own venv (bench/peers/.venv, from requirements-pgqueuer.txt), so it imports only the
standard library, pgqueuer, asyncpg and uvloop; nothing from QueueFlow.

Configuration: the one PgQueuer's own benchmark uses ("Benchmarks" page of its docs,
https://janbjorge.github.io/pgqueuer/comparisons/benchmarks/, and tools/benchmark.py:
5 dequeue workers with batch size 10 on the asyncpg driver): five PgQueuer instances in this
process, each on its own asyncpg connection (AsyncpgDriver), `run(batch_size=10)`, the entrypoint
without a concurrency limit. Plus what its "Performance Tuning" guide
(https://janbjorge.github.io/pgqueuer/guides/performance-tuning/) asks for: the schema's
default `durable` level (every table logged, as QueueFlow's and the other peers' are), its
recommended autovacuum settings (`pgq autovac`, applied here through Queries.optimize_autovacuum),
a single connection per QueueManager and a pool for producers. Jobs are enqueued with the bulk
form of Queries.enqueue (lists of entrypoints, payloads and priorities).

Clocks: the drain rate uses the database's clock, from PgQueuer's own log table: successful jobs /
(last 'successful' log row - first 'picked' log row), both `created` timestamps. Enqueue and
latency use this process's clock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import math
import platform
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver, AsyncpgPoolDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

ENTRYPOINT = "noop"
WORKERS = 5
BATCH_SIZE = 10
CONFIG = {
    "instances": WORKERS,
    "driver": "AsyncpgDriver (one connection per instance)",
    "batch_size": BATCH_SIZE,
    "durability": "durable",
    "autovac": True,
}
DRAIN_WINDOW = """SELECT count(*) FILTER (WHERE status = 'successful') AS n,
    EXTRACT(EPOCH FROM max(created) FILTER (WHERE status = 'successful')
                     - min(created) FILTER (WHERE status = 'picked'))::float8 AS secs
FROM pgqueuer_log WHERE entrypoint = $1"""


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dsn", required=True)
    p.add_argument("--figure", required=True, choices=("drain", "enqueue", "latency"))
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=1000)
    p.add_argument("--interval-ms", type=float, default=5.0)
    p.add_argument("--timeout-s", type=float, default=600.0)
    return p.parse_args()


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between closest ranks (as bench/report.py)."""
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


async def enqueue_many(queries: Queries, start: int, count: int, payload: bytes | None = None) -> None:
    """One bulk enqueue call of `count` jobs."""
    await queries.enqueue(
        [ENTRYPOINT] * count,
        [payload if payload is not None else str(start + k).encode() for k in range(count)],
        [0] * count,
    )


class Workers:
    """WORKERS PgQueuer instances, each on its own connection, running in the background."""

    def __init__(self, dsn: str, handler: Callable[[Job], Awaitable[None]]) -> None:
        self.dsn = dsn
        self.handler = handler
        self.pgqs: list[PgQueuer] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.conns: list[asyncpg.Connection] = []

    async def start(self) -> None:
        for _ in range(WORKERS):
            conn = await asyncpg.connect(self.dsn)
            self.conns.append(conn)
            pgq = PgQueuer(AsyncpgDriver(conn))
            pgq.entrypoint(ENTRYPOINT)(self.handler)
            self.pgqs.append(pgq)
        self.tasks = [asyncio.create_task(pgq.run(batch_size=BATCH_SIZE)) for pgq in self.pgqs]

    def check(self) -> None:
        for task in self.tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def stop(self) -> None:
        for pgq in self.pgqs:
            pgq.shutdown.set()
        if self.tasks:
            _, pending = await asyncio.wait(self.tasks, timeout=10)
            for task in pending:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
        for conn in self.conns:
            with contextlib.suppress(Exception):
                await conn.close()


async def drain(args: argparse.Namespace, queries: Queries, conn: asyncpg.Connection) -> dict[str, Any]:
    for start in range(0, args.jobs, args.batch_size):
        await enqueue_many(queries, start, min(args.batch_size, args.jobs - start))

    async def noop(job: Job) -> None:
        return None

    workers = Workers(args.dsn, noop)
    await workers.start()
    try:
        deadline = time.monotonic() + args.timeout_s
        while (await conn.fetchrow(DRAIN_WINDOW, ENTRYPOINT))["n"] < args.jobs:
            workers.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {args.jobs} successful jobs after {args.timeout_s:.0f}s")
            await asyncio.sleep(0.05)
    finally:
        await workers.stop()
    row = await conn.fetchrow(DRAIN_WINDOW, ENTRYPOINT)
    if row["n"] != args.jobs:
        raise RuntimeError(f"expected {args.jobs} successful jobs, found {row['n']}")
    return {"jobs": row["n"], "jobs_per_s": row["n"] / row["secs"], "clock": "db"}


async def enqueue(args: argparse.Namespace, queries: Queries) -> dict[str, Any]:
    await enqueue_many(queries, 0, args.batch_size)  # warm-up: prepared statements, plan cache
    started = time.perf_counter()
    for b in range(1, args.batches + 1):
        await enqueue_many(queries, b * args.batch_size, args.batch_size)
    secs = time.perf_counter() - started
    jobs = args.batches * args.batch_size
    return {
        "jobs": jobs,
        "calls": args.batches,
        "jobs_per_s": jobs / secs,
        "ms_per_call": 1000 * secs / args.batches,
        "clock": "process",
    }


async def latency(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    latencies: list[float] = []
    all_seen = asyncio.Event()

    async def record(job: Job) -> None:
        latencies.append(1000 * (time.perf_counter() - float(job.payload or b"nan")))
        if len(latencies) == args.jobs:
            all_seen.set()

    pool = await asyncpg.create_pool(dsn)  # producers on a pool, as the tuning guide says
    producer = Queries(AsyncpgPoolDriver(pool))
    workers = Workers(dsn, record)
    await workers.start()
    try:
        await asyncio.sleep(1.0)  # let the instances start listening and make their first dequeue
        loop = asyncio.get_running_loop()
        posts = []
        t0 = loop.time()
        for i in range(args.jobs):
            delay = t0 + i * args.interval_ms / 1000 - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = repr(time.perf_counter()).encode()
            posts.append(asyncio.create_task(producer.enqueue(ENTRYPOINT, sent)))
        enqueue_secs = loop.time() - t0
        await asyncio.gather(*posts)
        try:
            await asyncio.wait_for(all_seen.wait(), 120)
        except TimeoutError:
            raise TimeoutError(f"only {len(latencies)} of {args.jobs} jobs started within 120 s") from None
        workers.check()
    finally:
        await workers.stop()
        await pool.close()
    return {
        "jobs": args.jobs,
        "interval_ms": args.interval_ms,
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "enqueue_rate": (args.jobs - 1) / enqueue_secs if enqueue_secs > 0 else None,
        "clock": "process",
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    conn = await asyncpg.connect(args.dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        await queries.optimize_autovacuum()
        if args.figure == "drain":
            result = await drain(args, queries, conn)
        elif args.figure == "enqueue":
            result = await enqueue(args, queries)
        else:
            result = await latency(args, args.dsn)
    finally:
        await conn.close()
    return {
        "system": "PgQueuer",
        "version": importlib.metadata.version("pgqueuer"),
        "runtime": f"python {platform.python_version()}",
        "figure": args.figure,
        "config": CONFIG,
        **result,
    }


if __name__ == "__main__":
    result = uvloop.run(main(parse_args()))
    sys.stdout.write(json.dumps(result) + "\n")
