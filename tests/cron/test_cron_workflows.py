"""Cron schedules that start workflows (issue 15): `workflow` instead of `task_name`; each
occurrence starts one workflow named `<schedule name>@<occurrence>`, exactly once per occurrence
across every janitor, in the transaction that moves the schedule's alarm."""

from __future__ import annotations

import asyncio
from datetime import datetime

import asyncpg
import pytest

from tests.support.api import database_of, janitor_of
from tests.support.waiting import eventually

AUTH = {"Authorization": "Bearer dev"}
FLOW = {
    "name": "report",
    "context": {"kind": "daily"},
    "steps": [
        {"name": "gather", "task_name": "echo", "payload": {"n": 1}},
        {"name": "send", "task_name": "echo", "depends_on": ["gather"]},
    ],
}


async def create(client, **body):
    body.setdefault("name", "nightly")
    body.setdefault("cron_expr", "0 2 * * *")
    return await client.post("/api/v1/cron", json=body, headers=AUTH)


async def test_a_workflow_schedule_is_stored_normalised_and_fires_one_named_workflow(api):
    client = await api()
    resp = await create(client, workflow=FLOW)
    assert resp.status == 201, await resp.text()
    cron_id = (await resp.json())["cron_id"]
    got = await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json()
    assert "task_name" not in got
    assert got["workflow"]["name"] == "report" and got["workflow"]["steps"][1]["depends_on"] == ["gather"]

    pool = database_of(client).pool
    due = await pool.fetchval(
        "UPDATE queueflow.cron_schedules SET next_run_at = date_trunc('second', now()) - interval '1 second'"
        " RETURNING next_run_at"
    )
    assert await janitor_of(client).fire_crons() == 1
    assert await janitor_of(client).fire_crons() == 0  # moved on: the occurrence fired once
    [wf] = (await (await client.get("/api/v1/workflows", headers=AUTH)).json())["workflows"]
    assert wf["name"] == f"nightly@{due.isoformat().replace('+00:00', 'Z')}"
    assert wf["status"] == "running" and wf["context"] == {"kind": "daily"}
    steps = (await (await client.get(f"/api/v1/workflows/{wf['id']}/steps", headers=AUTH)).json())["steps"]
    assert steps[0]["name"] == "gather" and steps[0].get("job_id")  # its root step was scheduled
    assert await pool.fetchval("SELECT count(*) FROM queueflow.jobs") == 1
    after = await (await client.get(f"/api/v1/cron/{cron_id}", headers=AUTH)).json()
    assert datetime.fromisoformat(after["next_run_at"].replace("Z", "+00:00")) > due


@pytest.mark.parametrize(
    "body",
    [
        {"task_name": "echo", "workflow": FLOW},  # both
        {},  # neither
        {"workflow": FLOW, "payload": {"a": 1}},
        {"workflow": FLOW, "queue": "q"},
        {"workflow": {"name": "w", "steps": []}},
        {"workflow": {"name": "w", "steps": [{"name": "a", "task_name": "t", "depends_on": ["a"]}]}},
        {"workflow": {"name": "w", "steps": [{"name": "a"}]}},
        {"workflow": "report"},
    ],
)
async def test_a_bad_workflow_schedule_is_a_400(api, body):
    client = await api()
    resp = await create(client, **body)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]


async def test_every_occurrence_starts_exactly_one_workflow_across_two_janitors_and_two_advancers(
    api, database_url, service
):
    client = await api()
    flow = {"name": "tick", "steps": [{"name": "pause", "sleep_until": "2000-01-01T00:00:00Z"}]}
    resp = await create(client, name="every-second", cron_expr="* * * * * *", workflow=flow)
    assert resp.status == 201, await resp.text()
    for mode in ("janitor", "janitor", "workflow", "workflow"):
        await service(database_url, mode=mode)
    conn = await asyncpg.connect(database_url)
    try:

        async def several() -> bool:
            return await conn.fetchval("SELECT count(*) FROM queueflow.workflows") >= 4

        await eventually(several, timeout=60, interval=0.2)
        await conn.execute("UPDATE queueflow.cron_schedules SET enabled = false")
        await asyncio.sleep(0)  # (a firing in flight commits or rolls back on its own)
        rows = await conn.fetch("SELECT name, count(*) AS n FROM queueflow.workflows GROUP BY name")
        assert rows and all(r["n"] == 1 for r in rows), rows  # no occurrence started twice
        for r in rows:
            assert r["name"].startswith("every-second@") and r["name"].endswith("Z")

        async def all_done() -> bool:
            return await conn.fetchval("SELECT bool_and(status = 'completed') FROM queueflow.workflows")

        await eventually(all_done, timeout=30, interval=0.2)  # each ran (its past sleep ends at once)
    finally:
        await conn.close()
