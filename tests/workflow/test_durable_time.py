"""Durable time in workflows (issue 15): sleep steps, wait-for-event steps, and the events API.

A sleep or a wait runs no job: the step is `running` with its wake-up (and the key it waits for) in
its row. The clock is controlled by moving a wake-up into the past and telling the timers (the
NOTIFY the server itself sends when it arms one), so no test waits for a real sleep to end."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.api import database_of
from tests.workflow.helpers import (
    DEV,
    create,
    get,
    manual,
    post,
    run_step,
    statuses,
    steps,
    wait_status,
    wait_step,
    wait_step_job,
    workflow,
)

TENANTS = "ta:acme,tb:globex,tr:acme:ro"
A = {"Authorization": "Bearer ta"}
B = {"Authorization": "Bearer tb"}
READ_ONLY = {"Authorization": "Bearer tr"}
W = {"Authorization": "Bearer w"}


def sleep(name: str, after: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, **fields}
    if after:
        body["depends_on"] = after
    return body


def wait(name: str, key: str, after: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    return sleep(name, after, wait_for_event={"key": key}, **fields)


async def send(client: Any, key: str, payload: dict[str, Any] | None = None, headers=DEV) -> dict[str, Any]:
    status, body = await post(client, "/api/v1/events", {"key": key, "payload": payload or {}}, headers)
    assert status == 202, body
    assert set(body) == {"event_id", "delivered"}
    return dict(body)


async def wake_now(client: Any, wf_id: str, step_name: str) -> None:
    """The controlled clock: the step's wake-up is due now, and the timers are told."""
    pool = database_of(client).pool
    moved = await pool.fetchval(
        "UPDATE queueflow.workflow_steps SET wake_at = now() - interval '1 millisecond'"
        " WHERE workflow_id = $1 AND name = $2 AND wake_at IS NOT NULL RETURNING name",
        wf_id,
        step_name,
    )
    assert moved == step_name
    await pool.execute("SELECT pg_notify('queueflow_timers', '')")


async def test_a_sleep_step_runs_no_job_and_completes_when_its_time_comes(api):
    client = await api(mode="all")
    wf_id = await create(client, [sleep("nap", sleep_secs=3600), manual("after", after=["nap"])])
    state = await wait_step(client, wf_id, "nap", "running")
    assert "job_id" not in state
    wake = datetime.fromisoformat(state["wake_at"].replace("Z", "+00:00"))
    assert timedelta(minutes=59) < wake - datetime.now(UTC) <= timedelta(hours=1)
    assert await database_of(client).pool.fetchval("SELECT count(*) FROM queueflow.jobs") == 0

    await wake_now(client, wf_id, "nap")
    await wait_step(client, wf_id, "nap", "completed")
    context = (await workflow(client, wf_id))["context"]
    slept = datetime.fromisoformat(context["nap"]["slept_until"].replace("Z", "+00:00"))
    assert slept <= datetime.now(UTC)
    await run_step(client, wf_id, "after")  # its dependent runs
    assert (await wait_status(client, wf_id))["status"] == "completed"


async def test_sleep_until_a_past_instant_completes_at_once_and_a_future_one_waits(api):
    client = await api(mode="all")
    past = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    wf_id = await create(client, [sleep("done", sleep_until=past)])
    assert (await wait_status(client, wf_id))["status"] == "completed"
    assert (await workflow(client, wf_id))["context"]["done"]["slept_until"].endswith("Z")

    future = datetime.now(UTC) + timedelta(days=2)
    wf_id = await create(client, [sleep("later", sleep_until=future.isoformat())])
    state = await wait_step(client, wf_id, "later", "running")
    assert abs(datetime.fromisoformat(state["wake_at"].replace("Z", "+00:00")) - future) < timedelta(
        seconds=1
    )


async def test_an_event_during_the_wait_completes_the_step_with_its_payload(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [wait("approve", "approval:1"), manual("ship", after=["approve"])], context={"order": 1}
    )
    state = await wait_step(client, wf_id, "approve", "running")
    assert state["event_key"] == "approval:1" and "wake_at" not in state  # no time-out: no wake-up
    sent = await send(client, "approval:1", {"by": "ada"})
    assert sent["delivered"] == 1
    await wait_step(client, wf_id, "approve", "completed")
    assert (await workflow(client, wf_id))["context"]["approve"] == {"by": "ada"}
    await wait_step_job(client, wf_id, "ship")
    # The step is done: the same key again changes nothing.
    assert (await send(client, "approval:1", {"by": "bob"}))["delivered"] == 0
    assert (await workflow(client, wf_id))["context"]["approve"] == {"by": "ada"}


async def test_an_event_before_the_wait_is_kept_and_received_when_the_step_starts(api):
    client = await api(mode="all")
    early = await send(client, "invoice:9", {"paid": True})
    assert early["delivered"] == 0
    wf_id = await create(
        client,
        [manual("first"), wait("paid", "invoice:{{context.invoice}}", after=["first"])],
        context={"invoice": 9},
    )
    await run_step(client, wf_id, "first")
    assert (await wait_status(client, wf_id))["status"] == "completed"
    assert (await workflow(client, wf_id))["context"]["paid"] == {"paid": True}

    status, listed = await get(client, "/api/v1/events?key=invoice:9")
    assert status == 200
    [kept] = listed["events"]
    assert kept["event_id"] == early["event_id"] and kept["payload"] == {"paid": True}
    assert kept["delivered"] == 0 and kept["key"] == "invoice:9"


async def test_a_wait_that_starts_after_several_kept_events_receives_the_newest(api):
    client = await api(mode="all")
    for n in (1, 2, 3):
        assert (await send(client, "status:5", {"n": n}))["delivered"] == 0
    wf_id = await create(client, [wait("w", "status:5")])
    assert (await wait_status(client, wf_id))["status"] == "completed"
    assert (await workflow(client, wf_id))["context"]["w"] == {"n": 3}


async def test_placeholders_resolve_from_the_context_and_a_missing_one_fails_the_step(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [wait("w", "order:{{context.order.id}}:{{ context.kind }}")],
        context={"order": {"id": 42}, "kind": "gift"},
    )
    state = await wait_step(client, wf_id, "w", "running")
    assert state["event_key"] == "order:42:gift"
    assert (await send(client, "order:42:gift"))["delivered"] == 1
    assert (await wait_status(client, wf_id))["status"] == "completed"

    wf_id = await create(client, [wait("w", "order:{{context.order.missing}}")], context={"order": {}})
    ended = await wait_status(client, wf_id)
    assert ended["status"] == "failed"
    assert "{{context.order.missing}}" in (await steps(client, wf_id))["w"]["error"]


@pytest.mark.parametrize(
    ("policy", "workflow_status", "dependent"),
    [
        ("halt", "failed", "cancelled"),
        ("skip", "partially_failed", "skipped"),
        ("continue", "partially_failed", "running"),
    ],
)
async def test_a_time_out_fails_the_wait_with_event_timeout_and_its_policy_applies(
    api, policy, workflow_status, dependent
):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            wait("w", "never", timeout_secs=3600, on_failure=policy),
            manual("next", after=["w"]),
            manual("other"),
        ],
    )
    state = await wait_step(client, wf_id, "w", "running")
    assert state["wake_at"] and state["event_key"] == "never"
    await wake_now(client, wf_id, "w")
    failed = await wait_step(client, wf_id, "w", "failed")
    assert failed["error"] == "event_timeout"
    await wait_step(client, wf_id, "next", dependent)
    assert (await send(client, "never"))["delivered"] == 0  # a timed-out wait takes no event
    if policy != "halt":
        await run_step(client, wf_id, "other")
        if dependent == "running":
            await run_step(client, wf_id, "next")
    assert (await wait_status(client, wf_id))["status"] == workflow_status


async def test_cancelling_cancels_sleeps_and_waits_and_retrying_re_arms_them(api):
    client = await api(mode="all")
    wf_id = await create(client, [sleep("nap", sleep_secs=600), wait("w", "go")])
    await wait_step(client, wf_id, "nap", "running")
    await wait_step(client, wf_id, "w", "running")
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status in (200, 202, 204)
    assert statuses(await steps(client, wf_id)) == {"nap": "cancelled", "w": "cancelled"}
    assert (await send(client, "go"))["delivered"] == 0  # nothing waits any more
    # (the kept event from the line above would complete a re-armed wait at once: expire it)
    await database_of(client).pool.execute("DELETE FROM queueflow.events")

    status, body = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status in (200, 202, 204), body
    nap = await wait_step(client, wf_id, "nap", "running")
    assert nap["wake_at"]
    assert (await wait_step(client, wf_id, "w", "running"))["event_key"] == "go"
    assert (await send(client, "go", {"n": 2}))["delivered"] == 1
    await wait_step(client, wf_id, "w", "completed")
    await wake_now(client, wf_id, "nap")
    assert (await wait_status(client, wf_id))["status"] == "completed"


async def test_events_are_per_tenant_and_need_write_access(api):
    client = await api(dev=False, worker_token="w", api_keys=TENANTS, mode="all")
    wf_id = await create(client, [wait("w", "k")], headers=A)
    await wait_step_job_free(client, wf_id)
    assert (await send(client, "k", headers=B))["delivered"] == 0  # another tenant's key
    status, body = await post(client, "/api/v1/events", {"key": "k"}, READ_ONLY)
    assert status == 403, body
    status, body = await post(client, "/api/v1/events", {"key": "k"}, W)
    assert status in (401, 403), body
    assert (await send(client, "k", headers=A))["delivered"] == 1
    status, listed = await get(client, "/api/v1/events", B)
    assert status == 200 and [e["key"] for e in listed["events"]] == ["k"]
    status, listed = await get(client, "/api/v1/events", READ_ONLY)
    assert status == 200 and [e["delivered"] for e in listed["events"]] == [1]


async def wait_step_job_free(client: Any, wf_id: str) -> None:
    """A waiting step as a tenant sees it (through the route, with that tenant's key)."""
    status, body = await get(client, f"/api/v1/workflows/{wf_id}/steps", A)
    assert status == 200 and body["steps"][0]["status"] == "running", body


async def test_signals_and_waits_racing_never_lose_a_wake_up(api):
    client = await api(mode="all")
    n = 30
    ids = await asyncio.gather(*(create(client, [wait("w", f"race:{i}")], name=f"r{i}") for i in range(n)))
    # The events go out while those workflows' steps start waiting: each event is seen by its wait
    # either as a kept event or as a delivery, never by neither.
    await asyncio.gather(*(send(client, f"race:{i}", {"i": i}) for i in range(n)))
    for i, wf_id in enumerate(ids):
        assert (await wait_status(client, wf_id))["status"] == "completed"
        assert (await workflow(client, wf_id))["context"]["w"] == {"i": i}


@pytest.mark.parametrize(
    "bad_step",
    [
        {"name": "s", "sleep_secs": 0},
        {"name": "s", "sleep_secs": 31_536_001},
        {"name": "s", "sleep_secs": "5"},
        {"name": "s", "sleep_secs": 5, "sleep_until": "2030-01-01T00:00:00Z"},
        {"name": "s", "sleep_secs": 5, "task_name": "echo"},
        {"name": "s", "sleep_until": "not a time"},
        {"name": "s", "task_name": "echo", "timeout_secs": 5},
        {"name": "s", "sleep_secs": 5, "timeout_secs": 5},
        {"name": "s", "wait_for_event": {"key": ""}},
        {"name": "s", "wait_for_event": {"key": "x" * 257}},
        {"name": "s", "wait_for_event": {"key": "a{{b}}"}},
        {"name": "s", "wait_for_event": {"key": "a{{context.b"}},
        {"name": "s", "wait_for_event": {}},
        {"name": "s", "wait_for_event": {"key": "k", "extra": 1}},
        {"name": "s", "wait_for_event": {"key": "k"}, "timeout_secs": 0},
        {"name": "s", "wait_for_event": {"key": "k"}, "task_name": "echo"},
        {"name": "s", "sleep_secs": 5, "fan_out": {"path": "items"}},
    ],
)
async def test_a_bad_sleep_or_wait_step_is_a_400(api, bad_step):
    client = await api()
    status, body = await post(client, "/api/v1/workflows", {"name": "w", "steps": [bad_step]})
    assert status == 400, body
    assert body["error"]


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"key": ""},
        {"key": "x" * 257},
        {"key": 5},
        {"key": "k", "payload": [1]},
        {"key": "k", "extra": 1},
        {"key": "a\u0000b"},
    ],
)
async def test_a_bad_event_is_a_400_with_the_error_body(api, bad):
    client = await api()
    status, body = await post(client, "/api/v1/events", bad)
    assert status == 400, body
    assert body["error"]
    status, body = await get(client, "/api/v1/events?limit=many")
    assert status == 400 and body["error"]
