"""Cron: the API, and firing by the janitor (exactly once per occurrence, catch-up collapsing)."""

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from shared.domain.cron import next_after
from tests.support.api import janitor_of
from tests.support.waiting import eventually

AUTH = {"Authorization": "Bearer dev"}


async def create(client, **body):
    body.setdefault("name", "nightly")
    body.setdefault("cron_expr", "0 2 * * *")
    body.setdefault("task_name", "echo")
    return await client.post("/api/v1/cron", json=body, headers=AUTH)


def test_five_field_expressions_are_utc_and_strictly_after_the_reference():
    at = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert next_after("*/5 * * * *", at) == datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    assert next_after("30 3 * * *", datetime(2026, 1, 1, 4, 0, tzinfo=UTC)) == datetime(
        2026, 1, 2, 3, 30, tzinfo=UTC
    )


def test_six_field_expressions_lead_with_seconds():
    at = datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert next_after("30 * * * * *", at) == datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)


async def test_invalid_expression_is_400_naming_it(api):
    client = await api()
    resp = await create(client, cron_expr="61 * * * *")
    assert resp.status == 400
    assert "61 * * * *" in (await resp.json())["error"]


async def test_create_get_list_pause_resume_delete(api):
    client = await api()
    resp = await create(client, payload={"a": 1}, queue="reports", config={"max_retries": 1})
    assert resp.status == 201
    cron_id = (await resp.json())["cron_id"]
    got = await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json()
    assert got["enabled"] is True and got["queue_name"] == "reports" and got["config"] == {"max_retries": 1}
    assert datetime.fromisoformat(got["next_run_at"]).hour == 2
    listed = await (await client.get("/api/v1/cron?include_total=true", headers=AUTH)).json()
    assert listed["total"] == 1 and listed["crons"][0]["id"] == cron_id
    assert (await client.post(f"/api/v1/cron/{cron_id}/pause", headers=AUTH)).status == 204
    assert (await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json())["enabled"] is False
    assert (await client.post(f"/api/v1/cron/{cron_id}/resume", headers=AUTH)).status == 204
    assert (await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json())["enabled"] is True
    assert (await client.delete(f"/api/v1/cron/{cron_id}", headers=AUTH)).status == 204
    assert (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).status == 404


async def test_duplicate_name_within_a_tenant_is_409_but_another_tenant_may_use_it(api):
    client = await api(dev=False, worker_token="w", api_keys="ka:acme,kb:globex")
    assert (
        await client.post(
            "/api/v1/cron",
            json={"name": "n", "cron_expr": "* * * * *", "task_name": "echo"},
            headers={"Authorization": "Bearer ka"},
        )
    ).status == 201
    again = await client.post(
        "/api/v1/cron",
        json={"name": "n", "cron_expr": "* * * * *", "task_name": "echo"},
        headers={"Authorization": "Bearer ka"},
    )
    assert again.status == 409
    other = await client.post(
        "/api/v1/cron",
        json={"name": "n", "cron_expr": "* * * * *", "task_name": "echo"},
        headers={"Authorization": "Bearer kb"},
    )
    assert other.status == 201
    foreign = (await other.json())["cron_id"]
    assert (await client.get(f"/api/v1/cron/{foreign}", headers={"Authorization": "Bearer ka"})).status == 404


async def force_due(db, cron_id, ago_secs):
    await db.execute(
        "UPDATE queueflow.cron_schedules SET next_run_at = now() - make_interval(secs => $2) WHERE id = $1",
        cron_id,
        ago_secs,
    )


async def fired_jobs(db, cron_id):
    return await db.fetch("SELECT * FROM queueflow.jobs WHERE metadata->>'cron_id' = $1", cron_id)


async def test_a_due_occurrence_fires_once_and_carries_cron_metadata(api, db):
    client = await api()
    cron_id = (await (await create(client, payload={"k": 2})).json())["cron_id"]
    await force_due(db, cron_id, 1)
    janitor = janitor_of(client)
    assert await janitor.fire_crons() == 1
    assert await janitor.fire_crons() == 0  # a second tick at the same instant fires nothing
    [job] = await fired_jobs(db, cron_id)
    assert (
        job["task_name"] == "echo"
        and json.loads(job["payload"]) == {"k": 2}
        and job["tenant_id"] == "tenant1"
    )
    assert json.loads(job["metadata"])["cron_name"] == "nightly"
    row = await db.fetchrow("SELECT * FROM queueflow.cron_schedules WHERE id = $1", cron_id)
    assert row["last_enqueued_at"] is not None and row["next_run_at"] > datetime.now(UTC)


async def test_missed_occurrences_collapse_into_one_catch_up_firing(api, db):
    client = await api()
    cron_id = (await (await create(client, cron_expr="* * * * *")).json())["cron_id"]
    await force_due(db, cron_id, 3600)  # an hour of downtime: sixty missed minutes
    assert await janitor_of(client).fire_crons() == 1
    assert len(await fired_jobs(db, cron_id)) == 1


async def test_a_paused_schedule_does_not_fire_and_resume_does_not_catch_up(api, db):
    client = await api()
    cron_id = (await (await create(client, cron_expr="* * * * *")).json())["cron_id"]
    await client.post(f"/api/v1/cron/{cron_id}/pause", headers=AUTH)
    await force_due(db, cron_id, 600)
    assert await janitor_of(client).fire_crons() == 0
    await client.post(f"/api/v1/cron/{cron_id}/resume", headers=AUTH)
    assert await janitor_of(client).fire_crons() == 0  # the next firing is in the future
    row = await db.fetchrow("SELECT next_run_at FROM queueflow.cron_schedules WHERE id = $1", cron_id)
    assert row["next_run_at"] > datetime.now(UTC)
    assert await fired_jobs(db, cron_id) == []


async def test_deleting_a_schedule_keeps_its_jobs(api, db):
    client = await api()
    cron_id = (await (await create(client)).json())["cron_id"]
    await force_due(db, cron_id, 1)
    await janitor_of(client).fire_crons()
    assert (await client.delete(f"/api/v1/cron/{cron_id}", headers=AUTH)).status == 204
    assert len(await fired_jobs(db, cron_id)) == 1


async def test_concurrent_janitor_ticks_fire_each_occurrence_exactly_once(api, db):
    clients = [await api() for _ in range(3)]
    cron_id = (await (await create(clients[0], cron_expr="* * * * *")).json())["cron_id"]
    await force_due(db, cron_id, 1)
    fired = await asyncio.gather(*(janitor_of(c).fire_crons() for c in clients for _ in range(3)))
    assert sum(fired) == 1
    assert len(await fired_jobs(db, cron_id)) == 1


@pytest.mark.timeout(60)
async def test_every_second_schedule_fires_with_two_janitor_processes(database_url, service, db):
    janitors = [
        await service(database_url, mode="janitor", extra_args=["--janitor-interval-secs", "0.2"])
        for _ in range(2)
    ]
    api_proc = await service(database_url, mode="api")
    import aiohttp

    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            f"{api_proc.base_url}/api/v1/cron",
            headers=AUTH,
            json={"name": "tick", "cron_expr": "* * * * * *", "task_name": "echo"},
        )
        cron_id = (await resp.json())["cron_id"]

    async def three_fired():
        return len(await fired_jobs(db, cron_id)) >= 3

    await eventually(three_fired, timeout=20)
    jobs = await fired_jobs(db, cron_id)
    dues = [json.loads(j["metadata"])["cron_due_at"] for j in jobs]
    assert len(dues) == len(set(dues)), "an occurrence was enqueued twice"
    assert all(j.returncode is None for j in janitors)


async def test_first_firing_is_the_next_occurrence_after_creation(api):
    client = await api()
    before = datetime.now(UTC)
    cron_id = (await (await create(client, cron_expr="*/5 * * * *")).json())["cron_id"]
    got = await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json()
    next_run = datetime.fromisoformat(got["next_run_at"])
    assert before < next_run <= before + timedelta(minutes=5)
    assert next_run.minute % 5 == 0 and next_run.second == 0
