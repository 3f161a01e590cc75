"""The hand-off (shared/runtime/leasing.py, ADR 0018): a job posted while a lease call is parked on
its queue, which the call's last claim found empty (of every tenant's jobs for the worker token, of
its own tenant's for a worker key), is inserted already leased to that call,
in the insert's own statement and commit. The database shows it: such a job's lease began in the
transaction that created it (started_at = created_at, one now()), where a claim's begins later.

Jobs a claim would not lease at once are never handed off (not due, limited, keyed, of a paused
queue): they wait and are claimed as any other. A call that gave up meanwhile has its job given
back, claimable again at once."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from shared import metrics
from shared.db.database import Database
from shared.domain.jobs import JobConfig, NewJob
from shared.runtime import leasing
from shared.runtime.keys import Lifecycle
from tests.api.helpers import ACME, GLOBEX, STRICT
from tests.protocol.helpers import AUTH, complete, create_job, job_row, lease, post
from tests.protocol.test_long_poll import NO_SAFETY_POLL, parked_lease
from tests.support.api import database_of
from tests.support.waiting import eventually


def _handed_off() -> float:
    return metrics.REGISTRY.get_sample_value("queueflow_jobs_handed_off_total") or 0.0


async def _drained(client, queue: str) -> None:
    """A claim of the queue that found nothing: the hub knows it empty (a fresh process does not)."""
    assert await lease(client, queue, wait_secs=0) == []


async def test_a_job_posted_beside_a_parked_lease_call_is_leased_by_its_own_insert(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    await _drained(client, "direct")
    task = await parked_lease(client, "direct", max_jobs=5, lease_secs=45, worker_id="w-1")
    handed_off = _handed_off()

    job_id = await create_job(client, queue="direct", payload={"n": 1})

    [leased] = await asyncio.wait_for(task, 10)
    assert _handed_off() == handed_off + 1
    assert leased["job"]["id"] == job_id and leased["job"]["payload"] == {"n": 1}
    assert leased["job"]["status"] == "running" and leased["job"]["delivery_count"] == 1
    row = await job_row(db, job_id)
    assert row["started_at"] == row["created_at"] == row["attempt_started_at"]  # one transaction
    assert row["status"] == "running" and str(row["lease_token"]) == leased["lease_token"]
    assert row["worker_id"] == "w-1" and row["claim_key"] is not None
    assert row["locked_until"] - row["started_at"] == timedelta(seconds=45)  # the lease asked for
    # The enqueue's audit entry (docs/access.md) is written by the same statement, naming the job.
    [entry] = await db.fetch("SELECT * FROM queueflow.audit_log WHERE $1 = ANY(targets)", str(job_id))
    assert (entry["action"], entry["status"], entry["created_at"]) == ("createJob", 201, row["created_at"])
    status, _ = await complete(client, job_id, leased["lease_token"], {"ok": True})
    assert status == 204
    assert (await job_row(db, job_id))["status"] == "completed"


async def test_an_in_process_workers_lease_covers_the_jobs_timeout_and_grace_as_a_claims(database_url, db):
    database = await Database.open(database_url, min_connections=1, max_connections=4, migrate=False)
    try:
        await eventually(lambda: database.hub.connected)
        assert await leasing.lease_jobs(database, Lifecycle(), "own", 5, 30, 0, 60, timeout_grace=10) == []
        parked = asyncio.ensure_future(
            leasing.lease_jobs(database, Lifecycle(), "own", 5, 30, 30, 60, timeout_grace=10)
        )
        await eventually(lambda: database.hub.waiting("own") == 1)
        job = NewJob(task_name="t", queue="own", config=JobConfig(timeout_secs=100))
        job_id = await leasing.insert_handing_off(database, None, job)
        [lease_] = await asyncio.wait_for(parked, 10)
        assert lease_.job.id == job_id and lease_.job.config.timeout_secs == 100
        row = await db.fetchrow("SELECT * FROM queueflow.jobs WHERE id = $1", job_id)
        assert row["started_at"] == row["created_at"] and row["lease_token"] == lease_.token
        assert row["locked_until"] - row["started_at"] == timedelta(seconds=110)  # timeout + grace
    finally:
        await database.close()


async def test_jobs_a_claim_would_not_lease_at_once_wait_and_are_claimed(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    await _drained(client, "kinds")
    resp = await client.post(
        "/api/v1/jobs",
        json={"task_name": "t", "config": {"queue": "kinds"}, "idempotency_key": f"k-{uuid.uuid4()}"},
        headers=AUTH,
    )
    assert resp.status == 201, await resp.text()
    keyed = (await resp.json())["job_id"]
    limited = await create_job(client, queue="kinds", limits=["customer:1"])
    for job_id in (keyed, limited):
        row = await job_row(db, job_id)
        # Each went in waiting and was announced: a claim (a later transaction) leases it.
        assert row["status"] == "pending" and row["started_at"] is None, job_id
    leased = await lease(client, "kinds", max_jobs=5, wait_secs=5)
    assert {j["job"]["id"] for j in leased} == {keyed, limited}
    for job_id in (keyed, limited):
        row = await job_row(db, job_id)
        assert row["started_at"] > row["created_at"], job_id


async def test_a_delayed_job_is_not_handed_to_a_parked_call(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    await _drained(client, "later")
    task = await parked_lease(client, "later", wait_secs=1)
    job_id = await create_job(client, queue="later", run_at=datetime.now(UTC) + timedelta(hours=1))
    assert await asyncio.wait_for(task, 10) == []
    row = await job_row(db, job_id)
    assert row["status"] == "pending" and row["lease_token"] is None


async def test_a_paused_queue_keeps_a_posted_job_waiting_beside_a_parked_call(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL)
    await create_job(client, queue="held")  # the queue exists for the tenant: pause it
    status, _ = await post(client, "/api/v1/queues/held/pause", {})
    assert status == 200
    await _drained(client, "held")  # (its one job is paused: the claim finds nothing)
    task = await parked_lease(client, "held", wait_secs=1)

    job_id = await create_job(client, queue="held")

    assert await asyncio.wait_for(task, 10) == []
    row = await job_row(db, job_id)
    assert row["status"] == "pending" and row["lease_token"] is None and row["delivery_count"] == 0


async def test_a_worker_keys_parked_call_is_handed_its_own_tenants_jobs_only(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL, **STRICT)
    resp = await client.post("/api/v1/worker-keys", json={"name": "w", "queues": ["mine"]}, headers=ACME)
    assert resp.status == 201, await resp.text()
    key = {"Authorization": f"Bearer {(await resp.json())['token']}"}
    hub = database_of(client).hub

    def parked_empty() -> bool:  # the key's call parked after a claim that found none of acme's
        return hub.waiting("mine") == 1 and hub.tenant_known_empty("mine", "acme", hub.epoch("mine"), 60)

    assert await lease(client, "mine", headers=key, wait_secs=0) == []
    task = asyncio.create_task(lease(client, "mine", headers=key, wait_secs=10))
    await eventually(parked_empty)

    theirs = await create_job(client, queue="mine", headers=GLOBEX)  # another tenant's job
    row = await job_row(db, theirs)
    assert row["status"] == "pending" and row["lease_token"] is None
    await eventually(parked_empty)  # (its notification woke the call, which claimed and parked)
    assert not task.done()

    ours = await create_job(client, queue="mine", headers=ACME)

    [leased] = await asyncio.wait_for(task, 10)
    assert leased["job"]["id"] == ours
    row = await job_row(db, ours)
    assert row["started_at"] == row["created_at"] and str(row["lease_token"]) == leased["lease_token"]
    assert (await job_row(db, theirs))["status"] == "pending"


async def test_a_worker_keys_call_is_not_handed_jobs_while_its_tenant_has_some_waiting(api, db):
    client = await api(worker_poll_secs=NO_SAFETY_POLL, **STRICT)
    resp = await client.post("/api/v1/worker-keys", json={"name": "w", "queues": ["full"]}, headers=ACME)
    key = {"Authorization": f"Bearer {(await resp.json())['token']}"}
    await create_job(client, queue="full", headers=ACME)
    await create_job(client, queue="full", headers=ACME)
    # A claim that took all it asked for: more of acme's jobs may wait, so none is handed off.
    assert len(await lease(client, "full", headers=key, wait_secs=0, max_jobs=1)) == 1
    hub = database_of(client).hub
    assert not hub.tenant_known_empty("full", "acme", hub.epoch("full"), 60)


async def test_a_job_handed_to_a_call_that_gave_up_meanwhile_is_given_back(database_url, db):
    database = await Database.open(database_url, min_connections=1, max_connections=4, migrate=False)
    try:
        await eventually(lambda: database.hub.connected)
        assert await leasing.lease_jobs(database, Lifecycle(), "gone", 5, 30, 0, 60) == []
        parked = asyncio.ensure_future(leasing.lease_jobs(database, Lifecycle(), "gone", 5, 30, 30, 60))
        await eventually(lambda: database.hub.waiting("gone") == 1)

        handed_off = _handed_off()
        insert = asyncio.ensure_future(
            leasing.insert_handing_off(database, None, NewJob(task_name="t", queue="gone"))
        )
        await asyncio.sleep(0)  # the enqueue has taken the parked call and its insert is queued
        assert database.hub.waiting("gone") == 0
        parked.cancel()  # ... and the call gives up before the insert is written
        job_id = await asyncio.wait_for(insert, 10)

        async def given_back() -> bool:
            row = await db.fetchrow("SELECT * FROM queueflow.jobs WHERE id = $1", job_id)
            return row["status"] == "pending" and row["lease_token"] is None

        await eventually(given_back, message="the unheard job was given back")
        row = await db.fetchrow("SELECT retry_count FROM queueflow.jobs WHERE id = $1", job_id)
        assert row["retry_count"] == 0  # no retry spent
        [lease_] = await leasing.lease_jobs(database, Lifecycle(), "gone", 5, 30, 0, 60)
        assert lease_.job.id == job_id
        assert _handed_off() == handed_off  # a job given back is not counted
    finally:
        await database.close()
