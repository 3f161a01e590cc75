"""The official Python client (queueflow==0.5.0) against real QueueFlow processes: the README quick
start, and its worker runtime (`run_worker`) on a custom queue."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from queueflow.exceptions import ApiException
from queueflow.facade import NonRetryableError, QueueFlow

from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)


async def test_readme_quick_start_echo_job_completes(database_url, service):
    proc = await service(database_url, mode="all")
    qf = QueueFlow(proc.base_url, "dev")

    job = await asyncio.to_thread(
        qf.create_job, "echo", payload={"hello": "world"}, max_retries=3, timeout=30
    )
    done = await asyncio.to_thread(qf.wait_for_job, job.id, 30.0, 0.1)

    assert done.status == "completed"
    assert done.result == {"hello": "world", "echoed": True}
    assert done.config.max_retries == 3 and done.config.timeout_secs == 30
    assert done.delivery_count == 1


class Worker:
    """run_worker in a thread, stopped (and joined) by the test."""

    def __init__(self, qf: QueueFlow, queue: str, handlers: dict[str, Any], **kwargs: Any) -> None:
        self.stop = threading.Event()
        self.errors: list[Exception] = []
        kwargs.setdefault("poll_wait_secs", 1)
        self.task = asyncio.create_task(
            asyncio.to_thread(
                qf.run_worker, queue, handlers, stop=self.stop, on_error=self.errors.append, **kwargs
            )
        )

    async def close(self) -> Any:
        self.stop.set()
        return await asyncio.wait_for(self.task, 30)


async def test_run_worker_processes_a_custom_queue_against_api_and_janitor_processes(database_url, service):
    api = await service(database_url, mode="api")
    janitor = await service(database_url, mode="janitor", extra_args=["--janitor-interval-secs", "0.2"])
    qf = QueueFlow(api.base_url, "dev")
    attempts: dict[str, int] = {}

    def resize(job):
        return {"resized": job.payload["name"], "by": threading.current_thread().name}

    def flaky(job):
        attempts[job.id] = attempts.get(job.id, 0) + 1
        if attempts[job.id] == 1:
            raise ConnectionError("storage hiccup")
        return {"attempt": attempts[job.id]}

    def reject(job):
        raise NonRetryableError("corrupt image")

    worker = Worker(qf, "images", {"resize-image": resize, "flaky": flaky, "reject": reject}, concurrency=4)
    try:
        images = [
            await asyncio.to_thread(
                qf.create_job, "resize-image", payload={"name": f"{i}.png"}, queue="images"
            )
            for i in range(6)
        ]
        flaky_job = await asyncio.to_thread(
            qf.create_job, "flaky", queue="images", max_retries=2, retry_delay_secs=0
        )
        rejected = await asyncio.to_thread(qf.create_job, "reject", queue="images", max_retries=5)
        unknown = await asyncio.to_thread(qf.create_job, "nobody-handles-this", queue="images", max_retries=5)

        for i, job in enumerate(images):
            done = await asyncio.to_thread(qf.wait_for_job, job.id, 30.0, 0.1)
            assert done.status == "completed"
            assert done.result["resized"] == f"{i}.png"
            assert done.queue_name == "images"
            assert done.delivery_count == 1
        done = await asyncio.to_thread(qf.wait_for_job, flaky_job.id, 30.0, 0.1)
        assert (done.status, done.result, done.retry_count) == ("completed", {"attempt": 2}, 1)
        done = await asyncio.to_thread(qf.wait_for_job, rejected.id, 30.0, 0.1)
        assert (done.status, done.error_message, done.retry_count) == ("failed", "corrupt image", 0)
        done = await asyncio.to_thread(qf.wait_for_job, unknown.id, 30.0, 0.1)
        assert done.status == "failed" and done.retry_count == 0
        reasons = {
            d.job_id: d.reason for d in (await asyncio.to_thread(qf.dlq.list_dead_letters)).dead_letters
        }
        assert reasons == {rejected.id: "non_retryable", unknown.id: "non_retryable"}
    finally:
        result = await worker.close()
        await janitor.terminate(grace=10.0)
    assert result.unfinished == []
    assert worker.errors == []


async def test_a_cancelled_job_flips_the_official_workers_context_and_nothing_is_reported(
    database_url, service
):
    api = await service(database_url, mode="api")
    qf = QueueFlow(api.base_url, "dev")
    started = threading.Event()
    observed: list[bool] = []

    def long_running(job, ctx):
        started.set()
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.05)
        observed.append(ctx.cancelled)
        return {"should": "never be recorded"}

    worker = Worker(qf, "videos", {"transcode": long_running}, lease_secs=2)
    try:
        job = await asyncio.to_thread(qf.create_job, "transcode", queue="videos")
        await eventually(started.is_set, timeout=20)
        await asyncio.to_thread(qf.jobs.cancel_job, job.id)
        await eventually(lambda: observed, timeout=20, message="the handler saw ctx.cancelled")
        assert observed == [True]
    finally:
        await worker.close()
    final = await asyncio.to_thread(qf.jobs.get_job, job.id)
    assert final.status == "cancelled"
    assert final.result is None


async def test_cancelling_an_already_cancelled_job_is_a_409_for_the_official_client(database_url, service):
    """Upstream's client suite: "Cancel then cancel again -> 409" (a cancelled job is finished)."""
    proc = await service(database_url, mode="api")
    qf = QueueFlow(proc.base_url, "dev")
    job = await asyncio.to_thread(qf.create_job, "echo", queue="nobody-drains-this")
    await asyncio.to_thread(qf.jobs.cancel_job, job.id)
    with pytest.raises(ApiException) as err:
        await asyncio.to_thread(qf.jobs.cancel_job, job.id)
    assert err.value.status == 409
    assert (await asyncio.to_thread(qf.jobs.get_job, job.id)).status == "cancelled"
