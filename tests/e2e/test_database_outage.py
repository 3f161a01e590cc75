"""PostgreSQL crashes and goes away under load, and QueueFlow rides it out.

A cluster of this test's own (it is crashed, so it cannot be the session's) and the four services
as separate processes (api, janitor, workflow, worker), with the safety polls at 60 s so that any
progress inside the test's waits comes from NOTIFY wake-ups. While a producer enqueues 10,000
jobs in idempotent batches (remote jobs for the Python SDK's worker loop, in-process jobs for the
worker process, and diamond workflows whose steps run in-process), PostgreSQL is

1. crashed (`pg_ctl stop -m immediate`: every backend killed, no checkpoint) and restarted 3 s
   later, then
2. stopped (fast shutdown) for 30 s and started again.

Then:
- every service process is still running; each reported not-ready (503 on /ready) during the
  30 s outage and ready again after the database came back, and reconnected its LISTEN connection;
- the producer and the SDK worker got 503 with `Retry-After` while the database was away, never a
  500 (the api's request counter and its log say so too);
- every job exists once per idempotency key and completed; each remote job's stored result is the
  one its last delivery produced (no acknowledgement from an earlier, stale lease landed), and the
  SDK handler ran every remote job at least once;
- every workflow completed (in-process outcomes are retried until written, not left to lease
  expiry: before that fix, a 3 s blip stalled in-flight steps for 330 s + the retry delay);
- after it all, a parked long-poll is woken by a new job (the safety poll is 60 s away).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from devkit.pg import EmbeddedPostgres
from devkit.ports import free_port
from devkit.procs import ServiceProcess
from tests.support.metrics import requests_served_with
from tests.support.waiting import eventually

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sdks" / "python" / "src"))
from unofficial_queueflow_client import Backoff, Client, JobContext, Worker

pytestmark = [pytest.mark.timeout(420), pytest.mark.xdist_group("database-outage")]

AUTH = {"Authorization": "Bearer dev"}
REMOTE_QUEUE = "remote-outage"
LOCAL_QUEUE = "default"
REMOTE_JOBS = 5_000
LOCAL_JOBS = 4_800
WORKFLOWS = 50  # 4 steps each: 10,000 jobs in all
BATCH = 200
SAFETY_POLL = ["--worker-poll-secs", "60"]


@pytest.fixture
def cluster() -> Any:
    base = Path(tempfile.mkdtemp(prefix="qf-outage-pg-"))
    # Durable commits (fsync and synchronous_commit on): the tests' usual synchronous_commit=off
    # would let a crash lose commits already acknowledged, which no server can make good.
    pg = EmbeddedPostgres(base / "data", port=free_port(), fsync=True)
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)


def diamond(n: int) -> dict[str, Any]:
    def step(name: str, deps: list[str]) -> dict[str, Any]:
        return {"name": name, "task_name": "echo", "depends_on": deps, "payload": {"wf": n, "step": name}}

    return {
        "name": f"outage-{n}",
        "steps": [step("a", []), step("b", ["a"]), step("c", ["a"]), step("d", ["b", "c"])],
        "metadata": {"marker": f"outage-{n}"},
    }


class Producer:
    """Enqueues in idempotent batches, retrying what the server could not take; counts answers."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.statuses: Counter[int] = Counter()
        self.retry_after: set[str] = set()
        self.remote_keys: set[str] = set()
        self.local_keys: set[str] = set()
        self.workflows: set[str] = set()

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        while True:
            try:
                async with self.http.post(path, json=body, headers=AUTH) as resp:
                    self.statuses[resp.status] += 1
                    if resp.status == 503:
                        self.retry_after.add(resp.headers.get("Retry-After", ""))
                        await asyncio.sleep(0.2)
                        continue
                    assert resp.status == 201, (resp.status, await resp.text())
                    return dict(await resp.json())
            except aiohttp.ClientConnectionError:  # never expected: the api stays up throughout
                self.statuses[-1] += 1
                await asyncio.sleep(0.2)

    async def run(self) -> None:
        batches = []
        for start in range(0, REMOTE_JOBS, BATCH):
            keys = [f"remote-{i}" for i in range(start, start + BATCH)]
            items = [
                {
                    "task_name": "remote-echo",
                    "payload": {"key": k},
                    "idempotency_key": k,
                    "config": {"queue": REMOTE_QUEUE},
                }
                for k in keys
            ]
            batches.append((keys, items, self.remote_keys))
        for start in range(0, LOCAL_JOBS, BATCH):
            keys = [f"local-{i}" for i in range(start, start + BATCH)]
            items = [{"task_name": "echo", "payload": {"key": k}, "idempotency_key": k} for k in keys]
            batches.append((keys, items, self.local_keys))
        # Interleave remote and local batches, with a workflow between every two batches.
        remote, local = batches[: REMOTE_JOBS // BATCH], batches[REMOTE_JOBS // BATCH :]
        order = [b for pair in zip(remote, local, strict=False) for b in pair]
        order += remote[len(local) :] + local[len(remote) :]
        for keys, items, bucket in order:
            await self.post("/api/v1/jobs/batch", {"jobs": items})
            bucket.update(keys)
            if len(self.workflows) < WORKFLOWS:
                await self.create_workflow()
            await asyncio.sleep(0.1)  # a steady flow rather than one burst
        while len(self.workflows) < WORKFLOWS:
            await self.create_workflow()

    async def create_workflow(self) -> None:
        # A create answered 503 was not applied (unless the crash came between its commit and its
        # answer, which the final check would see as a workflow without its marker's twin).
        n = len(self.workflows)
        reply = await self.post("/api/v1/workflows", diamond(n))
        self.workflows.add(str(reply["workflow_id"]))


class RemoteHandler:
    """The SDK worker's handler: records each execution, returns which delivery produced it."""

    def __init__(self) -> None:
        self.executions: Counter[str] = Counter()

    async def __call__(self, ctx: JobContext) -> dict[str, Any]:
        self.executions[ctx.job.id] += 1
        await asyncio.sleep(0.002)
        return {"key": ctx.payload["key"], "delivery": ctx.job.delivery_count}


async def ready_status(http: aiohttp.ClientSession, proc: ServiceProcess) -> int:
    try:
        async with http.get(proc.ready_url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            return resp.status
    except (aiohttp.ClientError, TimeoutError):
        return -1


async def test_postgres_crash_and_outage_under_load(cluster: EmbeddedPostgres, service: Any) -> None:
    loop = asyncio.get_running_loop()
    url = cluster.dsn("postgres").rsplit("/", 1)[0] + "/queueflow_outage"
    admin = await asyncpg.connect(cluster.dsn())
    await admin.execute("CREATE DATABASE queueflow_outage")
    await admin.close()

    api = await service(url, mode="api", extra_args=SAFETY_POLL)
    procs = {
        "api": api,
        "janitor": await service(url, mode="janitor", extra_args=["--janitor-interval-secs", "0.5"]),
        "workflow": await service(url, mode="workflow", extra_args=SAFETY_POLL),
        "worker": await service(url, mode="worker", extra_args=[*SAFETY_POLL, "--workers", "16"]),
    }

    handler = RemoteHandler()
    sdk = Client(api.base_url, "dev", timeout=10)
    worker = Worker(
        sdk,
        REMOTE_QUEUE,
        {"remote-echo": handler},
        lease_secs=60,
        wait_secs=5,
        concurrency=16,
        batch_size=50,
        backoff=Backoff(initial=0.05, maximum=1.0),
    )

    async with aiohttp.ClientSession(base_url=api.base_url) as http, aiohttp.ClientSession() as probe:
        producer = Producer(http)
        worker_task = asyncio.create_task(worker.run())
        producing = asyncio.create_task(producer.run())
        try:
            # -- 1. a crash while work flows, back after 3 s ------------------------------------
            async def flowing() -> bool:
                return len(handler.executions) >= 500 and len(producer.local_keys) >= 1_000

            await eventually(flowing, timeout=120, message="jobs flow before the crash")
            cluster.crash()
            await asyncio.sleep(3)
            cluster.start()

            # -- 2. a 30-second outage, after the services have settled again -------------------
            async def all_ready() -> bool:
                return all([await ready_status(probe, p) == 200 for p in procs.values()])

            await eventually(all_ready, timeout=60, message="every process is ready after the crash")
            await asyncio.sleep(2)
            cluster.stop()
            gone_at = loop.time()
            not_ready: dict[str, int] = Counter()
            while loop.time() - gone_at < 30:
                for name, p in procs.items():
                    status = await ready_status(probe, p)
                    assert status != -1, f"{name} stopped answering /ready while the database was away"
                    if status == 503:
                        not_ready[name] += 1
                await asyncio.sleep(1)
            cluster.start()
            back_at = loop.time()
            ready_after: dict[str, float] = {}

            async def ready_again() -> bool:
                for name, p in procs.items():
                    if name not in ready_after and await ready_status(probe, p) == 200:
                        ready_after[name] = loop.time() - back_at
                return len(ready_after) == len(procs)

            await eventually(ready_again, timeout=60, interval=0.2, message="ready after the outage")
            assert set(not_ready) == set(procs), f"not-ready reports during the outage: {dict(not_ready)}"

            # -- 3. everything drains ------------------------------------------------------------
            await asyncio.wait_for(producing, 180)
            db = await asyncpg.connect(url)
            await db.set_type_codec("jsonb", schema="pg_catalog", encoder=json.dumps, decoder=json.loads)
            try:

                async def settled() -> bool:
                    open_jobs = await db.fetch(
                        "SELECT queue_name, status, workflow_id IS NOT NULL AS step, count(*) AS n,"
                        " min(started_at)::text AS oldest_start, min(locked_until)::text AS lease_end FROM queueflow.jobs"
                        " WHERE status NOT IN ('completed', 'failed', 'cancelled') GROUP BY 1, 2, 3"
                    )
                    open_wfs = await db.fetchval(
                        "SELECT count(*) FROM queueflow.workflows"
                        " WHERE status NOT IN ('completed', 'failed', 'cancelled', 'partially_failed')"
                    )
                    assert not open_jobs and open_wfs == 0, ([dict(r) for r in open_jobs], open_wfs)
                    return True

                await eventually(settled, timeout=120, interval=0.5, message="every job and workflow settles")
                settled_after = loop.time() - back_at
                jobs = await db.fetch(
                    "SELECT id, idempotency_key, status, queue_name, delivery_count, result, workflow_id"
                    " FROM queueflow.jobs"
                )
                workflows = await db.fetch("SELECT id, status, metadata FROM queueflow.workflows")
            finally:
                await db.close()

            # -- 4. a wake-up after it all arrives by NOTIFY -------------------------------------
            async def lease_then_enqueue() -> float:
                lease = asyncio.create_task(
                    http.post(
                        "/api/v1/queues/after-outage/lease",
                        json={"max_jobs": 1, "lease_secs": 30, "wait_secs": 30},
                        headers=AUTH,
                    )
                )
                await asyncio.sleep(1)  # parked
                started = loop.time()
                await producer.post(
                    "/api/v1/jobs", {"task_name": "ping", "config": {"queue": "after-outage"}}
                )
                async with await lease as resp:
                    assert resp.status == 200
                    assert len((await resp.json())["jobs"]) == 1
                return loop.time() - started

            woken_in = await lease_then_enqueue()
        finally:
            worker.stop()
            await asyncio.wait_for(worker_task, 60)
            await sdk.close()
            if not producing.done():
                producing.cancel()

        api_errors = await requests_served_with(http, api, "500")

    print(
        f"ready after the outage (s): {ready_after}; everything settled {settled_after:.1f} s after"
        f" the database came back; producer answers: {dict(producer.statuses)};"
        f" not-ready probes: {dict(not_ready)}; wake-up after: {woken_in * 1000:.1f} ms"
    )

    # Every process rode it out, and reconnected its LISTEN connection twice.
    for name, p in procs.items():
        assert p.returncode is None, f"{name} exited:\n{p.describe()}"
        log = p.log_text()
        assert log.count("listener_connected") >= 3, f"{name} did not reconnect its listener:\n{p.describe()}"
        assert 'request_failed"' not in log and "internal server error" not in log, p.describe()

    # 503 with Retry-After while the database was away; never a 500 or a dropped connection.
    assert producer.statuses[503] > 0 and producer.retry_after == {"1"}, producer.statuses
    assert set(producer.statuses) <= {201, 503}, producer.statuses
    assert api_errors == 0
    assert "request_failed_database_unavailable" in api.log_text()

    # Exactly once per key, completed; remote results come from the last delivery.
    by_key = Counter(r["idempotency_key"] for r in jobs if r["idempotency_key"] is not None)
    assert set(by_key) == producer.remote_keys | producer.local_keys
    assert len(by_key) == REMOTE_JOBS + LOCAL_JOBS and set(by_key.values()) == {1}
    statuses = Counter(r["status"] for r in jobs)
    assert statuses == {"completed": len(jobs)}, statuses
    for r in jobs:
        if r["queue_name"] == REMOTE_QUEUE:
            assert r["result"]["delivery"] == r["delivery_count"], dict(r)
            assert handler.executions[str(r["id"])] >= 1
    assert len(producer.workflows) == WORKFLOWS
    assert {str(r["id"]) for r in workflows} >= producer.workflows
    markers = Counter(r["metadata"]["marker"] for r in workflows)
    assert set(markers) == {f"outage-{n}" for n in range(WORKFLOWS)}, markers
    assert Counter(r["status"] for r in workflows) == {"completed": len(workflows)}
    step_jobs = [r for r in jobs if r["workflow_id"] is not None]
    assert len(step_jobs) == 4 * len(workflows)
    assert woken_in < 20, "the long-poll was answered by its time-out, not by the job's NOTIFY"
