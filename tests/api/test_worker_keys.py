"""Worker keys: a tenant mints keys for its own workers. Minting, listing and revoking and who may;
every worker route with a key of one tenant against another tenant's jobs; queues outside a key's
list; revoked and expired keys, a revocation reaching a second API process within a second; a key
on tenant routes; and the global worker token beside them, unchanged."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from tests.api.helpers import (
    ACME,
    ACME_RO,
    GLOBEX,
    STRICT,
    WORKER,
    bearer,
    count,
    create_job,
    expect_error,
    get_job,
    iso,
    lease,
    lease_one,
    list_json,
)
from tests.api.test_auth import TENANT_READS, TENANT_WRITES, _call
from tests.support.api import database_of
from tests.support.waiting import eventually

KEYS = "/api/v1/worker-keys"
MISSING_JOB = "00000000-0000-4000-8000-0000000000aa"


async def mint(client, headers=ACME, **body: Any) -> dict[str, Any]:
    body.setdefault("name", "runner")
    resp = await client.post(KEYS, json=body, headers=headers)
    assert resp.status == 201, await resp.text()
    return dict(await resp.json())


def worker_routes(job_id: str, token: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every worker route but lease, aimed at `job_id` with lease token `token`."""
    return [
        ("POST", f"/api/v1/jobs/{job_id}/heartbeat", {"lease_token": token, "extend_secs": 30}),
        ("POST", f"/api/v1/jobs/{job_id}/complete", {"lease_token": token, "result": {}}),
        ("POST", f"/api/v1/jobs/{job_id}/fail", {"lease_token": token, "error": "x"}),
    ]


# --- minting, listing, revoking --------------------------------------------------------------------


async def test_minted_token_is_shown_once_and_stored_only_as_its_digest(api):
    client = await api(**STRICT)
    expires = datetime.now(UTC) + timedelta(days=1)
    key = await mint(client, name="eu runners", queues=["emails", "pdfs", "emails"], expires_at=iso(expires))
    assert set(key) == {"id", "name", "queues", "created_at", "expires_at", "token"}
    assert key["name"] == "eu runners"
    assert key["queues"] == ["emails", "pdfs"]
    assert datetime.fromisoformat(key["expires_at"]) == expires
    assert key["token"].startswith("qfwk_") and len(key["token"]) > 40

    listed = (await list_json(client, KEYS, ACME))["worker_keys"]
    assert listed == [{k: v for k, v in key.items() if k != "token"}]

    row = await database_of(client).pool.fetchrow(
        "SELECT token_digest, t::text AS everything FROM queueflow.worker_keys t"
    )
    assert bytes(row["token_digest"]) == hashlib.sha256(key["token"].encode()).digest()
    assert key["token"] not in row["everything"]


async def test_a_key_without_queues_or_expiry_says_so_with_nulls(api):
    client = await api(**STRICT)
    key = await mint(client, name="all")
    assert key["queues"] is None and key["expires_at"] is None
    assert (await list_json(client, KEYS, ACME))["worker_keys"][0]["queues"] is None


async def test_keys_are_the_minting_tenants_own(api):
    client = await api(**STRICT)
    acme = await mint(client, name="a")
    globex = await mint(client, GLOBEX, name="g")
    assert [k["id"] for k in (await list_json(client, KEYS, ACME))["worker_keys"]] == [acme["id"]]
    assert [k["id"] for k in (await list_json(client, KEYS, GLOBEX))["worker_keys"]] == [globex["id"]]
    # Another tenant's key id is not found, and stays in force.
    await expect_error(await client.delete(f"{KEYS}/{acme['id']}", headers=GLOBEX), 404)
    assert (await client.post("/api/v1/queues/q/lease", json={}, headers=bearer(acme["token"]))).status == 200


async def test_revoking_answers_204_then_404(api):
    client = await api(**STRICT)
    key = await mint(client)
    assert (await client.delete(f"{KEYS}/{key['id']}", headers=ACME)).status == 204
    assert (await list_json(client, KEYS, ACME))["worker_keys"] == []
    await expect_error(await client.delete(f"{KEYS}/{key['id']}", headers=ACME), 404, "worker key not found")
    await expect_error(await client.delete(f"{KEYS}/{uuid.uuid4()}", headers=ACME), 404)
    await expect_error(await client.delete(f"{KEYS}/not-a-uuid", headers=ACME), 404)


async def test_who_may_mint_list_and_revoke(api):
    client = await api(**STRICT)
    key = await mint(client)
    path = f"{KEYS}/{key['id']}"
    for headers in (ACME_RO, WORKER, bearer(key["token"])):
        await expect_error(await client.post(KEYS, json={"name": "x"}, headers=headers), 403)
        await expect_error(await client.delete(path, headers=headers), 403)
    for headers in (WORKER, bearer(key["token"])):
        await expect_error(await client.get(KEYS, headers=headers), 403)
    assert len((await list_json(client, KEYS, ACME_RO))["worker_keys"]) == 1  # reading is allowed
    for headers in ({}, bearer("nope"), bearer("qfwk_nope")):
        await expect_error(await client.post(KEYS, json={"name": "x"}, headers=headers), 401)
        await expect_error(await client.get(KEYS, headers=headers), 401)
        await expect_error(await client.delete(path, headers=headers), 401)
    assert await count(client, "worker_keys") == 1


BAD_BODIES = {
    "no name": {},
    "empty name": {"name": ""},
    "blank name": {"name": "   "},
    "name not a string": {"name": 5},
    "name too long": {"name": "n" * 256},
    "NUL in name": {"name": "a\u0000b"},
    "unknown field": {"name": "k", "scope": "all"},
    "queues empty": {"name": "k", "queues": []},
    "queues not a list": {"name": "k", "queues": "emails"},
    "queue not a string": {"name": "k", "queues": [1]},
    "queue with a space": {"name": "k", "queues": ["a b"]},
    "queue empty": {"name": "k", "queues": [""]},
    "queue too long": {"name": "k", "queues": ["q" * 129]},
    "too many queues": {"name": "k", "queues": [f"q{i}" for i in range(101)]},
    "expired already": {"name": "k", "expires_at": "2001-01-01T00:00:00Z"},
    "expiry not a time": {"name": "k", "expires_at": "tomorrow"},
    "expiry out of range": {"name": "k", "expires_at": "0001-01-01T00:00:00+01:00"},
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
async def test_bad_input_is_400_and_mints_nothing(api, body):
    client = await api(**STRICT)
    await expect_error(await client.post(KEYS, json=body, headers=ACME), 400)
    assert await count(client, "worker_keys") == 0


async def test_an_expiry_just_past_is_400(api):
    client = await api(**STRICT)
    past = datetime.now(UTC) - timedelta(seconds=1)
    message = await expect_error(
        await client.post(KEYS, json={"name": "k", "expires_at": iso(past)}, headers=ACME), 400
    )
    assert "expires_at must be in the future" in message


# --- the worker routes, held to the key's tenant and queues ------------------------------------------


async def test_a_key_leases_only_its_tenants_jobs(api):
    client = await api(**STRICT)
    key = bearer((await mint(client))["token"])
    theirs = [await create_job(client, GLOBEX, config={"queue": "shared", "priority": 10}) for _ in range(3)]
    ours = [await create_job(client, ACME, config={"queue": "shared"}) for _ in range(2)]
    leased = await lease(client, "shared", key, max_jobs=10)
    assert sorted(item["job"]["id"] for item in leased) == sorted(ours)
    assert await lease(client, "shared", key, max_jobs=10) == []
    for job_id in theirs:
        assert (await get_job(client, job_id, GLOBEX))["status"] == "pending"
    # The global worker token still leases every tenant's jobs.
    assert sorted(item["job"]["id"] for item in await lease(client, "shared", WORKER, max_jobs=10)) == sorted(
        theirs
    )


async def test_every_route_on_another_tenants_job_is_404_like_an_unknown_job(api):
    client = await api(**STRICT)
    key = bearer((await mint(client))["token"])
    theirs = await create_job(client, GLOBEX, config={"queue": "q"})
    token = await lease_one(client, "q", theirs, WORKER)  # held by the global worker
    unknown = {}
    for method, path, body in worker_routes(MISSING_JOB, token):
        unknown[path.rsplit("/", 1)[1]] = await expect_error(
            await client.request(method, path, json=body, headers=key), 404
        )
    for method, path, body in worker_routes(theirs, token):
        message = await expect_error(await client.request(method, path, json=body, headers=key), 404)
        assert message == unknown[path.rsplit("/", 1)[1]].replace(MISSING_JOB, theirs)

    resp = await client.post(
        "/api/v1/jobs/complete", json={"jobs": [{"id": theirs, "lease_token": token}]}, headers=key
    )
    assert resp.status == 200, await resp.text()
    [answer] = (await resp.json())["results"]
    assert answer == {
        "id": theirs,
        "outcome": "not_found",
        "status": 404,
        "error": f"job not found: {theirs}",
    }

    # Nothing was touched: the holder's lease stands, and the holder finishes the job as before.
    job = await get_job(client, theirs, GLOBEX)
    assert job["status"] == "running" and "error_message" not in job
    resp = await client.post(f"/api/v1/jobs/{theirs}/complete", json={"lease_token": token}, headers=WORKER)
    assert resp.status == 204, await resp.text()


async def test_a_key_runs_its_own_jobs_through_every_route(api):
    client = await api(**STRICT)
    key = bearer((await mint(client, queues=["q"]))["token"])
    first, second, third, fourth = [await create_job(client, ACME, config={"queue": "q"}) for _ in range(4)]
    tokens = {item["job"]["id"]: item["lease_token"] for item in await lease(client, "q", key, max_jobs=4)}
    assert set(tokens) == {first, second, third, fourth}
    resp = await client.post(
        f"/api/v1/jobs/{first}/heartbeat", json={"lease_token": tokens[first], "extend_secs": 60}, headers=key
    )
    assert resp.status == 200 and (await resp.json())["status"] == "running"
    resp = await client.post(
        f"/api/v1/jobs/{first}/complete", json={"lease_token": tokens[first]}, headers=key
    )
    assert resp.status == 204, await resp.text()
    resp = await client.post(
        f"/api/v1/jobs/{second}/fail",
        json={"lease_token": tokens[second], "error": "x", "retryable": False},
        headers=key,
    )
    assert resp.status == 204, await resp.text()
    # A batch mixing its own job with another tenant's: each item answered on its own.
    theirs = await create_job(client, GLOBEX, config={"queue": "other"})
    their_token = await lease_one(client, "other", theirs, WORKER)
    resp = await client.post(
        "/api/v1/jobs/complete",
        json={
            "jobs": [
                {"id": third, "lease_token": tokens[third]},
                {"id": theirs, "lease_token": their_token},
                {"id": "not-a-uuid", "lease_token": "x"},
                {"id": fourth, "lease_token": tokens[fourth]},
            ]
        },
        headers=key,
    )
    assert resp.status == 200, await resp.text()
    assert [(a["outcome"], a["status"]) for a in (await resp.json())["results"]] == [
        ("completed", 204),
        ("not_found", 404),
        ("not_found", 404),
        ("completed", 204),
    ]
    statuses = [(await get_job(client, j, ACME))["status"] for j in (first, second, third, fourth)]
    assert statuses == ["completed", "failed", "completed", "completed"]
    assert (await get_job(client, theirs, GLOBEX))["status"] == "running"


async def test_a_queue_outside_the_keys_list_is_403(api):
    client = await api(**STRICT)
    key = bearer((await mint(client, queues=["emails", "pdfs"]))["token"])
    await create_job(client, ACME, config={"queue": "billing"})
    message = await expect_error(await client.post("/api/v1/queues/billing/lease", json={}, headers=key), 403)
    assert "billing" in message
    assert await count(client, "jobs", "status = 'running'") == 0
    assert (await client.post("/api/v1/queues/emails/lease", json={}, headers=key)).status == 200
    # A key with no list takes every queue.
    anywhere = bearer((await mint(client))["token"])
    assert len(await lease(client, "billing", anywhere)) == 1


async def test_a_key_on_tenant_routes_is_403(api):
    client = await api(**STRICT)
    key = bearer((await mint(client))["token"])
    job_id = await create_job(client, ACME)
    for method, path, body in TENANT_READS + TENANT_WRITES:
        resp = await _call(client, method, path, body, key, job_id)
        await expect_error(resp, 403, "access denied")
    assert await count(client, "jobs") == 1


async def test_unknown_key_shaped_tokens_are_401_everywhere(api):
    client = await api(**STRICT)
    await create_job(client, ACME, config={"queue": "q"})
    for token in ("qfwk_" + "A" * 43, "qfwk_"):
        await expect_error(await client.post("/api/v1/queues/q/lease", json={}, headers=bearer(token)), 401)
        await expect_error(await client.get("/api/v1/jobs", headers=bearer(token)), 401)
    assert await count(client, "jobs", "status = 'running'") == 0


async def test_a_key_shaped_token_is_judged_as_a_key_in_dev_mode(api):
    client = await api(dev=True)
    key = await mint(client, bearer("dev"))
    assert (await client.post("/api/v1/queues/q/lease", json={}, headers=bearer(key["token"]))).status == 200
    assert (await client.delete(f"{KEYS}/{key['id']}", headers=bearer("dev"))).status == 204
    # --dev takes any token as a worker, but not a revoked key, nor one that never was.
    await expect_error(
        await client.post("/api/v1/queues/q/lease", json={}, headers=bearer(key["token"])), 401
    )
    await expect_error(await client.post("/api/v1/queues/q/lease", json={}, headers=bearer("qfwk_x")), 401)
    await expect_error(await client.get("/api/v1/jobs", headers=bearer(key["token"])), 401)


# --- revoked and expired keys ----------------------------------------------------------------------


async def test_a_revoked_key_is_401_on_every_route(api):
    client = await api(**STRICT)
    key = await mint(client)
    headers = bearer(key["token"])
    job_id = await create_job(client, ACME, config={"queue": "q"})
    token = await lease_one(client, "q", job_id, headers)  # in use, and so cached
    assert (await client.delete(f"{KEYS}/{key['id']}", headers=ACME)).status == 204
    await expect_error(await client.post("/api/v1/queues/q/lease", json={}, headers=headers), 401)
    for method, path, body in worker_routes(job_id, token):
        await expect_error(await client.request(method, path, json=body, headers=headers), 401)
    body = {"jobs": [{"id": job_id, "lease_token": token}]}
    await expect_error(await client.post("/api/v1/jobs/complete", json=body, headers=headers), 401)
    await expect_error(await client.get("/api/v1/jobs", headers=headers), 401)
    assert (await get_job(client, job_id, ACME))["status"] == "running"


async def test_an_expired_key_is_401(api):
    client = await api(**STRICT)
    token = "qfwk_" + uuid.uuid4().hex
    await database_of(client).pool.execute(
        "INSERT INTO queueflow.worker_keys (id, tenant_id, name, token_digest, expires_at)"
        " VALUES (gen_random_uuid(), 'acme', 'old', $1, now() - interval '1 second')",
        hashlib.sha256(token.encode()).digest(),
    )
    await create_job(client, ACME, config={"queue": "q"})
    await expect_error(await client.post("/api/v1/queues/q/lease", json={}, headers=bearer(token)), 401)
    await expect_error(await client.get("/api/v1/jobs", headers=bearer(token)), 401)
    assert await count(client, "jobs", "status = 'running'") == 0


async def test_a_key_in_use_stops_at_its_expiry(api):
    client = await api(**STRICT)
    expires = datetime.now(UTC) + timedelta(seconds=3)
    headers = bearer((await mint(client, expires_at=iso(expires)))["token"])

    async def lease_status() -> int:
        return (await client.post("/api/v1/queues/q/lease", json={}, headers=headers)).status

    async def refused() -> bool:
        return await lease_status() == 401

    assert await lease_status() == 200  # looked up, and now cached
    await eventually(refused, timeout=10)
    assert datetime.now(UTC) >= expires


async def test_a_revocation_reaches_another_api_process_within_a_second(database_url, service):
    args = ["--worker-token", "wtok", "--api-keys", "key1:acme"]
    first, second = await asyncio.gather(
        service(database_url, mode="api", dev=False, extra_args=args),
        service(database_url, mode="api", dev=False, extra_args=args),
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{first.base_url}{KEYS}", json={"name": "k"}, headers=ACME) as resp:
            assert resp.status == 201, await resp.text()
            key = await resp.json()
        headers = bearer(key["token"])

        async def lease_status() -> int:
            async with http.post(
                f"{second.base_url}/api/v1/queues/q/lease", json={}, headers=headers
            ) as resp:
                return resp.status

        assert await lease_status() == 200  # the second process has looked the key up
        assert await lease_status() == 200
        async with http.delete(f"{first.base_url}{KEYS}/{key['id']}", headers=ACME) as resp:
            assert resp.status == 204
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0  # the rule
        while (status := await lease_status()) != 401:
            assert status == 200
            assert loop.time() < deadline, "the second process still took the revoked key after a second"


# --- long-polls of key holders ---------------------------------------------------------------------


async def test_a_parked_key_holder_does_not_take_a_wake_up_meant_for_another_tenants_job(api):
    client = await api(**STRICT, worker_poll_secs=60)
    key = bearer((await mint(client))["token"])
    hub = database_of(client).hub
    body = {"wait_secs": 10, "max_jobs": 1}
    holder = asyncio.create_task(client.post("/api/v1/queues/q/lease", json=body, headers=key))
    await eventually(lambda: hub.waiting("q") == 1)
    worker = asyncio.create_task(client.post("/api/v1/queues/q/lease", json=body, headers=WORKER))
    await eventually(lambda: hub.waiting("q") == 2)
    theirs = await create_job(client, GLOBEX, config={"queue": "q"})
    resp = await worker
    assert [item["job"]["id"] for item in (await resp.json())["jobs"]] == [theirs]
    # The key holder went back to waiting, and takes its own tenant's job when one comes.
    assert not holder.done()
    ours = await create_job(client, ACME, config={"queue": "q"})
    resp = await holder
    assert [item["job"]["id"] for item in (await resp.json())["jobs"]] == [ours]
