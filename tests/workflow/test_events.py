"""GET /api/v1/workflows/{id}/events: one `status` event (a WorkflowEvent) per change, ending with
the terminal one, after which the stream closes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
from aiohttp import ClientResponse

from tests.support.waiting import eventually
from tests.workflow.helpers import (
    DEV,
    complete,
    create,
    fail,
    lease,
    lease_step,
    manual,
    post,
    step,
    wait_status,
    wait_step_job,
)


class EventStream:
    def __init__(self, resp: ClientResponse) -> None:
        self.resp = resp

    async def next(self, within: float = 20.0) -> dict[str, Any] | None:
        """The next event's data, or None at the end of the stream (comments are skipped)."""
        name, data = None, []
        async with asyncio.timeout(within):
            while True:
                raw = await self.resp.content.readline()
                if not raw:
                    assert name is None and not data, "stream ended inside an event"
                    return None
                line = raw.decode().rstrip("\n")
                if line.startswith(":"):
                    continue
                if line == "":
                    if name is None and not data:
                        continue
                    assert name == "status", name
                    return dict(json.loads("\n".join(data)))
                field, _, value = line.partition(": ")
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)


async def _open(client, wf_id: str) -> EventStream:
    resp = await client.get(f"/api/v1/workflows/{wf_id}/events", headers=DEV)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    return EventStream(resp)


def _steps(event: dict) -> dict[str, str]:
    return {s["name"]: s["status"] for s in event["steps"]}


async def test_events_report_each_change_until_the_terminal_status(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a"), manual("b", after=["a"])])
    await wait_step_job(client, wf_id, "a")
    stream = await _open(client, wf_id)

    first = await stream.next()
    assert first["workflow_id"] == wf_id and first["status"] == "running"
    assert _steps(first) == {"a": "running", "b": "pending"}
    assert "error_message" not in first

    job_a, token_a = await lease_step(client, wf_id, "a")
    await complete(client, job_a["id"], token_a, {"x": 1})
    second = await stream.next()
    assert second["status"] == "running" and _steps(second) == {"a": "completed", "b": "running"}
    assert [s.get("job_id") is not None for s in second["steps"]] == [True, True]

    job_b, token_b = await lease_step(client, wf_id, "b")
    await complete(client, job_b["id"], token_b)
    last = await stream.next()
    assert last["status"] == "completed" and _steps(last) == {"a": "completed", "b": "completed"}
    assert await stream.next() is None  # closed after the terminal event


async def test_events_carry_fan_out_progress_and_the_error_of_a_failure(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("fan", fan_out={"path": "xs"})], context={"xs": [1, 2]})
    await wait_step_job(client, wf_id, "fan")
    stream = await _open(client, wf_id)
    first = await stream.next()
    assert first["steps"][0]["fan_out"] == {"total": 2, "completed": 0, "failed": 0}

    children = await lease(client, max_jobs=2)
    assert len(children) == 2
    (c1, t1), (c2, t2) = children
    await complete(client, c1["id"], t1)
    progress = await stream.next()
    assert progress["status"] == "running"
    assert progress["steps"][0]["fan_out"] == {"total": 2, "completed": 1, "failed": 0}
    await fail(client, c2["id"], t2, "nope")
    last = await stream.next()
    assert last["status"] == "failed"
    assert last["error_message"].startswith("step 'fan' failed: ")
    assert last["steps"][0]["status"] == "failed"
    assert last["steps"][0]["fan_out"] == {"total": 2, "completed": 1, "failed": 1}
    assert await stream.next() is None


async def test_events_of_a_finished_workflow_are_one_terminal_event(api):
    client = await api(mode="all")
    wf_id = await create(client, [step("a")])
    await wait_status(client, wf_id, "completed")
    stream = await _open(client, wf_id)
    only = await stream.next()
    assert only["status"] == "completed" and _steps(only) == {"a": "completed"}
    assert await stream.next() is None


async def test_events_report_a_cancellation(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a")])
    await wait_step_job(client, wf_id, "a")
    stream = await _open(client, wf_id)
    assert (await stream.next())["status"] == "running"
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204
    last = await stream.next()
    assert last["status"] == "cancelled" and _steps(last) == {"a": "cancelled"}
    assert await stream.next() is None


async def test_a_stream_opened_while_an_advance_holds_the_workflow_opens_without_a_deadlock(
    api, database_url
):
    """Opening a stream flags the workflow, then its steps: the order in which the advancer locks
    them. (One statement flagging both took the steps first, and deadlocked with an advance
    holding the workflow and asking for a step: the stream answered 500.)"""
    client = await api(mode="all")
    wf_id = await create(client, [manual("a"), manual("b", after=["a"])])
    await wait_step_job(client, wf_id, "a")
    other = await asyncpg.connect(database_url)
    try:
        tx = other.transaction()
        await tx.start()
        # an advance: the workflow first ...
        await other.execute("SELECT 1 FROM queueflow.workflows WHERE id = $1 FOR UPDATE", wf_id)
        opening = asyncio.ensure_future(client.get(f"/api/v1/workflows/{wf_id}/events", headers=DEV))
        await eventually(
            lambda: other.fetchval(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
            )
        )
        # ... then its steps, while the stream waits
        await other.execute("SELECT 1 FROM queueflow.workflow_steps WHERE workflow_id = $1 FOR UPDATE", wf_id)
        await tx.rollback()
        resp = await opening
        assert resp.status == 200, await resp.text()
        stream = EventStream(resp)
        first = await stream.next()
        assert first["workflow_id"] == wf_id and first["status"] == "running"
        resp.close()
    finally:
        await other.close()
