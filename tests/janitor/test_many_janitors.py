"""Several janitors on one database: each expired lease is reclaimed exactly once."""

from __future__ import annotations

import asyncio

from tests.protocol.helpers import lease
from tests.support.api import janitor_of
from tests.support.waiting import eventually

AUTH = {"Authorization": "Bearer dev"}


async def enqueue_and_lease(client, n: int, **config) -> None:
    resp = await client.post(
        "/api/v1/jobs/batch", headers=AUTH, json={"jobs": [{"task_name": "echo", "config": config}] * n}
    )
    assert resp.status == 201
    leased = 0
    while leased < n:
        leased += len(await lease(client, max_jobs=100))


async def test_concurrent_reclaim_sweeps_take_disjoint_rows(api, db):
    client = await api()
    others = [await api() for _ in range(3)]
    await enqueue_and_lease(client, 150, max_retries=3)
    await db.execute("UPDATE queueflow.jobs SET locked_until = now() - interval '1 second'")

    counts = await asyncio.gather(*(janitor_of(c).reclaim_expired() for c in [client, *others]))

    assert sum(counts) == 150
    rows = await db.fetch("SELECT status, retry_count FROM queueflow.jobs")
    assert {(r["status"], r["retry_count"]) for r in rows} == {("retrying", 1)}


async def test_janitor_loops_running_side_by_side_dead_letter_each_crashed_job_once(api, db):
    client = await api()
    await enqueue_and_lease(client, 80, max_retries=0)
    for _ in range(3):
        await api(mode="janitor", janitor_interval_secs=0.02, janitor_batch=7)
    await db.execute("UPDATE queueflow.jobs SET locked_until = now() - interval '1 second'")

    async def all_failed() -> bool:
        return await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'failed'") == 80

    await eventually(all_failed)
    per_job = await db.fetch(
        "SELECT j.id, count(d.id) AS n FROM queueflow.jobs j LEFT JOIN queueflow.dead_letters d ON d.job_id = j.id "
        "GROUP BY j.id"
    )
    assert len(per_job) == 80
    assert {r["n"] for r in per_job} == {1}
    assert {r["retry_count"] for r in await db.fetch("SELECT retry_count FROM queueflow.jobs")} == {0}
