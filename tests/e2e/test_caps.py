"""The caps on what callers can make an api process hold, on real processes and real connections
(docs/operations.md, "Request caps"): open SSE streams and parked lease long-polls, per tenant (429)
and per process (503), both with Retry-After and the error body; and lookups of unknown worker
keys, rate-limited per source address (429)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

ACME = {"Authorization": "Bearer key1"}
GLOBEX = {"Authorization": "Bearer key2"}
WORKER = {"Authorization": "Bearer wtok"}
CREDENTIALS = ["--worker-token", "wtok", "--api-keys", "key1:acme,key2:globex"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def expect_refusal(resp: aiohttp.ClientResponse, status: int, retry_after: str) -> str:
    """`resp` is `status` with `Retry-After: retry_after` and the contract's error body."""
    body = await resp.json()
    assert resp.status == status, body
    assert resp.headers.get("Retry-After") == retry_after, dict(resp.headers)
    assert set(body) == {"error", "timestamp"}, body
    return str(body["error"])


async def create_job(http: aiohttp.ClientSession, base: str, headers: dict[str, str], queue: str) -> str:
    body = {"task_name": "t", "config": {"queue": queue}}
    async with http.post(f"{base}/api/v1/jobs", json=body, headers=headers) as resp:
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["job_id"])


# --- SSE streams -----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def stream(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """An open event stream; its first event has arrived (so the server holds its place)."""
    async with http.get(url, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.content.readline()).startswith(b"event: ")
        yield resp


async def test_streams_past_the_tenant_cap_are_429_and_past_the_process_cap_503(database_url, service):
    caps = ["--max-tenant-streams", "2", "--max-streams", "3"]
    api = await service(database_url, mode="api", dev=False, extra_args=[*CREDENTIALS, *caps])
    base = api.base_url
    async with aiohttp.ClientSession() as http:
        acme_job = await create_job(http, base, ACME, "idle")
        globex_job = await create_job(http, base, GLOBEX, "idle")
        acme_url = f"{base}/api/v1/jobs/{acme_job}/events"
        globex_url = f"{base}/api/v1/jobs/{globex_job}/events"
        async with contextlib.AsyncExitStack() as open_streams:
            first = await open_streams.enter_async_context(stream(http, acme_url, ACME))
            await open_streams.enter_async_context(stream(http, acme_url, ACME))
            # The tenant's third: 429, whichever kind of stream it asks for.
            async with http.get(acme_url, headers=ACME) as resp:
                message = await expect_refusal(resp, 429, "5")
                assert "for this tenant" in message and "at most 2" in message
            wf_body = {"name": "w", "steps": [{"name": "a", "task_name": "t", "queue": "idle"}]}
            async with http.post(f"{base}/api/v1/workflows", json=wf_body, headers=ACME) as resp:
                wf_id = (await resp.json())["workflow_id"]
            async with http.get(f"{base}/api/v1/workflows/{wf_id}/events", headers=ACME) as resp:
                await expect_refusal(resp, 429, "5")
            # Another tenant takes the process's last place; past it, every caller is a 503.
            await open_streams.enter_async_context(stream(http, globex_url, GLOBEX))
            async with http.get(globex_url, headers=GLOBEX) as resp:
                assert "on this server process" in await expect_refusal(resp, 503, "5")
            # A stream that ends gives its place back: cancelling the job ends acme's two.
            async with http.post(f"{base}/api/v1/jobs/{acme_job}/cancel", headers=ACME) as resp:
                assert resp.status == 204
            while await first.content.readline():
                pass

            async def opened() -> bool:
                async with http.get(globex_url, headers=GLOBEX) as resp:
                    if resp.status != 200:
                        await expect_refusal(resp, 503, "5")
                        return False
                    return True

            await eventually(opened, timeout=30)


# --- parked long-polls -----------------------------------------------------------------------------


async def long_poll_waiters(http: aiohttp.ClientSession, metrics_url: str) -> float:
    async with http.get(f"{metrics_url}/metrics") as resp:
        text = await resp.text()
    return next(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("queueflow_long_poll_waiters ")
    )


async def mint(http: aiohttp.ClientSession, base: str, headers: dict[str, str]) -> dict[str, str]:
    async with http.post(f"{base}/api/v1/worker-keys", json={"name": "k"}, headers=headers) as resp:
        assert resp.status == 201, await resp.text()
        return bearer((await resp.json())["token"])


async def lease(
    http: aiohttp.ClientSession, base: str, queue: str, headers: dict[str, str], wait_secs: int
) -> aiohttp.ClientResponse:
    body = {"max_jobs": 1, "wait_secs": wait_secs}
    resp = await http.post(f"{base}/api/v1/queues/{queue}/lease", json=body, headers=headers)
    await resp.read()
    return resp


async def test_long_polls_past_the_tenant_cap_are_429_and_past_the_process_cap_503(database_url, service):
    caps = ["--max-tenant-long-polls", "2", "--max-long-polls", "3"]
    api = await service(database_url, mode="api", dev=False, extra_args=[*CREDENTIALS, *caps])
    base = api.base_url
    async with aiohttp.ClientSession() as http:
        acme, globex = await mint(http, base, ACME), await mint(http, base, GLOBEX)

        async def waiters(n: int) -> bool:
            return await long_poll_waiters(http, api.metrics_url) == n

        parked = [asyncio.create_task(lease(http, base, "q", acme, 30)) for _ in range(2)]
        try:
            await eventually(lambda: waiters(2), timeout=30)
            # The tenant's third long-poll claims, finds nothing, and is refused instead of parking.
            resp = await lease(http, base, "q", acme, 30)
            message = await expect_refusal(resp, 429, "1")
            assert "for this tenant" in message and "at most 2" in message
            # Past the cap a lease still claims: a job that is due is leased at once.
            job_id = await create_job(http, base, ACME, "other")
            resp = await lease(http, base, "other", acme, 30)
            assert resp.status == 200
            assert [item["job"]["id"] for item in (await resp.json())["jobs"]] == [job_id]
            # A lease that does not wait is never refused.
            resp = await lease(http, base, "q", acme, 0)
            assert resp.status == 200 and (await resp.json())["jobs"] == []
            # Another tenant parks in the process's last place; past it every caller is a 503, the
            # worker token (which counts against the process's cap only) too.
            parked.append(asyncio.create_task(lease(http, base, "q", globex, 30)))
            await eventually(lambda: waiters(3), timeout=30)
            for headers in (WORKER, globex):
                resp = await lease(http, base, "q", headers, 30)
                assert "on this server process" in await expect_refusal(resp, 503, "1")
            assert await long_poll_waiters(http, api.metrics_url) == 3
            # A poll answered gives its place back, and the tenant parks again.
            job_id = await create_job(http, base, ACME, "q")
            done, _ = await asyncio.wait(parked[:2], return_when=asyncio.FIRST_COMPLETED)
            answered = done.pop().result()
            assert answered.status == 200
            assert [item["job"]["id"] for item in (await answered.json())["jobs"]] == [job_id]
            parked.append(asyncio.create_task(lease(http, base, "q", acme, 30)))
            await eventually(lambda: waiters(3), timeout=30)
        finally:
            for task in parked:
                task.cancel()
            await asyncio.gather(*parked, return_exceptions=True)


# --- unknown worker keys ---------------------------------------------------------------------------


async def test_unknown_worker_keys_past_a_sources_burst_are_429_and_other_sources_are_not(
    database_url, service
):
    limits = ["--unknown-worker-key-rate", "0.001", "--unknown-worker-key-burst", "2"]
    api = await service(database_url, mode="api", dev=False, extra_args=[*CREDENTIALS, *limits])
    base = api.base_url
    lease_url = f"{base}/api/v1/queues/q/lease"
    async with aiohttp.ClientSession() as http:
        key = await mint(http, base, ACME)
        async with http.post(lease_url, json={}, headers=key) as resp:
            assert resp.status == 200  # looked up once (a key that exists spends nothing) and kept
        for n in range(2):
            async with http.post(lease_url, json={}, headers=bearer(f"qfwk_guess_{n}")) as resp:
                assert resp.status == 401, await resp.text()
        async with http.post(lease_url, json={}, headers=bearer("qfwk_guess_2")) as resp:
            message = await expect_refusal(resp, 429, "1000")  # one token at 0.001 a second
            assert "unknown worker keys" in message
        async with http.get(f"{base}/api/v1/jobs", headers=bearer("qfwk_guess_3")) as resp:
            await expect_refusal(resp, 429, "1000")  # tenant routes look such tokens up too
        for headers in (key, WORKER):  # a kept key and the worker token cost no lookup
            async with http.post(lease_url, json={}, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
    # Another address has a bucket of its own.
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with (
        aiohttp.ClientSession(connector=connector) as other,
        other.post(lease_url, json={}, headers=bearer("qfwk_guess_4")) as resp,
    ):
        assert resp.status == 401, await resp.text()
