"""POST /api/v1/jobs/{id}/heartbeat: extends the holder's lease from now, tells the holder when the
server owns the outcome, and refuses everyone else."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.protocol.helpers import (
    cancel,
    complete,
    create_job,
    expire_lease,
    fail,
    heartbeat,
    job_row,
    lease_one,
    make_due,
    post,
)
from tests.support.api import janitor_of


async def test_the_holder_heartbeat_answers_running_and_extends_the_lease_from_now(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client, lease_secs=5)

    status, body = await heartbeat(client, job_id, token, extend_secs=3600)

    assert (status, body) == (200, {"status": "running"})
    row = await job_row(db, job_id)
    assert row["locked_until"] > await db.fetchval("SELECT now() + interval '3500 seconds'")
    assert row["status"] == "running"
    assert str(row["lease_token"]) == token  # a heartbeat never rotates the token


async def test_a_heartbeat_sets_a_new_deadline_even_when_it_is_shorter(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client, lease_secs=3600)
    assert (await heartbeat(client, job_id, token, extend_secs=1))[0] == 200
    row = await job_row(db, job_id)
    assert row["locked_until"] <= await db.fetchval("SELECT now() + interval '1 second'")


async def test_a_heartbeat_revives_a_lease_that_ran_out_before_the_janitor_noticed(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    await expire_lease(db, job_id)
    assert await heartbeat(client, job_id, token, extend_secs=60) == (200, {"status": "running"})
    row = await job_row(db, job_id)
    assert row["locked_until"] > await db.fetchval("SELECT now()")


async def test_the_holder_learns_of_a_cancel_and_the_lease_is_not_extended(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    assert await cancel(client, job_id) == 204
    before = (await job_row(db, job_id))["locked_until"]

    assert await heartbeat(client, job_id, token, extend_secs=3600) == (200, {"status": "cancelled"})

    row = await job_row(db, job_id)
    assert row["status"] == "cancelled"
    assert row["locked_until"] == before


@pytest.mark.parametrize(("outcome", "expected"), [("complete", "completed"), ("fail", "failed")])
async def test_the_holder_learns_the_terminal_status_after_reporting(api, db, outcome, expected):
    client = await api()
    job_id = await create_job(client, max_retries=0)
    _, token = await lease_one(client)
    if outcome == "complete":
        assert (await complete(client, job_id, token, {"ok": True}))[0] == 204
    else:
        assert (await fail(client, job_id, token, "nope"))[0] == 204
    assert await heartbeat(client, job_id, token) == (200, {"status": expected})
    assert (await job_row(db, job_id))["locked_until"] is None


async def test_a_stale_token_after_a_janitor_reclaim_is_409(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=2)
    _, token = await lease_one(client)
    await expire_lease(db, job_id)
    assert await janitor_of(client).reclaim_expired() == 1

    status, body = await heartbeat(client, job_id, token)

    assert status == 409
    assert body["error"].startswith("conflict: lease is no longer held")
    assert (await job_row(db, job_id))["status"] == "retrying"


async def test_a_stale_token_after_the_job_was_redelivered_is_409_and_the_new_holder_is_untouched(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=2, retry_delay_secs=0)
    _, old = await lease_one(client)
    assert (await fail(client, job_id, old, "flaky"))[0] == 204
    await db.execute("UPDATE queueflow.jobs SET scheduled_at = now() WHERE id = $1::uuid", job_id)
    _, new = await lease_one(client, lease_secs=30)
    deadline = (await job_row(db, job_id))["locked_until"]

    assert (await heartbeat(client, job_id, old, extend_secs=3600))[0] == 409

    row = await job_row(db, job_id)
    assert row["locked_until"] == deadline
    assert str(row["lease_token"]) == new
    assert await heartbeat(client, job_id, new) == (200, {"status": "running"})


@pytest.mark.parametrize("token", ["0b7e2a64-3c0f-4a8e-a1f2-6a51f0d4c9e3", "not-a-uuid", ""])
async def test_a_token_that_never_held_the_job_is_409(api, db, token):
    client = await api()
    job_id = await create_job(client)
    await lease_one(client)
    assert (await heartbeat(client, job_id, token, extend_secs=3600))[0] == 409


async def test_a_foreign_token_does_not_learn_a_finished_jobs_status(api):
    """Upstream answered any token with the status of a job that is not running; we refuse."""
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    assert (await complete(client, job_id, token))[0] == 204
    assert (await heartbeat(client, job_id, str(uuid.uuid4())))[0] == 409


async def test_a_pending_job_that_was_never_leased_cannot_be_heartbeated(api):
    client = await api()
    job_id = await create_job(client)
    assert (await heartbeat(client, job_id, str(uuid.uuid4())))[0] == 409


async def test_a_retrying_job_redelivered_after_due_rejects_the_first_holders_heartbeat(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=1)
    _, first = await lease_one(client)
    assert (await fail(client, job_id, first))[0] == 204
    await make_due(db, job_id)
    await lease_one(client)
    assert (await heartbeat(client, job_id, first))[0] == 409


@pytest.mark.parametrize("job_id", ["5d6f1c8e-8a53-4c59-9d55-0c3bdb1f0a11", "not-a-uuid"])
async def test_heartbeat_for_an_unknown_job_is_404(api, job_id):
    client = await api()
    status, body = await heartbeat(client, job_id, str(uuid.uuid4()))
    assert status == 404
    assert "error" in body


@pytest.mark.parametrize(
    "body",
    [
        {"extend_secs": 30},
        {"lease_token": "x"},
        {"lease_token": "x", "extend_secs": 0},
        {"lease_token": "x", "extend_secs": 3601},
        {"lease_token": "x", "extend_secs": "30"},
        {"lease_token": 1, "extend_secs": 30},
    ],
)
async def test_a_malformed_heartbeat_is_400(api, body):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    if body.get("lease_token") == "x":
        body = {**body, "lease_token": token}
    status, data = await post(client, f"/api/v1/jobs/{job_id}/heartbeat", body)
    assert status == 400, data


async def test_extend_secs_bounds_are_inclusive(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    assert (await heartbeat(client, job_id, token, extend_secs=1))[0] == 200
    assert (await heartbeat(client, job_id, token, extend_secs=3600))[0] == 200
    row = await job_row(db, job_id)
    assert row["locked_until"] - await db.fetchval("SELECT now()") > timedelta(seconds=3500)
