"""The official Python client (queueflow==0.5.0) against the in-process app. The client is
synchronous (urllib3), so every call runs in a thread while the event loop keeps serving."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from queueflow.exceptions import ApiException
from queueflow.facade import QueueFlow
from queueflow.models.create_batch_jobs_request import CreateBatchJobsRequest
from queueflow.models.create_job_request import CreateJobRequest
from queueflow.models.fail_job_request import FailJobRequest
from queueflow.models.lease_jobs_request import LeaseJobsRequest

T = TypeVar("T")


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


async def connect(api, **settings: Any) -> QueueFlow:
    client = await api(**settings)
    return QueueFlow(str(client.make_url("")), "dev", timeout=30.0)


async def dead_letter(qf: QueueFlow, queue: str, payload: dict[str, Any]) -> tuple[str, int]:
    """A job failed non-retryably through the client's worker API; (job id, dead-letter id)."""
    job = await call(qf.create_job, "boom", payload=payload, queue=queue)
    leased = (await call(qf.worker.lease_jobs, queue, LeaseJobsRequest(max_jobs=1))).jobs
    assert [lease.job.id for lease in leased] == [job.id]
    await call(
        qf.worker.fail_job,
        job.id,
        FailJobRequest(lease_token=leased[0].lease_token, error="nope", retryable=False),
    )
    entries = (await call(qf.dlq.list_dead_letters, queue=queue, replayed=False)).dead_letters
    [entry] = [e for e in entries if e.job_id == job.id]
    return job.id, entry.id


async def test_create_job_and_wait_for_job_round_trip(api):
    qf = await connect(api, mode="all")
    job = await call(qf.create_job, "echo", payload={"hi": 1}, priority=2, max_retries=1)
    assert job.status in ("pending", "running", "completed")
    assert job.task_name == "echo"
    assert (job.config.priority, job.config.max_retries) == (2, 1)
    done = await call(qf.wait_for_job, job.id, timeout=30.0, interval=0.05)
    assert done.status == "completed"
    assert done.result == {"hi": 1, "echoed": True}
    assert done.delivery_count == 1
    assert done.completed_at is not None


async def test_create_job_with_idempotency_key_returns_the_same_job(api):
    qf = await connect(api)
    first = await call(qf.create_job, "t", idempotency_key="abc")
    second = await call(qf.create_job, "t", idempotency_key="abc")
    assert first.id == second.id
    assert first.idempotency_key == "abc"


async def test_list_jobs_pages_with_next_cursor(api):
    qf = await connect(api)
    created = await call(
        qf.jobs.create_batch_jobs,
        CreateBatchJobsRequest(jobs=[CreateJobRequest(task_name="t", payload={"i": i}) for i in range(5)]),
    )
    assert created.count == 5
    first = await call(qf.jobs.list_jobs, limit=2, include_total=True)
    assert (first.total, first.has_more, len(first.jobs)) == (5, True, 2)
    seen = [j.id for j in first.jobs]
    cursor = first.next_cursor
    while cursor:
        page = await call(qf.jobs.list_jobs, limit=2, cursor=cursor)
        assert page.total is None
        seen += [j.id for j in page.jobs]
        cursor = page.next_cursor
        assert bool(cursor) == page.has_more
    assert sorted(seen) == sorted(created.job_ids)
    assert len(seen) == 5


async def test_list_jobs_filters_and_ascending_order(api):
    qf = await connect(api)
    a = await call(qf.create_job, "a", queue="q1")
    b = await call(qf.create_job, "b", queue="q2")
    assert [j.id for j in (await call(qf.jobs.list_jobs, queue="q2")).jobs] == [b.id]
    assert [j.id for j in (await call(qf.jobs.list_jobs, task_name="a", status="pending")).jobs] == [a.id]
    asc = await call(qf.jobs.list_jobs, order_by="created_at ASC")
    assert [j.id for j in asc.jobs] == [a.id, b.id]


async def test_cancel_jobs_by_filter_and_cancel_job_conflict(api):
    qf = await connect(api)
    keep = await call(qf.create_job, "t", queue="keep")
    drop = [await call(qf.create_job, "t", queue="drop") for _ in range(3)]
    assert await call(qf.cancel_jobs, queue="drop") == 3
    assert await call(qf.cancel_jobs, queue="drop") == 0
    for job in drop:
        assert (await call(qf.jobs.get_job, job.id)).status == "cancelled"
    assert (await call(qf.jobs.get_job, keep.id)).status == "pending"
    with pytest.raises(ApiException) as err:
        await call(qf.cancel_jobs, status="completed")
    assert err.value.status == 400
    await call(qf.jobs.cancel_job, keep.id)
    with pytest.raises(ApiException) as err:
        await call(qf.jobs.cancel_job, keep.id)
    assert err.value.status == 409


async def test_get_unknown_job_raises_404(api):
    qf = await connect(api)
    with pytest.raises(ApiException) as err:
        await call(qf.jobs.get_job, "00000000-0000-4000-8000-000000000000")
    assert err.value.status == 404


async def test_replay_dead_letter_returns_a_fresh_pending_job(api):
    qf = await connect(api)
    job_id, dl_id = await dead_letter(qf, "q-client-dlq", {"x": 1})
    entry = await call(qf.dlq.get_dead_letter, dl_id)
    assert (entry.reason, entry.job_id, entry.replayed_at) == ("non_retryable", job_id, None)
    fresh = await call(qf.replay_dead_letter, dl_id)
    assert fresh.id != job_id
    assert (fresh.status, fresh.task_name, fresh.payload, fresh.queue_name) == (
        "pending",
        "boom",
        {"x": 1},
        "q-client-dlq",
    )
    assert fresh.metadata["replayed_from_job"] == job_id
    assert (await call(qf.dlq.get_dead_letter, dl_id)).replay_job_id == fresh.id
    with pytest.raises(ApiException) as err:
        await call(qf.replay_dead_letter, dl_id)
    assert err.value.status == 409


async def test_replay_dead_letters_in_bulk(api):
    qf = await connect(api)
    dl_ids = [(await dead_letter(qf, "q-bulk-client", {"i": i}))[1] for i in range(3)]
    _, other = await dead_letter(qf, "q-other-client", {})
    results = await call(qf.replay_dead_letters, queue="q-bulk-client")
    assert sorted(r.dead_letter_id for r in results) == sorted(dl_ids)
    assert all(r.job_id and r.error is None for r in results)
    assert await call(qf.replay_dead_letters, queue="q-bulk-client") == []
    rest = await call(qf.replay_dead_letters)
    assert [r.dead_letter_id for r in rest] == [other]
    listed = await call(qf.dlq.list_dead_letters, replayed=True, include_total=True)
    assert listed.total == 4


async def test_whoami_stats_tasks_and_probes(api):
    qf = await connect(api)
    me = await call(qf.whoami)
    assert (me.tenant, me.access) == ("tenant1", "read_write")
    await call(qf.create_job, "t")
    stats = await call(qf.system.get_stats)
    assert stats.jobs_created == 1
    assert (await call(qf.system.list_tasks)).tasks == []
    health = await call(qf.health_api.get_health)
    assert health.status == "healthy"
    assert (await call(qf.health_api.get_ready)).status == "ready"


async def test_queues_lists_the_tenants_backlog(api):
    qf = await connect(api)
    await call(qf.create_job, "t", queue="q-backlog")
    queues = {q.queue: q for q in await call(qf.queues)}
    assert queues["q-backlog"].pending == 1
    assert queues["q-backlog"].running == 0
