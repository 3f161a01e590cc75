"""Push delivery across real `queueflow serve` processes: an endpoint's concurrency held exactly by
two pushers, a pusher SIGKILLed mid-request (its job delivered again after its lease expires and
completed once), the SSRF rules checked again at delivery, and the pusher's metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from tests.push.receiver import Received
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

AUTH = {"Authorization": "Bearer dev"}
LOOPBACK = ["--push-allow-cidrs", "127.0.0.0/8"]
QUICK = ["--worker-poll-secs", "1", "--shutdown-grace-secs", "2"]


async def bind(http: aiohttp.ClientSession, url: str, queue: str = "pushed", **more: Any) -> dict[str, Any]:
    body = {"name": queue, "url": url, "queues": [queue], **more}
    async with http.post("/api/v1/push-endpoints", json=body) as resp:
        made = await resp.json()
        assert resp.status == 201, made
        return dict(made)


async def enqueue(http: aiohttp.ClientSession, queue: str = "pushed", **config: Any) -> str:
    body = {"task_name": "hook", "payload": {}, "config": {"queue": queue, **config}}
    async with http.post("/api/v1/jobs", json=body) as resp:
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["job_id"])


async def job(http: aiohttp.ClientSession, job_id: str) -> dict[str, Any]:
    async with http.get(f"/api/v1/jobs/{job_id}") as resp:
        return dict(await resp.json())


async def test_two_pushers_hold_an_endpoints_concurrency_exactly(database_url, service, receivers):
    async def accept(_: Received) -> web.StreamResponse:
        return web.Response(status=202)  # in flight until the test completes it

    receiver = await receivers(accept)
    api = await service(database_url, mode="api", extra_args=[*LOOPBACK, *QUICK])
    for _ in range(2):
        await service(database_url, mode="pusher", extra_args=[*LOOPBACK, *QUICK])
    pool = await asyncpg.connect(database_url)
    try:
        async with aiohttp.ClientSession(base_url=api.base_url, headers=AUTH) as http:
            await bind(http, receiver.url, concurrency=3)
            rounds = 8
            for _ in range(rounds * 3):
                await enqueue(http)
            for number in range(1, rounds + 1):
                # Three deliveries in flight, never a fourth while they are.
                await receiver.wait_for(3 * number, timeout=30)
                running = await pool.fetchval(
                    "SELECT count(*) FROM queueflow.jobs WHERE queue_name = 'pushed' AND status = 'running'"
                )
                assert running == 3, (number, running)
                for got in receiver.received[3 * (number - 1) : 3 * number]:
                    body = {"lease_token": got.body["lease_token"]}
                    async with http.post(f"/api/v1/jobs/{got.job_id}/complete", json=body) as resp:
                        assert resp.status == 204
            assert len(receiver.received) == rounds * 3
            assert len({got.job_id for got in receiver.received}) == rounds * 3  # none twice
            pushers = await pool.fetch(
                "SELECT DISTINCT worker_id FROM queueflow.jobs WHERE queue_name = 'pushed'"
            )
            assert len(pushers) == 2, pushers  # both took part
    finally:
        await pool.close()


async def test_a_pusher_killed_mid_request_has_its_job_delivered_again_after_the_lease_and_completed_once(
    database_url, service, receivers
):
    first_arrived = asyncio.Event()
    never = asyncio.Event()

    async def answer(got: Received) -> web.StreamResponse:
        if got.body["attempt"] == 1:
            first_arrived.set()
            await never.wait()  # the pusher dies while this request is open
        return web.json_response({"attempt": got.body["attempt"]})

    receiver = await receivers(answer)
    api = await service(database_url, mode="api", extra_args=[*LOOPBACK, *QUICK])
    await service(database_url, mode="janitor", extra_args=["--janitor-interval-secs", "0.2"])
    pusher_args = [*LOOPBACK, *QUICK, "--lease-grace-secs", "1"]
    doomed = await service(database_url, mode="pusher", extra_args=pusher_args)
    async with aiohttp.ClientSession(base_url=api.base_url, headers=AUTH) as http:
        await bind(http, receiver.url, concurrency=1, timeout_secs=2)
        job_id = await enqueue(http, retry_delay_secs=0)
        async with asyncio.timeout(30):
            await first_arrived.wait()
        await doomed.kill()  # SIGKILL mid-request
        await service(database_url, mode="pusher", extra_args=pusher_args)

        async def completed() -> dict[str, Any] | None:
            found = await job(http, job_id)
            return found if found["status"] == "completed" else None

        done = await eventually(completed, timeout=60)
        assert done["result"] == {"attempt": 2} and done["delivery_count"] == 2
        async with http.get(f"/api/v1/jobs/{job_id}/attempts") as resp:
            attempts = (await resp.json())["attempts"]
        assert [a["outcome"] for a in attempts] == ["lease_expired", "completed"]
        assert [got.body["attempt"] for got in receiver.received] == [1, 2]
        first, second = receiver.received
        assert first.headers["webhook-id"] != second.headers["webhook-id"]
    never.set()


async def test_a_pusher_refuses_at_delivery_an_address_the_api_let_through(database_url, service, receivers):
    """The api was started with loopback allowed and the pusher without: the endpoints were
    created, and every delivery is refused when the pusher connects (not retryably), whether the
    URL names the address or a name that resolves to it."""
    receiver = await receivers()
    api = await service(database_url, mode="api", extra_args=[*LOOPBACK, *QUICK])
    pusher = await service(database_url, mode="pusher", extra_args=QUICK)
    async with aiohttp.ClientSession(base_url=api.base_url, headers=AUTH) as http:
        await bind(http, receiver.url, queue="by-address")
        await bind(http, f"http://localhost:{receiver.port}/hook", queue="by-name")
        await bind(http, f"http://[::ffff:127.0.0.1]:{receiver.port}/hook", queue="by-mapped")
        ids = {
            queue: await enqueue(http, queue, max_retries=5)
            for queue in ("by-address", "by-name", "by-mapped")
        }

        async def failed(job_id: str) -> dict[str, Any] | None:
            found = await job(http, job_id)
            return found if found["status"] == "failed" else None

        for queue, job_id in ids.items():
            found = await eventually(lambda job_id=job_id: failed(job_id), timeout=30)
            assert "refused" in found["error_message"] and found["retry_count"] == 0, (queue, found)
        assert receiver.received == []
    async with aiohttp.ClientSession() as http, http.get(f"{pusher.metrics_url}/metrics") as resp:
        text = await resp.text()
    lines = [line for line in text.splitlines() if line.startswith("queueflow_push_deliveries_total{")]
    assert any('endpoint="by-name"' in line and 'outcome="failed"' in line for line in lines), lines
    assert "queueflow_push_delivery_duration_seconds_bucket{" in text
    assert "queueflow_push_in_flight{" in text
