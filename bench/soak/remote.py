"""`python -m bench.soak.remote`: the soak's remote workers, in a process of their own.

`--loops` worker loops drain `--queue` over the worker protocol (docs/protocol.md): a long-poll
lease (`wait_secs`), the start of each job recorded in the execution log (bench/soak/execlog.py), a
few milliseconds of work, then one batch acknowledgement (`POST /api/v1/jobs/complete`). When the
api process is down (the soak kills it), every call is retried until it answers; an acknowledgement
keeps its lease tokens, so a retry of one that did commit is a harmless replay (204), and a lease
lost meanwhile answers 409 (counted: that job runs again elsewhere). `--idle-loops` more loops
long-poll an empty queue, so parked long-polls are always present. On SIGTERM the loops stop and
the counters are written to `--stats` as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from bench.client import HEADERS
from bench.soak import execlog

LEASE_SECS = 30
RETRY_SECS = 0.5


class Stopped(Exception):
    pass


class Remote:
    def __init__(self, base: str, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        self.base = base
        self.http = http
        self.stop = stop
        self.counts: Counter[str] = Counter()

    async def call(self, path: str, body: dict[str, Any], give_up_on_stop: bool = True) -> Any:
        """POST until the api answers 200; connection errors and 5xx are counted and retried."""
        while True:
            if give_up_on_stop and self.stop.is_set():
                raise Stopped
            try:
                async with self.http.post(self.base + path, json=body) as resp:
                    raw = await resp.read()
                    if resp.status == 200:
                        return json.loads(raw)
                    self.counts[f"http_{resp.status}"] += 1
                    if resp.status < 500:
                        raise RuntimeError(f"POST {path} -> {resp.status}: {raw[:300]!r}")
            except (aiohttp.ClientError, TimeoutError, ConnectionError):
                self.counts["connection_errors"] += 1
            await asyncio.sleep(RETRY_SECS)

    async def work_loop(self, queue: str, max_jobs: int, wait_secs: int) -> None:
        lease_path = f"/api/v1/queues/{queue}/lease"
        body = {"max_jobs": max_jobs, "lease_secs": LEASE_SECS, "wait_secs": wait_secs}
        while not self.stop.is_set():
            try:
                leased = (await self.call(lease_path, body))["jobs"]
            except Stopped:
                return
            self.counts["lease_calls"] += 1
            if not leased:
                continue
            for item in leased:
                job = item["job"]
                execlog.record(job["id"], "remote", int(job.get("delivery_count", 0)))
            self.counts["leased"] += len(leased)
            await asyncio.sleep(random.uniform(0.002, 0.030))
            items = [
                {"id": i["job"]["id"], "lease_token": i["lease_token"], "result": {"ok": True}}
                for i in leased
            ]
            # Acknowledged even while stopping: the jobs were run.
            answer = await self.call("/api/v1/jobs/complete", {"jobs": items}, give_up_on_stop=False)
            for result in answer["results"]:
                self.counts[f"ack_{result['status']}"] += 1

    async def idle_loop(self, queue: str, wait_secs: int) -> None:
        body = {"max_jobs": 1, "lease_secs": LEASE_SECS, "wait_secs": wait_secs}
        while not self.stop.is_set():
            try:
                leased = (await self.call(f"/api/v1/queues/{queue}/lease", body))["jobs"]
            except Stopped:
                return
            self.counts["idle_long_polls"] += 1
            if leased:
                raise RuntimeError(f"the idle queue {queue!r} had a job: {leased}")


async def run(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=60)
    async with aiohttp.ClientSession(headers=HEADERS, timeout=timeout) as http:
        remote = Remote(args.base_url, http, stop)
        tasks = [
            *(remote.work_loop(args.queue, args.max_jobs, args.wait_secs) for _ in range(args.loops)),
            *(remote.idle_loop(args.idle_queue, args.wait_secs) for _ in range(args.idle_loops)),
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    args.stats.write_text(json.dumps({"counts": dict(remote.counts), "loop_errors": errors}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak.remote", description=__doc__)
    p.add_argument("--base-url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--idle-queue", required=True)
    p.add_argument("--loops", type=int, default=4)
    p.add_argument("--idle-loops", type=int, default=4)
    p.add_argument("--max-jobs", type=int, default=20)
    p.add_argument("--wait-secs", type=int, default=5)
    p.add_argument("--stats", type=Path, required=True)
    asyncio.run(run(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
