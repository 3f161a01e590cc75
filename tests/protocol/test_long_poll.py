"""Long-polling leases: parked without a database connection, woken by LISTEN/NOTIFY on insert, by
the janitor when a delayed job or a retry falls due, and by the safety poll when a notification
was missed.

The safety poll is set far beyond the wait (worker_poll_secs=60, wait_secs=30) wherever a test
proves a wake-up, so only the wake-up under test can hand the job over while the lease is parked.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from tests.protocol.helpers import create_job, fail, get_job, lease, lease_one, ts
from tests.support.api import database_of
from tests.support.waiting import eventually

NO_SAFETY_POLL = 60.0


async def parked_lease(client, queue: str, waiters: int = 1, **body) -> asyncio.Task:
    """Start a long-poll lease and return once the server has it parked on the queue."""
    body.setdefault("wait_secs", 30)
    task = asyncio.create_task(lease(client, queue, **body))
    hub = database_of(client).hub
    await eventually(lambda: hub.waiting(queue) >= waiters, message=f"{waiters} lease(s) parked on {queue}")
    return task


async def running(client, job_id: str) -> bool:
    return (await get_job(client, job_id))["status"] == "running"


async def test_wait_secs_zero_returns_an_empty_list_at_once(api):
    client = await api()
    assert await lease(client, "empty", wait_secs=0) == []


async def test_a_lease_with_nothing_due_parks_then_returns_an_empty_list(api):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    task = await parked_lease(client, "quiet", wait_secs=1)
    assert await task == []
    assert database_of(client).hub.waiting("quiet") == 0


async def test_an_insert_wakes_a_parked_lease_through_notify(api):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    task = await parked_lease(client, "wake")

    job_id = await create_job(client, queue="wake", payload={"k": 1})

    await eventually(lambda: running(client, job_id), message="the parked lease claimed the new job")
    jobs = await task
    assert [j["job"]["id"] for j in jobs] == [job_id]


async def test_an_insert_on_another_queue_does_not_satisfy_a_parked_lease(api):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    task = await parked_lease(client, "mine", wait_secs=1)
    other = await create_job(client, queue="theirs")
    assert await task == []
    assert (await get_job(client, other))["status"] == "pending"


async def test_a_burst_of_inserts_is_spread_over_every_parked_lease(api):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    tasks = [asyncio.create_task(lease(client, "burst", wait_secs=30, max_jobs=1)) for _ in range(5)]
    hub = database_of(client).hub
    await eventually(lambda: hub.waiting("burst") == 5)

    resp = await client.post(
        "/api/v1/jobs/batch",
        headers={"Authorization": "Bearer dev"},
        json={"jobs": [{"task_name": "echo", "config": {"queue": "burst"}}] * 5},
    )
    assert resp.status == 201
    ids = set((await resp.json())["job_ids"])

    results = await asyncio.wait_for(asyncio.gather(*tasks), 25)
    leased = [j["job"]["id"] for r in results for j in r]
    assert sorted(leased) == sorted(ids)


async def test_a_lease_parked_on_one_process_is_woken_by_an_insert_through_another(api):
    leaser = await api(worker_poll_secs=NO_SAFETY_POLL)
    producer = await api(worker_poll_secs=NO_SAFETY_POLL)
    task = await parked_lease(leaser, "cross")
    job_id = await create_job(producer, queue="cross")
    await eventually(lambda: running(producer, job_id))
    assert [j["job"]["id"] for j in await task] == [job_id]


async def test_a_delayed_job_wakes_a_parked_lease_when_it_falls_due(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    # The janitor, in a process of its own, sweeps rarely: only the due-time wake-up can be fast.
    await api(mode="janitor", janitor_interval_secs=NO_SAFETY_POLL, worker_poll_secs=NO_SAFETY_POLL)
    due = await db.fetchval("SELECT now()") + timedelta(seconds=1)
    job_id = await create_job(client, queue="later", run_at=due)
    task = await parked_lease(client, "later")

    await eventually(lambda: running(client, job_id), message="the delayed job was claimed once due")
    jobs = await task
    assert [j["job"]["id"] for j in jobs] == [job_id]
    assert ts(jobs[0]["job"]["started_at"]) >= due


async def test_a_retry_wakes_a_parked_lease_when_its_backoff_elapses(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    await api(mode="janitor", janitor_interval_secs=NO_SAFETY_POLL, worker_poll_secs=NO_SAFETY_POLL)
    job_id = await create_job(
        client, queue="retry", max_retries=2, retry_backoff="fixed", retry_delay_secs=1, jitter_factor=0.0
    )
    _, token = await lease_one(client, "retry")
    assert (await fail(client, job_id, token, "try again"))[0] == 204
    retrying = await get_job(client, job_id)
    assert retrying["status"] == "retrying"
    task = await parked_lease(client, "retry")

    await eventually(
        lambda: running(client, job_id), message="the retry was claimed once its backoff elapsed"
    )
    jobs = await task
    assert [j["job"]["id"] for j in jobs] == [job_id]
    assert jobs[0]["job"]["delivery_count"] == 2
    assert ts(jobs[0]["job"]["started_at"]) <= ts(retrying["scheduled_at"])  # first start kept


async def test_a_missed_notification_is_covered_by_the_safety_poll(api, db):
    client = await api(worker_poll_secs=0.3)
    task = await parked_lease(client, "silent")
    # A claimable row that sends no notification (the insert trigger only fires for 'pending').
    job_id = uuid.uuid4()
    await db.execute(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, tenant_id) "
        "VALUES ($1, 'silent', 'echo', '{}'::jsonb, 'retrying', 'tenant1')",
        job_id,
    )
    jobs = await asyncio.wait_for(task, 25)
    assert [j["job"]["id"] for j in jobs] == [str(job_id)]


async def test_parked_leases_hold_no_database_connection_and_share_one_listener(api, db, database_url):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    pool = database_of(client).pool
    tasks = [asyncio.create_task(lease(client, "idle", wait_secs=30)) for _ in range(25)]
    hub = database_of(client).hub
    await eventually(lambda: hub.waiting("idle") == 25)

    assert pool.get_size() - pool.get_idle_size() == 0, "a parked lease is holding a pooled connection"
    dbname = database_url.rsplit("/", 1)[-1].split("?")[0]
    listeners = await db.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'queueflow-listener'",
        dbname,
    )
    assert listeners == 1

    ids = [await create_job(client, queue="idle") for _ in range(25)]
    results = await asyncio.wait_for(asyncio.gather(*tasks), 25)
    assert sorted(j["job"]["id"] for r in results for j in r) == sorted(ids)


async def test_parked_leases_recheck_after_the_listen_connection_drops(api, db, database_url):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    hub = database_of(client).hub
    task = await parked_lease(client, "reconnect")
    job_id = uuid.uuid4()
    await db.execute(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, tenant_id) "
        "VALUES ($1, 'reconnect', 'echo', '{}'::jsonb, 'retrying', 'tenant1')",
        job_id,
    )
    dbname = database_url.rsplit("/", 1)[-1].split("?")[0]
    killed = await db.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = $1 AND application_name = 'queueflow-listener'",
        dbname,
    )
    assert killed == 1

    # Notifications sent while the connection was down are lost: everyone re-checks.
    jobs = await asyncio.wait_for(task, 25)
    assert [j["job"]["id"] for j in jobs] == [str(job_id)]

    # And the listener is back: a fresh insert wakes a fresh parked lease.
    await eventually(lambda: hub.connected, timeout=15)
    again = await parked_lease(client, "reconnect")
    second = await create_job(client, queue="reconnect")
    await eventually(lambda: running(client, second))
    assert [j["job"]["id"] for j in await again] == [second]
