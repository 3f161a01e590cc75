"""`python -m bench.wal`: how many bytes of WAL a job costs, per phase of its life.

A fresh durable cluster and database (bench/harness.py), the split topology, and four phases. Each
phase's WAL is the range between the flushed WAL position before and after it, read back with
`pg_waldump --stats` (records, record bytes and full-page-image bytes per resource manager):

1. batch enqueue: `--jobs` echo jobs, 1,000 per `POST /api/v1/jobs/batch`, on `default`;
2. in-process drain of them: `serve --mode worker --workers 16` (built-in `echo`);
3. single enqueue: `--single` jobs, one `POST /api/v1/jobs` each, 16 at a time, on `remote`;
4. remote drain of them: 8 worker loops x 50 per lease, one batch acknowledgement per lease.

A CHECKPOINT runs before phases 1 and 3 only: a job's insert, claim and completion normally fall
in one checkpoint cycle (seconds apart, against minutes), so its heap page is written as a full
page image at most once per cycle; a checkpoint between enqueue and drain would charge the drain
an image per page that steady traffic does not pay. Nothing else uses the cluster meanwhile (it
is this run's own). Prints one table and writes bench/out/wal.json. docs/scaling.md uses it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from typing import Any

from bench import client, harness

_CLUSTER: Any = None  # the embedded cluster (for pg_waldump)
_ROW = re.compile(r"^(\S+)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)")
_TOTAL = re.compile(r"^Total\s+(\d+)\s+(\d+)\s+\[[\d.]+%\]\s+(\d+)\s+\[[\d.]+%\]\s+(\d+)")


def _waldump(start: str, end: str) -> dict[str, Any]:
    """pg_waldump --stats over [start, end): totals and the combined bytes per resource manager."""
    run = _CLUSTER._run(
        "pg_waldump", "--stats", "-p", str(_CLUSTER.data_dir / "pg_wal"), "-s", start, "-e", end
    )
    per_rmgr: dict[str, int] = {}
    total = None
    for line in run.stdout.splitlines():
        if m := _TOTAL.match(line):
            total = [int(g) for g in m.groups()]
        elif (m := _ROW.match(line)) and int(m.group(2)):
            per_rmgr[m.group(1)] = int(m.group(5))
    if total is None:
        raise RuntimeError(f"pg_waldump gave no total:\n{run.stdout[-2000:]}")
    records, record_bytes, fpi_bytes, combined = total
    return {
        "records": records,
        "record_bytes": record_bytes,
        "fpi_bytes": fpi_bytes,
        "bytes": combined,
        "per_rmgr": per_rmgr,
    }


async def _phase(conn: Any, name: str, jobs: int, action: Any, checkpoint: bool) -> dict[str, Any]:
    if checkpoint:
        await conn.execute("CHECKPOINT")
    before = await conn.fetchval("SELECT pg_current_wal_flush_lsn()::text")
    started = time.perf_counter()
    await action()
    secs = time.perf_counter() - started
    await asyncio.sleep(1.0)  # the servers' last asynchronous writes (none expected) land
    after = await conn.fetchval("SELECT pg_current_wal_flush_lsn()::text")
    d = await asyncio.to_thread(_waldump, before, after)
    return {
        "phase": name,
        "jobs": jobs,
        "secs": round(secs, 2),
        "wal_bytes": d["bytes"],
        "wal_records": d["records"],
        "fpi_bytes": d["fpi_bytes"],
        "bytes_per_job": round(d["bytes"] / jobs, 1),
        "records_per_job": round(d["records"] / jobs, 2),
        "bytes_per_job_by_rmgr": {k: round(v / jobs, 1) for k, v in sorted(d["per_rmgr"].items())},
        "checkpoint_before": checkpoint,
    }


async def measure(pg: Any, jobs: int, single: int) -> list[dict[str, Any]]:
    log_dir = harness.OUT_DIR / "wal-logs"
    async with harness.database(pg, "wal") as dsn:
        api = harness.server(dsn, "api", log_dir)
        janitor = harness.server(dsn, "janitor", log_dir)
        async with harness.servers(api, janitor), client.session() as http:
            conn = await harness.connect(dsn)
            done = "SELECT count(*) FROM queueflow.jobs WHERE status = 'completed' AND queue_name = $1"
            out = []
            try:
                out.append(
                    await _phase(
                        conn,
                        "batch enqueue (1,000 per call)",
                        jobs,
                        lambda: client.enqueue_backlog(http, api.base_url, jobs, "default"),
                        checkpoint=True,
                    )
                )

                async def drain_in_process() -> None:
                    worker = harness.server(dsn, "worker", log_dir, ("--workers", "16"))
                    async with harness.servers(worker):
                        await harness.wait_for_count(
                            conn, done.replace("$1", "'default'"), jobs, 600, interval=0.1
                        )

                out.append(
                    await _phase(conn, "in-process drain (--workers 16)", jobs, drain_in_process, False)
                )

                async def enqueue_single() -> None:
                    gate = asyncio.Semaphore(16)

                    async def one(i: int) -> None:
                        async with gate:
                            await client.create_job(http, api.base_url, i, "remote")

                    await asyncio.gather(*(one(i) for i in range(single)))

                out.append(await _phase(conn, "single enqueue (16 concurrent)", single, enqueue_single, True))

                async def drain_remote() -> None:
                    stop = asyncio.Event()
                    loops = [
                        asyncio.create_task(
                            client.worker_loop(http, api.base_url, "remote", 50, 1, stop, ack="batch")
                        )
                        for _ in range(8)
                    ]
                    await harness.wait_for_count(
                        conn, done.replace("$1", "'remote'"), single, 600, interval=0.1, watch=loops
                    )
                    await client.stop_loops(loops, stop)

                out.append(
                    await _phase(conn, "remote drain (8 x 50, batch ack)", single, drain_remote, False)
                )
                await conn.execute("VACUUM ANALYZE queueflow.jobs")
                size = await conn.fetchrow(
                    "SELECT count(*) AS n, pg_table_size('queueflow.jobs') AS heap,"
                    " pg_indexes_size('queueflow.jobs') AS indexes FROM queueflow.jobs"
                )
                out.append(
                    {
                        "phase": "storage of the finished jobs (after VACUUM)",
                        "jobs": size["n"],
                        "table_bytes_per_job": round(size["heap"] / size["n"], 1),
                        "index_bytes_per_job": round(size["indexes"] / size["n"], 1),
                    }
                )
            finally:
                await conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wal", description=__doc__)
    p.add_argument("--jobs", type=int, default=20000, help="jobs in the batch-enqueued backlog")
    p.add_argument("--single", type=int, default=5000, help="jobs enqueued one per call")
    args = p.parse_args(argv)
    harness.begin(harness.OUT_DIR / "wal-logs")
    global _CLUSTER
    with harness.cluster("qfwal-pg-") as pg:
        _CLUSTER = pg.embedded
        rows = asyncio.run(measure(pg, args.jobs, args.single))
    (harness.OUT_DIR / "wal.json").write_text(json.dumps(rows, indent=1))
    print("| phase | jobs | WAL bytes | bytes/job | records/job | of which full-page images, bytes | secs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows[:-1]:
        print(
            f"| {r['phase']} | {r['jobs']:,} | {r['wal_bytes']:,} | {r['bytes_per_job']:,} | "
            f"{r['records_per_job']} | {r['fpi_bytes']:,} | {r['secs']} |"
        )
    for r in rows[:-1]:
        print(f"{r['phase']}: bytes per job by resource manager {r['bytes_per_job_by_rmgr']}")
    print(rows[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
