"""Queues that remove completed jobs, end to end with real processes (docs/operations.md,
"Retention"): the official client's create_job and wait_for_job, its worker runtime, the in-process
drain, workflows and their fan-outs, cron, and a kill -9 mid-drain that loses no step outcome."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from queueflow.facade import QueueFlow

from tests.e2e.test_crash_safety import metric, no_other_sessions
from tests.e2e.test_official_client import Worker
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": "Bearer dev"}
FAST = ["--queues", "fast", "--janitor-interval-secs", "0.2"]


async def removing(http: aiohttp.ClientSession, queue: str = "fast") -> None:
    async with http.patch(f"/api/v1/queues/{queue}", json={"retention": "remove_completed"}) as resp:
        assert resp.status == 200, await resp.text()


async def jobs_left(db, queue: str = "fast") -> int:
    return int(await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE queue_name = $1", queue))


async def test_the_official_clients_create_and_wait_work_on_a_removing_queue(database_url, service, db):
    proc = await service(database_url, mode="all", extra_args=[*FAST, "--removal-grace-secs", "1"])
    async with aiohttp.ClientSession(base_url=proc.base_url, headers=AUTH) as http:
        await removing(http)
    qf = QueueFlow(proc.base_url, "dev")
    [stats] = (await asyncio.to_thread(qf.system.list_queues)).queues  # upstream's model parses it
    assert stats.queue == "fast"
    ids = []
    for i in range(20):  # each create reads its job back at once, and each wait polls it
        job = await asyncio.to_thread(qf.create_job, "echo", payload={"i": i}, queue="fast")
        done = await asyncio.to_thread(qf.wait_for_job, job.id, 30.0, 0.05)
        assert (done.status, done.result) == ("completed", {"i": i, "echoed": True})
        ids.append(job.id)
    # The grace over, the janitor deletes them: they were kept only for their readers.
    await eventually(lambda: _none_left(db), timeout=30)
    assert await metric(proc.metrics_url, "queueflow_jobs_completed_total") == 20


async def _none_left(db) -> bool:
    return await jobs_left(db) == 0 and await db.fetchval("SELECT count(*) FROM queueflow.job_removals") == 0


async def test_the_in_process_drain_of_a_removing_queue_leaves_no_row(database_url, service, db):
    proc = await service(database_url, mode="api")
    async with aiohttp.ClientSession(base_url=proc.base_url, headers=AUTH) as http:
        await removing(http)
        jobs = [{"task_name": "echo", "payload": {"i": i}, "config": {"queue": "fast"}} for i in range(500)]
        async with http.post("/api/v1/jobs/batch", json={"jobs": jobs}) as resp:
            assert resp.status == 201
    await proc.terminate()
    worker = await service(database_url, mode="all", extra_args=[*FAST, "--workers", "8"])
    await eventually(_none_left_after_drain(db, worker.metrics_url, 500), timeout=60)
    assert await db.fetchval("SELECT count(*) FROM queueflow.workflow_outbox") == 0


def _none_left_after_drain(db, metrics_url: str, n: int):
    async def check() -> bool:
        done = await metric(metrics_url, "queueflow_jobs_completed_total")
        return done == n and await jobs_left(db) == 0

    return check


async def test_the_official_worker_runtime_drains_a_removing_queue(database_url, service, db):
    proc = await service(database_url, mode="api")
    qf = QueueFlow(proc.base_url, "dev")
    async with aiohttp.ClientSession(base_url=proc.base_url, headers=AUTH) as http:
        await removing(http, "images")
        jobs = [
            {"task_name": "resize", "payload": {"i": i}, "config": {"queue": "images"}} for i in range(30)
        ]
        async with http.post("/api/v1/jobs/batch", json={"jobs": jobs}) as resp:
            assert resp.status == 201
    seen: list[int] = []
    worker = Worker(qf, "images", {"resize": lambda job: seen.append(job.payload["i"]) or {"ok": True}})
    try:
        await eventually(lambda: len(seen) == 30, timeout=60)
        await eventually(lambda: _empty(db, "images"), timeout=30)
    finally:
        result = await worker.close()
    assert sorted(seen) == list(range(30))
    assert result.unfinished == [] and worker.errors == []


async def _empty(db, queue: str) -> bool:
    return await jobs_left(db, queue) == 0


FLOW: dict[str, Any] = {
    "name": "fanned",
    "context": {"items": [1, 2, 3]},
    "steps": [
        {"name": "first", "task_name": "echo", "payload": {"a": 1}, "queue": "fast"},
        {
            "name": "each",
            "task_name": "echo",
            "queue": "fast",
            "depends_on": ["first"],
            "fan_out": {"path": "items", "item_key": "n"},
        },
        {"name": "last", "task_name": "echo", "payload": {"z": 26}, "queue": "fast", "depends_on": ["each"]},
    ],
}


async def test_a_workflow_on_a_removing_queue_gets_every_steps_outcome(database_url, service, db):
    proc = await service(database_url, mode="all", extra_args=FAST)
    async with aiohttp.ClientSession(base_url=proc.base_url, headers=AUTH) as http:
        await removing(http)
        async with http.post("/api/v1/workflows", json=FLOW) as resp:
            assert resp.status == 201, await resp.text()
            wf_id = (await resp.json())["workflow_id"]

        async def finished() -> dict[str, Any] | None:
            async with http.get(f"/api/v1/workflows/{wf_id}") as resp:
                wf = await resp.json()
            return wf if wf["status"] not in ("created", "running") else None

        wf = await eventually(finished, timeout=60)
        assert wf["status"] == "completed"
        assert wf["context"]["first"] == {"a": 1, "echoed": True}
        assert [r["n"] for r in wf["context"]["each"]["results"]] == [1, 2, 3]
        assert wf["context"]["last"] == {"z": 26, "echoed": True}
        async with http.get(f"/api/v1/workflows/{wf_id}/steps") as resp:
            steps = {s["name"]: s for s in (await resp.json())["steps"]}
        for name in ("first", "last"):  # their jobs went with their completion
            async with http.get(f"/api/v1/jobs/{steps[name]['job_id']}") as resp:
                assert resp.status == 404
    # The fan-out's children stay: their step read their results from them when the last ended.
    rows = await db.fetch("SELECT workflow_step_id, status FROM queueflow.jobs WHERE workflow_id = $1", wf_id)
    assert sorted((r["workflow_step_id"], r["status"]) for r in rows) == [("each", "completed")] * 3


async def test_cron_occurrences_on_a_removing_queue_run_and_go(database_url, service, db):
    proc = await service(database_url, mode="all", extra_args=FAST)
    async with aiohttp.ClientSession(base_url=proc.base_url, headers=AUTH) as http:
        await removing(http)
        body = {"name": "tick", "cron_expr": "* * * * * *", "task_name": "echo", "queue": "fast"}
        async with http.post("/api/v1/cron", json=body) as resp:
            assert resp.status == 201, await resp.text()
            cron_id = (await resp.json())["cron_id"]

        async def fired_three() -> bool:
            return await metric(proc.metrics_url, "queueflow_jobs_completed_total") >= 3

        await eventually(fired_three, timeout=30)
        async with http.post(f"/api/v1/cron/{cron_id}/pause") as resp:
            assert resp.status in (200, 204)
    await eventually(lambda: _empty(db, "fast"), timeout=30)
    fired = await db.fetchval("SELECT last_enqueued_at FROM queueflow.cron_schedules WHERE id = $1", cron_id)
    assert fired is not None


async def test_kill_9_mid_drain_of_a_removing_queue_loses_no_step_outcome(database_url, service, db):
    n = 30
    args = [*FAST, "--workers", "4"]
    first = await service(database_url, mode="all", extra_args=args)
    flow = {
        "name": "wide",
        "steps": [
            {
                "name": f"s{i}",
                "task_name": "sleep",
                "payload": {"duration": 0.2, "i": i},
                "queue": "fast",
                "config": {"timeout_secs": 5, "max_retries": 3, "retry_delay_secs": 0},
            }
            for i in range(n)
        ],
    }
    async with aiohttp.ClientSession(base_url=first.base_url, headers=AUTH) as http:
        await removing(http)
        async with http.post("/api/v1/workflows", json=flow) as resp:
            assert resp.status == 201, await resp.text()
            wf_id = (await resp.json())["workflow_id"]

    async def mid_drain() -> bool:
        done = await db.fetchval(
            "SELECT count(*) FROM queueflow.workflow_steps WHERE workflow_id = $1 AND status = 'completed'",
            wf_id,
        )
        running = await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'running'")
        return done >= 4 and running >= 1

    await eventually(mid_drain, timeout=30, interval=0.01)
    await first.kill()
    await eventually(no_other_sessions(db), timeout=30, interval=0.01)
    assert await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'running'") > 0
    await db.execute(
        "UPDATE queueflow.jobs SET locked_until = now() - interval '1 second' WHERE status = 'running'"
    )

    second = await service(database_url, mode="all", extra_args=args)
    async with aiohttp.ClientSession(base_url=second.base_url, headers=AUTH) as http:

        async def finished() -> dict[str, Any] | None:
            async with http.get(f"/api/v1/workflows/{wf_id}") as resp:
                wf = await resp.json()
            return wf if wf["status"] not in ("created", "running") else None

        wf = await eventually(finished, timeout=60)
    assert wf["status"] == "completed"
    assert {k: v["slept"] for k, v in wf["context"].items()} == {f"s{i}": 0.2 for i in range(n)}
    assert await jobs_left(db) == 0
    assert await db.fetchval("SELECT count(*) FROM queueflow.dead_letters") == 0
