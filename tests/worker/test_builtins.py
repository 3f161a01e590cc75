"""The in-process worker runtime with the built-in tasks (echo, log, sleep, fail): outcomes, retries,
dead letters, timeouts, cancellation, claim order and scheduling."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.protocol.helpers import cancel, create_job, dead_letters, finished, get_job, job_row, reaches, ts

AUTH = {"Authorization": "Bearer dev"}


async def test_echo_returns_its_payload_marked_echoed(api):
    client = await api(mode="all")
    job_id = await create_job(client, "echo", {"hello": "world", "nested": {"n": [1, 2]}})
    job = await finished(client, job_id)
    assert job["status"] == "completed"
    assert job["result"] == {"hello": "world", "nested": {"n": [1, 2]}, "echoed": True}
    assert (job["delivery_count"], job["retry_count"]) == (1, 0)
    assert "error_message" not in job


@pytest.mark.parametrize(
    ("task", "payload", "result"),
    [
        ("log", {"message": "hi"}, {"logged": True}),
        ("sleep", {"duration": 0.01}, {"slept": 0.01}),
    ],
)
async def test_log_and_sleep_complete_with_their_results(api, task, payload, result):
    client = await api(mode="all")
    job = await finished(client, await create_job(client, task, payload))
    assert (job["status"], job["result"]) == ("completed", result)


async def test_fail_retries_through_the_backoff_then_dead_letters(api, db):
    client = await api(mode="all", janitor_interval_secs=0.1)
    job_id = await create_job(client, "fail", {"message": "always broken"}, max_retries=2, retry_delay_secs=0)

    job = await finished(client, job_id)

    assert job["status"] == "failed"
    assert (job["retry_count"], job["delivery_count"]) == (2, 3)
    assert job["error_message"] == "always broken"
    [dl] = await dead_letters(db, job_id)
    assert dl["reason"] == "max_attempts_exceeded"


async def test_fail_with_permanent_true_is_dead_lettered_without_retrying(api, db):
    client = await api(mode="all")
    job_id = await create_job(client, "fail", {"permanent": True}, max_retries=5)
    job = await finished(client, job_id)
    assert job["status"] == "failed"
    assert (job["retry_count"], job["delivery_count"]) == (0, 1)
    assert [d["reason"] for d in await dead_letters(db, job_id)] == ["non_retryable"]


async def test_a_retryable_in_process_failure_waits_out_its_backoff(api, db):
    client = await api(mode="all")
    before = await db.fetchval("SELECT now()")
    job_id = await create_job(
        client, "fail", max_retries=3, retry_backoff="fixed", retry_delay_secs=600, jitter_factor=0.0
    )
    job = await reaches(client, job_id, "retrying")
    assert job["retry_count"] == 1
    assert ts(job["scheduled_at"]) >= before + timedelta(seconds=600)
    assert await dead_letters(db, job_id) == []


async def test_an_unknown_task_is_dead_lettered_as_handler_not_found(api, db):
    client = await api(mode="all")
    job_id = await create_job(client, "no-such-task", max_retries=5)
    job = await finished(client, job_id)
    assert job["status"] == "failed"
    assert job["error_message"] == "no handler registered for task 'no-such-task'"
    assert job["retry_count"] == 0
    [dl] = await dead_letters(db, job_id)
    assert dl["reason"] == "handler_not_found"
    assert dl["error_message"] == "no handler registered for task 'no-such-task'"


async def test_a_handler_exceeding_its_timeout_fails_retryably(api, db):
    client = await api(mode="all")
    job_id = await create_job(client, "sleep", {"duration": 3600}, timeout=1, max_retries=1)
    job = await reaches(client, job_id, "retrying")
    assert job["error_message"].startswith("job exceeded its timeout")
    assert job["retry_count"] == 1
    assert await dead_letters(db, job_id) == []


async def test_a_timeout_with_no_budget_left_is_dead_lettered(api, db):
    client = await api(mode="all")
    job_id = await create_job(client, "sleep", {"duration": 3600}, timeout=1, max_retries=0)
    job = await finished(client, job_id)
    assert job["status"] == "failed"
    assert job["error_message"].startswith("job exceeded its timeout")
    assert [d["reason"] for d in await dead_letters(db, job_id)] == ["max_attempts_exceeded"]


async def test_cancelling_a_running_sleep_stops_its_handler_and_records_nothing(api, db):
    client = await api(mode="all", workers=1)
    sleeper = await create_job(client, "sleep", {"duration": 3600})
    await reaches(client, sleeper, "running")

    assert await cancel(client, sleeper) == 204

    # One worker slot: the next job can only run once the cancelled handler has stopped.
    follower = await create_job(client, "echo", {"after": "cancel"})
    assert (await finished(client, follower))["status"] == "completed"
    job = await get_job(client, sleeper)
    assert job["status"] == "cancelled"
    assert "result" not in job and "error_message" not in job
    assert job["delivery_count"] == 1
    assert await dead_letters(db, sleeper) == []


async def test_a_cancelled_pending_job_never_runs(api, db):
    client = await api()
    doomed = await create_job(client, "echo", {"doomed": True})
    assert await cancel(client, doomed) == 204
    await api(mode="worker", workers=1)
    sentinel = await create_job(client, "echo")
    assert (await finished(client, sentinel))["status"] == "completed"
    row = await job_row(db, doomed)
    assert row["status"] == "cancelled"
    assert (row["delivery_count"], row["started_at"], row["result"]) == (0, None, None)


async def test_higher_priority_jobs_are_run_first(api, db):
    client = await api()
    ids = {}
    for name, priority in [("low", 0), ("high", 10), ("mid", 5), ("low2", 0), ("urgent", 100)]:
        ids[name] = await create_job(client, "echo", {"name": name}, priority=priority)
    await api(mode="worker", workers=1)
    for job_id in ids.values():
        await finished(client, job_id)
    # Jobs of one claim share its started_at, so the check is pairwise: no job starts after one of
    # lower priority (a worker claiming ahead takes several at once, the highest first).
    rows = await db.fetch("SELECT priority, started_at FROM queueflow.jobs")
    assert len(rows) == 5
    late = [
        (a["priority"], b["priority"])
        for a in rows
        for b in rows
        if a["priority"] > b["priority"] and a["started_at"] > b["started_at"]
    ]
    assert late == []


async def test_a_run_at_job_waits_until_due_then_runs(api, db):
    client = await api(mode="all", janitor_interval_secs=30)
    run_at = await db.fetchval("SELECT now()") + timedelta(seconds=1)
    job_id = await create_job(client, "echo", {"later": True}, run_at=run_at)
    pending = await get_job(client, job_id)
    assert ts(pending["scheduled_at"]) == run_at

    job = await finished(client, job_id)

    assert job["status"] == "completed"
    assert ts(job["started_at"]) >= run_at


async def test_the_in_process_lease_covers_the_job_timeout_plus_grace(api, db):
    client = await api(mode="all", lease_secs=5, lease_grace_secs=7)
    job_id = await create_job(client, "sleep", {"duration": 3600}, timeout=100)
    await reaches(client, job_id, "running")
    row = await job_row(db, job_id)
    assert row["locked_until"] - row["started_at"] == timedelta(seconds=107)
    assert await cancel(client, job_id) == 204


async def test_workers_drain_every_configured_queue_and_only_those(api):
    client = await api(mode="all", queues=("a", "b"))
    on_a = await create_job(client, "echo", queue="a")
    on_b = await create_job(client, "echo", queue="b")
    elsewhere = await create_job(client, "echo", queue="c")
    on_default = await create_job(client, "echo")
    assert (await finished(client, on_a))["status"] == "completed"
    assert (await finished(client, on_b))["status"] == "completed"
    assert (await get_job(client, elsewhere))["status"] == "pending"
    assert (await get_job(client, on_default))["status"] == "pending"


async def test_the_tasks_route_lists_the_builtins_a_live_worker_handles(api):
    client = await api(mode="all")
    resp = await client.get("/api/v1/tasks", headers=AUTH)
    assert resp.status == 200
    assert {"echo", "log", "sleep", "fail"} <= set((await resp.json())["tasks"])
