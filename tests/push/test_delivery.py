"""Push deliveries to a real aiohttp receiver on loopback (docs/push.md): what a delivery carries
(the lease answer's job, its lease token and attempt, the Standard Webhooks headers, the trace
context, static headers) and what each answer does to the job. One in-process `--mode all` app
(its api, janitor, workflow advancer and pusher), with --push-allow-cidrs 127.0.0.0/8."""

from __future__ import annotations

import asyncio
import base64
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest
from aiohttp import web

from tests.protocol.helpers import AUTH, finished, get_job, post, reaches
from tests.push.receiver import Received, verify
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
async def client(api):
    return await api(
        mode="all", push_allow_cidrs=("127.0.0.0/8",), janitor_interval_secs=0.2, worker_poll_secs=1.0
    )


async def bind(client, url: str, queue: str = "pushed", **more: Any) -> dict[str, Any]:
    body = {"name": more.pop("name", queue), "url": url, "queues": [queue], **more}
    status, made = await post(client, "/api/v1/push-endpoints", body)
    assert status == 201, made
    return dict(made)


async def enqueue(client, queue: str = "pushed", headers: dict[str, str] | None = None, **config: Any) -> str:
    resp = await client.post(
        "/api/v1/jobs",
        json={"task_name": "hook", "payload": {"n": 1}, "config": {"queue": queue, **config}},
        headers={**AUTH, **(headers or {})},
    )
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["job_id"])


async def attempts(client, job_id: str) -> list[dict[str, Any]]:
    resp = await client.get(f"/api/v1/jobs/{job_id}/attempts", headers=AUTH)
    assert resp.status == 200, await resp.text()
    return list((await resp.json())["attempts"])


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def answering(status: int, body: Any = None, **headers: str):
    async def answer(_: Received) -> web.StreamResponse:
        if body is None:
            return web.Response(status=status, headers=headers)
        if isinstance(body, str):
            return web.Response(status=status, text=body, headers=headers)
        return web.json_response(body, status=status, headers=headers)

    return answer


async def test_a_pusher_with_no_endpoint_starts_delivering_when_one_is_announced(api, receivers):
    # A safety poll far longer than the test: only the endpoint's announcement can start it.
    client = await api(mode="all", push_allow_cidrs=("127.0.0.0/8",), worker_poll_secs=3600.0)
    receiver = await receivers()
    await bind(client, receiver.url)
    job = await finished(client, await enqueue(client))
    assert job["status"] == "completed" and len(receiver.received) == 1


async def test_a_2xx_json_answer_completes_the_job_with_it_as_the_result(client, receivers):
    receiver = await receivers(answering(200, {"resized": True}))
    made = await bind(client, receiver.url, headers={"X-Api-Key": "static"})
    job_id = await enqueue(client, headers={"traceparent": TRACEPARENT})
    job = await finished(client, job_id)
    assert job["status"] == "completed" and job["result"] == {"resized": True}

    [got] = receiver.received
    assert set(got.body) == {"job", "lease_token", "attempt"}
    assert got.body["attempt"] == 1 and got.job_id == job_id
    # the job exactly as the lease answer carries it
    assert got.body["job"]["status"] == "running" and got.body["job"]["payload"] == {"n": 1}
    assert got.body["job"]["delivery_count"] == 1 and got.body["job"]["queue_name"] == "pushed"
    assert got.headers["content-type"] == "application/json"
    assert got.headers["webhook-id"] == f"msg_{job_id.replace('-', '')}_1"
    assert got.headers["webhook-timestamp"].isdigit()
    assert got.headers["traceparent"] == TRACEPARENT
    assert got.headers["x-api-key"] == "static"
    assert verify(made["secret"], got)
    assert not verify("whsec_" + "A" * 44, got)  # another secret does not verify it
    tampered = Received(got.headers, got.raw.replace(b'"n":1', b'"n":2'))
    assert not verify(made["secret"], tampered)

    [attempt] = await attempts(client, job_id)
    assert attempt["outcome"] == "completed"
    assert attempt["delivery"]["status"] == 200 and attempt["delivery"]["outcome"] == "completed"
    assert attempt["delivery"]["body"] == '{"resized": true}'
    assert attempt["delivery"]["latency_ms"] >= 0


async def test_an_empty_2xx_answer_completes_the_job_with_a_null_result(client, receivers):
    receiver = await receivers(answering(204))
    await bind(client, receiver.url)
    job = await finished(client, await enqueue(client))
    assert job["status"] == "completed" and job.get("result") is None


async def test_a_500_is_retried_with_the_jobs_backoff_and_then_completes(client, receivers, db):
    answers = iter([answering(500, "upstream down"), answering(200, {"second": True})])

    async def answer(got: Received) -> web.StreamResponse:
        return await next(answers)(got)

    receiver = await receivers(answer)
    await bind(client, receiver.url)
    job_id = await enqueue(client, retry_delay_secs=1, retry_backoff="fixed", jitter_factor=0)
    job = await eventually(lambda: _status(client, job_id, "completed"), timeout=30)
    assert job["result"] == {"second": True} and job["delivery_count"] == 2 and job["retry_count"] == 1

    first, second = receiver.received
    assert first.headers["webhook-id"] != second.headers["webhook-id"]
    assert second.body["attempt"] == 2
    failed, done = await attempts(client, job_id)
    assert failed["outcome"] == "retry" and "HTTP 500" in failed["error_message"]
    assert failed["delivery"]["status"] == 500 and failed["delivery"]["body"] == "upstream down"
    assert done["outcome"] == "completed"
    # the backoff: the second delivery's job was due a second after the first attempt ended
    assert (at(second.body["job"]["scheduled_at"]) - at(failed["ended_at"])).total_seconds() >= 0.9
    # the retry counts in the stats rollup as a leased job's does (captured, or already rolled up)
    retried = await db.fetchval(
        "SELECT sum(retried) FROM (SELECT retried FROM queueflow.stats_captures WHERE queue_name = 'pushed'"
        " UNION ALL SELECT retried FROM queueflow.stats_minutes WHERE queue_name = 'pushed' AND source = 1) c"
    )
    assert retried == 1


async def _status(client, job_id: str, status: str) -> dict[str, Any] | None:
    job = await get_job(client, job_id)
    return job if job["status"] == status else None


async def test_a_429s_retry_after_is_the_retry_delay(client, receivers):
    receiver = await receivers(answering(429, {"slow": "down"}, **{"Retry-After": "3600"}))
    await bind(client, receiver.url)
    job_id = await enqueue(client, retry_delay_secs=5)
    job = await reaches(client, job_id, "retrying")
    [attempt] = await attempts(client, job_id)
    assert attempt["delivery"]["status"] == 429 and "HTTP 429" in job["error_message"]
    delay = (at(job["next_retry_at"]) - at(attempt["ended_at"])).total_seconds()
    assert 3590 <= delay <= 3610, delay


async def test_a_receiver_that_does_not_answer_within_the_timeout_fails_the_job_retryably(client, receivers):
    never = asyncio.Event()

    async def hang(_: Received) -> web.StreamResponse:
        await never.wait()
        return web.json_response({})

    receiver = await receivers(hang)
    await bind(client, receiver.url, timeout_secs=1)
    job_id = await enqueue(client, retry_delay_secs=3600)
    job = await reaches(client, job_id, "retrying")
    assert "timed out after 1s" in job["error_message"]
    [attempt] = await attempts(client, job_id)
    assert attempt["delivery"]["outcome"] == "retry" and "status" not in attempt["delivery"]
    never.set()


async def test_a_connection_refused_fails_the_job_retryably(client, receivers):
    receiver = await receivers()
    url = receiver.url.replace(str(receiver.port), "1")  # nothing listens on port 1
    await bind(client, url)
    job = await reaches(client, await enqueue(client, retry_delay_secs=3600), "retrying")
    assert "connection failed" in job["error_message"]


async def test_a_202_leaves_the_job_to_the_receiver_which_heartbeats_and_completes_with_the_token(
    client, receivers
):
    receiver = await receivers(answering(202))
    await bind(client, receiver.url)
    job_id = await enqueue(client)
    [got] = await receiver.wait_for(1)
    token = got.body["lease_token"]
    [attempt] = await eventually(lambda: _delivered(client, job_id))
    assert attempt["delivery"]["outcome"] == "accepted" and attempt["outcome"] == "running"
    status, beat = await post(
        client, f"/api/v1/jobs/{job_id}/heartbeat", {"lease_token": token, "extend_secs": 60}
    )
    assert (status, beat) == (200, {"status": "running"})
    status, _ = await post(
        client, f"/api/v1/jobs/{job_id}/complete", {"lease_token": token, "result": {"late": 1}}
    )
    assert status == 204
    job = await get_job(client, job_id)
    assert job["status"] == "completed" and job["result"] == {"late": 1}


async def _delivered(client, job_id: str) -> list[dict[str, Any]] | None:
    found = await attempts(client, job_id)
    return found if found and "delivery" in found[-1] else None


async def test_a_cancel_reaches_a_202_accepted_job_through_its_heartbeat(client, receivers):
    receiver = await receivers(answering(202))
    await bind(client, receiver.url)
    job_id = await enqueue(client)
    [got] = await receiver.wait_for(1)
    await eventually(lambda: _delivered(client, job_id))
    resp = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=AUTH)
    assert resp.status == 204
    token = got.body["lease_token"]
    status, beat = await post(
        client, f"/api/v1/jobs/{job_id}/heartbeat", {"lease_token": token, "extend_secs": 60}
    )
    assert (status, beat) == (200, {"status": "cancelled"})
    await post(client, f"/api/v1/jobs/{job_id}/complete", {"lease_token": token, "result": {"x": 1}})
    job = await get_job(client, job_id)
    assert job["status"] == "cancelled" and job.get("result") is None


async def test_a_non_retryable_4xx_dead_letters_the_job(client, receivers):
    receiver = await receivers(answering(422, {"error": "bad payload"}))
    await bind(client, receiver.url)
    job_id = await enqueue(client, max_retries=5)
    job = await finished(client, job_id)
    assert job["status"] == "failed" and job["retry_count"] == 0 and "HTTP 422" in job["error_message"]
    resp = await client.get("/api/v1/dlq", headers=AUTH)
    [dead] = [d for d in (await resp.json())["dead_letters"] if d["job_id"] == job_id]
    assert dead["reason"] == "non_retryable"
    assert len(receiver.received) == 1


@pytest.mark.parametrize("status", [408, 409, 425, 502, 503])
async def test_the_retryable_statuses_retry(client, receivers, status):
    receiver = await receivers(answering(status))
    await bind(client, receiver.url)
    job = await reaches(client, await enqueue(client, retry_delay_secs=3600), "retrying")
    assert f"HTTP {status}" in job["error_message"]


async def test_a_2xx_whose_body_is_not_a_json_object_fails_the_job_for_good(client, receivers):
    receiver = await receivers(answering(200, "plain text"))
    await bind(client, receiver.url)
    job = await finished(client, await enqueue(client))
    assert job["status"] == "failed" and "not JSON" in job["error_message"]


async def test_a_redirect_is_not_followed_and_fails_the_job(client, receivers):
    target = await receivers()
    receiver = await receivers(answering(302, Location=target.url))
    await bind(client, receiver.url)
    job = await finished(client, await enqueue(client))
    assert job["status"] == "failed" and "redirects are not followed" in job["error_message"]
    assert target.received == []


async def test_a_paused_endpoint_delivers_nothing_until_resumed(client, receivers):
    receiver = await receivers()
    made = await bind(client, receiver.url)
    resp = await client.patch(f"/api/v1/push-endpoints/{made['id']}", json={"paused": True}, headers=AUTH)
    assert resp.status == 200
    job_id = await enqueue(client)
    # A job of another, unpaused endpoint is delivered meanwhile: the pusher is working.
    other = await receivers()
    await bind(client, other.url, queue="other")
    await finished(client, await enqueue(client, queue="other"))
    assert receiver.received == [] and (await get_job(client, job_id))["status"] == "pending"
    resp = await client.patch(f"/api/v1/push-endpoints/{made['id']}", json={"paused": False}, headers=AUTH)
    assert (await finished(client, job_id))["status"] == "completed"


async def test_a_limit_key_holds_on_a_pushed_queue(client, receivers):
    gate = asyncio.Event()

    async def hold(_: Received) -> web.StreamResponse:
        await gate.wait()
        return web.json_response({})

    receiver = await receivers(hold)
    resp = await client.put("/api/v1/limits/tenant-x", json={"concurrency": 1}, headers=AUTH)
    assert resp.status == 200, await resp.text()
    await bind(client, receiver.url, concurrency=10)
    ids = [await enqueue(client, limits=["tenant-x"]) for _ in range(3)]
    free_id = await enqueue(client)  # no key: delivered beside the limited one
    await receiver.wait_for(2)
    delivered = {got.job_id for got in receiver.received}
    assert free_id in delivered and len(delivered & set(ids)) == 1
    # One limited job in flight and the free one: the two others wait for the key's slot.
    limited_running = await _count(client, ids, "running")
    assert limited_running == 1 and len(receiver.received) == 2
    gate.set()
    for job_id in ids:
        assert (await finished(client, job_id))["status"] == "completed"
    assert receiver.most_in_flight <= 2


async def _count(client, ids: list[str], status: str) -> int:
    count = 0
    for job_id in ids:
        count += (await get_job(client, job_id))["status"] == status
    return count


async def test_a_workflows_steps_run_on_a_pushed_queue(client, receivers):
    async def answer(got: Received) -> web.StreamResponse:
        return web.json_response({"ran": got.body["job"]["workflow_step_id"]})

    receiver = await receivers(answer)
    await bind(client, receiver.url)
    status, made = await post(
        client,
        "/api/v1/workflows",
        {
            "name": "pushed-flow",
            "steps": [
                {"name": "first", "task_name": "hook", "queue": "pushed"},
                {"name": "second", "task_name": "hook", "queue": "pushed", "depends_on": ["first"]},
            ],
        },
    )
    assert status == 201, made
    wf_id = made["workflow_id"] if "workflow_id" in made else made["id"]

    async def done() -> dict[str, Any] | None:
        resp = await client.get(f"/api/v1/workflows/{wf_id}", headers=AUTH)
        body = await resp.json()
        return body if body["status"] == "completed" else None

    await eventually(done, timeout=30)
    assert [got.body["job"]["workflow_step_id"] for got in receiver.received] == ["first", "second"]


async def test_the_endpoints_recent_deliveries_are_listed_newest_first(client, receivers):
    receiver = await receivers()
    made = await bind(client, receiver.url)
    first = await enqueue(client)
    await finished(client, first)
    second = await enqueue(client)
    await finished(client, second)

    async def both() -> list[dict[str, Any]] | None:
        resp = await client.get(f"/api/v1/push-endpoints/{made['id']}/deliveries", headers=AUTH)
        found = list((await resp.json())["deliveries"])
        return found if len(found) == 2 else None

    newest, oldest = await eventually(both)
    assert (newest["job_id"], oldest["job_id"]) == (second, first)
    assert newest["status"] == 200 and newest["outcome"] == "completed"


async def test_an_endpoint_that_keeps_failing_opens_its_breaker_and_its_jobs_wait(api, receivers):
    client = await api(
        mode="all",
        push_allow_cidrs=("127.0.0.0/8",),
        push_breaker_failures=2,
        push_breaker_secs=3600,
        worker_poll_secs=1.0,
    )
    receiver = await receivers(answering(503))
    made = await bind(client, receiver.url, concurrency=1)
    ids = [await enqueue(client, retry_delay_secs=0, max_retries=10) for _ in range(3)]

    async def opened() -> dict[str, Any] | None:
        resp = await client.get(f"/api/v1/push-endpoints/{made['id']}", headers=AUTH)
        body = await resp.json()
        return body if body["breaker"]["state"] == "open" else None

    endpoint = await eventually(opened, timeout=30)
    assert endpoint["breaker"]["consecutive_failures"] == 2 and "open_until" in endpoint["breaker"]

    # The breaker is fed before the failed delivery's job is written (so the endpoint's slot is
    # still held while it opens): the second failure reaches its job a moment after.
    async def retries() -> list[int] | None:
        counts = [(await get_job(client, job_id))["retry_count"] for job_id in ids]
        return counts if sum(counts) == 2 else None

    await eventually(retries, timeout=30)
    # Open: no more deliveries; the jobs keep their retries and wait.
    assert len(receiver.received) == 2
    assert {(await get_job(client, job_id))["status"] for job_id in ids} <= {"pending", "retrying"}


async def test_a_change_the_pusher_did_not_hear_of_is_read_again_by_the_next_claim(
    api, receivers, database_url
):
    # No safety poll within the test: the pusher hears of changes only by their NOTIFY, or by the
    # claim that meets the endpoint's new version.
    client = await api(mode="all", push_allow_cidrs=("127.0.0.0/8",), worker_poll_secs=60.0)
    before, after = await receivers(), await receivers()
    made = await bind(client, before.url)
    await finished(client, await enqueue(client))
    assert len(before.received) == 1
    # A rotated secret and a new URL, written as the routes write them but with the notification
    # lost (no pg_notify): what the next claim's job is sent with must still be the new endpoint.
    new_secret = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE queueflow.push_endpoints SET secret = $2, previous_secret = NULL,"
            " previous_secret_until = NULL, url = $3, updated_at = now() WHERE id = $1",
            uuid.UUID(made["id"]),
            new_secret,
            after.url,
        )
    finally:
        await conn.close()
    job_id = await enqueue(client)
    await finished(client, job_id)
    [got] = after.received
    assert got.job_id == job_id
    assert verify(new_secret, got) and not verify(made["secret"], got)
    assert len(before.received) == 1


async def test_a_rotated_out_secret_stops_signing_when_its_grace_ends(api, receivers):
    client = await api(mode="all", push_allow_cidrs=("127.0.0.0/8",), worker_poll_secs=60.0)
    receiver = await receivers()
    made = await bind(client, receiver.url)
    status, rotated = await post(
        client, f"/api/v1/push-endpoints/{made['id']}/rotate-secret", {"grace_secs": 1}
    )
    assert status == 200, rotated
    await finished(client, await enqueue(client))
    [during] = receiver.received
    assert verify(rotated["secret"], during) and verify(made["secret"], during)
    # After the grace, with nothing read since: the old secret no longer signs.
    ends = datetime.fromisoformat(rotated["previous_secret_expires_at"])
    await asyncio.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.05)
    await finished(client, await enqueue(client))
    later = receiver.received[1]
    assert verify(rotated["secret"], later) and not verify(made["secret"], later)
