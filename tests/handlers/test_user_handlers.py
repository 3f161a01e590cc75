"""User handlers in real processes: `queueflow serve --handlers MODULE` imports the module, registers
its @task functions beside the built-ins and runs them with the runtime's guarantees."""

from __future__ import annotations

import threading

import asyncpg
import pytest

from tests.handlers.helpers import (
    BUILTINS,
    EXAMPLES,
    TEST_TASKS,
    call,
    create_batch,
    create_job,
    get_job,
    start_worker,
    wait_for_file,
    wait_for_status,
)
from tests.support.waiting import eventually

# A retry that will not come due during the test, so a retrying job stays visible as such.
LATE_RETRY = {"max_retries": 3, "retry_delay_secs": 3600, "retry_max_delay_secs": 3600}


async def test_custom_async_handler_runs_and_its_result_is_stored(database_url, service):
    proc = await start_worker(service, database_url)
    job_id = await create_job(proc, "t-double", {"n": 21})

    job = await wait_for_status(proc, job_id, "completed")

    assert job["result"] == {"doubled": 42, "job_id": job_id}
    assert job["delivery_count"] == 1


async def test_sync_handler_runs_in_a_worker_thread_not_on_the_event_loop(database_url, service):
    proc = await start_worker(service, database_url)
    ids = await create_batch(proc, [{"task_name": "t-thread", "payload": {"n": n}} for n in range(3)])

    results = [(await wait_for_status(proc, i, "completed"))["result"] for i in ids]

    assert sorted(r["n"] for r in results) == [0, 1, 2]
    for result in results:
        assert result["is_main_thread"] is False
        assert result["thread"].startswith("queueflow-task"), result
        assert result["thread"] != threading.main_thread().name


async def test_concurrency_one_never_runs_two_handlers_of_the_task_at_once(database_url, service):
    # Four worker slots and four jobs leased together: only the task's limit keeps them apart.
    proc = await start_worker(service, database_url, extra=["--workers", "4"])
    ids = await create_batch(proc, [{"task_name": "t-solo", "payload": {"hold_secs": 0.3}} for _ in range(4)])

    jobs = [await wait_for_status(proc, i, "completed") for i in ids]

    assert [j["result"]["most_at_once"] for j in jobs] == [1, 1, 1, 1]
    assert {j["result"]["peak_in_process"] for j in jobs} == {1}


async def test_concurrency_one_holds_for_sync_handlers_too(database_url, service):
    proc = await start_worker(service, database_url, extra=["--workers", "3"])
    ids = await create_batch(
        proc, [{"task_name": "t-solo-sync", "payload": {"hold_secs": 0.2}} for _ in range(3)]
    )

    jobs = [await wait_for_status(proc, i, "completed") for i in ids]

    assert [j["result"]["most_at_once"] for j in jobs] == [1, 1, 1]


async def test_concurrency_two_runs_two_handlers_at_once_and_never_three(database_url, service):
    # Each handler waits (up to 10 s) for a partner, so two always meet when the limit allows two.
    proc = await start_worker(service, database_url, extra=["--workers", "6"])
    ids = await create_batch(
        proc, [{"task_name": "t-pair", "payload": {"hold_secs": 10, "partners": 2}} for _ in range(6)]
    )

    jobs = [await wait_for_status(proc, i, "completed", timeout=60) for i in ids]

    assert max(j["result"]["most_at_once"] for j in jobs) == 2
    assert {j["result"]["peak_in_process"] for j in jobs} == {2}


async def test_task_timeout_overrides_the_job_timeout_and_fails_the_job_retryably(database_url, service):
    proc = await start_worker(service, database_url)
    job_id = await create_job(proc, "t-slow", timeout=300, **LATE_RETRY)

    job = await wait_for_status(proc, job_id, "retrying", "failed")

    assert job["status"] == "retrying"
    assert job["error_message"] == "job exceeded its timeout of 1s"
    assert job["retry_count"] == 1
    status, dead = await call(proc, "GET", "/api/v1/dlq")
    assert status == 200 and dead["dead_letters"] == []


async def test_sync_handler_past_its_timeout_is_told_through_is_cancelled(database_url, service, tmp_path):
    proc = await start_worker(service, database_url)
    marker = tmp_path / "slow-sync"
    job_id = await create_job(proc, "t-slow-sync", {"marker": str(marker)}, **LATE_RETRY)

    job = await wait_for_status(proc, job_id, "retrying", "failed")

    assert job["error_message"] == "job exceeded its timeout of 1s"
    assert await wait_for_file(marker.with_name("slow-sync.stopped")) == "told"


async def test_permanent_error_dead_letters_the_job_without_retrying(database_url, service):
    proc = await start_worker(service, database_url)
    job_id = await create_job(proc, "t-permanent", {"what": "a corrupt image"}, **LATE_RETRY)

    job = await wait_for_status(proc, job_id, "failed", "retrying")

    assert job["status"] == "failed"
    assert job["error_message"] == "cannot handle a corrupt image"
    assert job["retry_count"] == 0
    status, dead = await call(proc, "GET", "/api/v1/dlq")
    assert status == 200
    assert [(d["job_id"], d["reason"]) for d in dead["dead_letters"]] == [(job_id, "non_retryable")]


async def test_an_ordinary_exception_is_retried_with_its_message(database_url, service):
    proc = await start_worker(service, database_url)
    job_id = await create_job(proc, "t-flaky", **LATE_RETRY)

    job = await wait_for_status(proc, job_id, "retrying", "failed")

    assert job["status"] == "retrying"
    assert job["error_message"] == "try again later"


async def test_cancelling_a_running_async_job_through_the_api_cancels_its_handler(
    database_url, service, tmp_path
):
    # Separate api and worker processes: the cancel reaches the worker only through PostgreSQL.
    api = await service(database_url, mode="api")
    await start_worker(service, database_url, mode="worker")
    marker = tmp_path / "async-job"
    job_id = await create_job(api, "t-wait-cancel", {"marker": str(marker)})
    await wait_for_file(marker.with_name("async-job.started"))

    status, _ = await call(api, "POST", f"/api/v1/jobs/{job_id}/cancel")

    assert status == 204
    assert await wait_for_file(marker.with_name("async-job.cancelled")) == "event set"
    job = await get_job(api, job_id)
    assert job["status"] == "cancelled"
    assert "result" not in job and "error_message" not in job  # the worker reported nothing
    assert job["retry_count"] == 0


async def test_cancelling_a_running_sync_job_through_the_api_flips_is_cancelled(
    database_url, service, tmp_path
):
    api = await service(database_url, mode="api")
    await start_worker(service, database_url, mode="worker")
    marker = tmp_path / "sync-job"
    job_id = await create_job(api, "t-wait-cancel-sync", {"marker": str(marker)})
    await wait_for_file(marker.with_name("sync-job.started"))

    status, _ = await call(api, "POST", f"/api/v1/jobs/{job_id}/cancel")

    assert status == 204
    assert (await wait_for_file(marker.with_name("sync-job.cancelled"))).startswith("queueflow-task")
    job = await get_job(api, job_id)
    assert job["status"] == "cancelled"
    assert "result" not in job and "error_message" not in job


async def test_a_job_for_a_concurrency_limited_task_cancelled_while_waiting_never_starts(
    database_url, service, tmp_path
):
    api = await service(database_url, mode="api")
    await start_worker(service, database_url, mode="worker", extra=["--workers", "2"])
    first, second = tmp_path / "first", tmp_path / "second"
    first_id = await create_job(api, "t-solo-cancel", {"marker": str(first)})
    await wait_for_file(first.with_name("first.started"))
    second_id = await create_job(api, "t-solo-cancel", {"marker": str(second)})
    await wait_for_status(api, second_id, "running")  # leased, parked on the task's one slot

    assert (await call(api, "POST", f"/api/v1/jobs/{second_id}/cancel"))[0] == 204
    assert (await call(api, "POST", f"/api/v1/jobs/{first_id}/cancel"))[0] == 204
    await wait_for_file(first.with_name("first.cancelled"))

    # The slot is free again and a third job runs; the cancelled second one never started.
    third = tmp_path / "third"
    third_id = await create_job(api, "t-solo-cancel", {"marker": str(third)})
    await wait_for_file(third.with_name("third.started"))
    assert not second.with_name("second.started").exists()
    assert (await call(api, "POST", f"/api/v1/jobs/{third_id}/cancel"))[0] == 204


@pytest.mark.parametrize(
    ("module", "problem"),
    [
        ("tests.handlers.no_such_module", "cannot import module 'tests.handlers.no_such_module'"),
        ("tests.handlers.qf_broken_import", "cannot import module 'tests.handlers.qf_broken_import'"),
        ("tests.handlers.qf_no_tasks", "module 'tests.handlers.qf_no_tasks' defines no @task functions"),
        (
            "tests.handlers.qf_shadows_builtin",
            (
                "task 'echo' of module 'tests.handlers.qf_shadows_builtin' "
                "is already registered as a built-in task"
            ),
        ),
    ],
)
async def test_a_bad_handlers_module_makes_serve_exit_non_zero_naming_it(
    database_url, service, module, problem
):
    proc = await service(
        database_url, mode="worker", extra_args=["--handlers", f"{TEST_TASKS},{module}"], start=False
    )

    with pytest.raises(RuntimeError, match="exited with"):
        await proc.start()

    assert await proc.wait() == 2  # the CLI's exit status for a configuration error
    assert problem in proc.log_text()


async def test_user_tasks_from_queueflow_handlers_appear_in_get_tasks(database_url, service):
    api = await service(database_url, mode="api")
    await start_worker(
        service, database_url, mode="worker", modules="", env={"QUEUEFLOW_HANDLERS": TEST_TASKS}
    )

    status, body = await call(api, "GET", "/api/v1/tasks")

    assert status == 200
    assert set(BUILTINS) <= set(body["tasks"])
    assert {"t-double", "t-thread", "t-solo", "t-pair", "t-slow", "t-permanent"} <= set(body["tasks"])


async def test_user_tasks_leave_get_tasks_when_their_worker_stops(database_url, service):
    api = await service(database_url, mode="api")
    worker = await start_worker(service, database_url, mode="worker")
    assert "t-double" in (await call(api, "GET", "/api/v1/tasks"))[1]["tasks"]

    assert await worker.terminate() == 0

    assert "t-double" not in (await call(api, "GET", "/api/v1/tasks"))[1]["tasks"]


async def test_the_documented_example_module_runs_its_tasks(database_url, service):
    proc = await start_worker(
        service, database_url, modules="qf_example_tasks", env={"PYTHONPATH": str(EXAMPLES)}
    )
    counted = await create_job(proc, "word-count", {"text": "the cat and the hat and the bat"})
    hashed = await create_job(proc, "fingerprint", {"data": "abc", "rounds": 1})
    rejected = await create_job(proc, "notify-customer", {"email": "nobody"})

    assert (await wait_for_status(proc, counted, "completed"))["result"] == {
        "words": 8,
        "distinct": 5,
        "top": ["the", "and", "bat"],
    }
    assert (await wait_for_status(proc, hashed, "completed"))["result"] == {
        "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "rounds": 1,
    }
    failed = await wait_for_status(proc, rejected, "failed", "retrying")
    assert failed["status"] == "failed"
    assert failed["error_message"] == "not an email address: 'nobody'"


async def test_handler_runs_are_recorded_as_worker_task_rows_per_queue(database_url, service):
    await start_worker(service, database_url, mode="worker", extra=["--queues", "images,mail"])
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT task_name, queue_name FROM queueflow.worker_tasks WHERE task_name = 't-double'"
        )
    finally:
        await conn.close()
    assert sorted(r["queue_name"] for r in rows) == ["images", "mail"]


async def test_jobs_on_a_named_queue_run_user_handlers_there(database_url, service):
    proc = await start_worker(service, database_url, extra=["--queues", "images"])
    job_id = await create_job(proc, "t-double", {"n": 1}, queue="images")
    job = await wait_for_status(proc, job_id, "completed")
    assert job["queue_name"] == "images"
    assert job["result"]["doubled"] == 2


async def test_shutdown_gives_back_running_and_slot_waiting_jobs_without_spending_retries(
    database_url, service, db, tmp_path
):
    worker = await start_worker(
        service, database_url, mode="worker", extra=["--workers", "3", "--shutdown-grace-secs", "1"]
    )
    running, waiting = tmp_path / "running", tmp_path / "waiting"
    sync_job = tmp_path / "sync"
    ids = [
        await db.fetchval(
            "SELECT queueflow.enqueue('tenant1', $1, jsonb_build_object('marker', $2::text))",
            task,
            str(marker),
        )
        for task, marker in (
            ("t-solo-cancel", running),
            ("t-wait-cancel-sync", sync_job),
            ("t-solo-cancel", waiting),
        )
    ]
    await wait_for_file(running.with_name("running.started"))
    await wait_for_file(sync_job.with_name("sync.started"))
    await eventually(lambda: db.fetchval("SELECT count(*) = 3 FROM queueflow.jobs WHERE status = 'running'"))

    assert await worker.terminate() == 0

    rows = await db.fetch("SELECT status, retry_count FROM queueflow.jobs WHERE id = ANY($1::uuid[])", ids)
    assert [tuple(r) for r in rows] == [("pending", 0)] * 3
    assert await wait_for_file(running.with_name("running.cancelled")) == "event set"
    assert (await wait_for_file(sync_job.with_name("sync.cancelled"))).startswith("queueflow-task")
    assert not waiting.with_name("waiting.started").exists()
    assert "worker_released_jobs" in worker.log_text()
