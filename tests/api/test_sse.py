"""GET /api/v1/jobs/{id}/events: one `status` event carrying the whole job per status change, the
first at once, and the stream ends after a terminal status. Errors come before the stream opens."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from tests.api.helpers import (
    ACME,
    DEV,
    GLOBEX,
    STRICT,
    complete_job,
    create_job,
    expect_error,
    fail_job,
    get_job,
    lease_one,
)

# A guard against hanging on a broken stream; never an assertion about speed.
GUARD_SECS = 30


class EventStream:
    """Reads `event:`/`data:` blocks from an open SSE response; comments are skipped."""

    def __init__(self, resp: Any) -> None:
        self.resp = resp

    async def next(self) -> tuple[str, dict[str, Any]] | None:
        """The next event as (name, data), or None when the stream has ended."""
        name, data = None, []
        async with asyncio.timeout(GUARD_SECS):
            while True:
                raw = await self.resp.content.readline()
                if not raw:
                    return None
                line = raw.decode().rstrip("\r\n")
                if line == "":
                    if name is not None or data:
                        return name or "message", json.loads("\n".join(data))
                    continue
                if line.startswith(":"):
                    continue
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    name = value
                elif field == "data":
                    data.append(value)

    async def rest(self) -> list[tuple[str, dict[str, Any]]]:
        events = []
        while (event := await self.next()) is not None:
            events.append(event)
        return events


async def _open(client, job_id: str, headers=DEV) -> EventStream:
    resp = await client.get(f"/api/v1/jobs/{job_id}/events", headers=headers)
    assert resp.status == 200, await resp.text()
    assert resp.content_type == "text/event-stream"
    return EventStream(resp)


async def test_finished_job_sends_one_completed_event_with_the_full_job_then_closes(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-sse"}, payload={"a": 1})
    await complete_job(client, job_id, await lease_one(client, "q-sse", job_id), {"done": True})
    stream = await _open(client, job_id)
    events = await stream.rest()
    assert [name for name, _ in events] == ["status"]
    [(_, job)] = events
    assert job == await get_job(client, job_id)
    assert (job["status"], job["result"], job["payload"]) == ("completed", {"done": True}, {"a": 1})


async def test_first_event_is_sent_at_once_with_the_current_status(api):
    client = await api()
    job_id = await create_job(client)
    stream = await _open(client, job_id)
    name, job = await stream.next()
    assert name == "status"
    assert (job["id"], job["status"]) == (job_id, "pending")
    stream.resp.close()


async def test_each_status_change_is_one_event_until_cancelled(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-chg", "max_retries": 3})
    stream = await _open(client, job_id)
    assert (await stream.next())[1]["status"] == "pending"

    token = await lease_one(client, "q-chg", job_id)
    name, job = await stream.next()
    assert (name, job["status"], job["delivery_count"]) == ("status", "running", 1)

    await fail_job(client, job_id, token, retryable=True, error="transient")
    name, job = await stream.next()
    assert (job["status"], job["retry_count"], job["error_message"]) == ("retrying", 1, "transient")

    assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)).status == 204
    name, job = await stream.next()
    assert job["status"] == "cancelled"
    assert await stream.next() is None  # closed after the terminal status


async def test_failed_job_ends_the_stream_with_a_failed_event(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-fail"})
    token = await lease_one(client, "q-fail", job_id)
    stream = await _open(client, job_id)
    assert (await stream.next())[1]["status"] == "running"
    await fail_job(client, job_id, token, retryable=False)
    _, job = await stream.next()
    assert (job["status"], job["error_message"]) == ("failed", "boom")
    assert await stream.next() is None


async def test_in_process_job_streams_to_completed_without_repeating_a_status(api):
    client = await api(mode="all")
    job_id = await create_job(client, task_name="echo", payload={"n": 7})
    events = await (await _open(client, job_id)).rest()
    statuses = [job["status"] for _, job in events]
    assert all(name == "status" for name, _ in events)
    assert statuses[-1] == "completed"
    assert set(statuses) <= {"pending", "running", "completed"}
    assert all(a != b for a, b in itertools.pairwise(statuses))
    assert events[-1][1]["result"] == {"n": 7, "echoed": True}


async def test_two_watchers_of_one_job_both_see_the_terminal_event(api):
    client = await api()
    job_id = await create_job(client)
    first, second = await _open(client, job_id), await _open(client, job_id)
    assert (await first.next())[1]["status"] == (await second.next())[1]["status"] == "pending"
    assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)).status == 204
    assert [j["status"] for _, j in await first.rest()] == ["cancelled"]
    assert [j["status"] for _, j in await second.rest()] == ["cancelled"]


async def test_unknown_job_is_404_json_before_the_stream_opens(api):
    client = await api()
    missing = "00000000-0000-4000-8000-000000000000"
    resp = await client.get(f"/api/v1/jobs/{missing}/events", headers=DEV)
    assert await expect_error(resp, 404) == f"job not found: {missing}"


async def test_another_tenants_job_is_404_before_the_stream_opens(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    resp = await client.get(f"/api/v1/jobs/{job_id}/events", headers=GLOBEX)
    assert await expect_error(resp, 404) == f"job not found: {job_id}"
    owner = await _open(client, job_id, ACME)
    assert (await owner.next())[1]["tenant_id"] == "acme"
    owner.resp.close()


async def test_events_need_a_tenant_credential(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    await expect_error(await client.get(f"/api/v1/jobs/{job_id}/events"), 401)
