"""Per-tenant queues: the backlog view, pause/resume of claims, and fair share across tenants."""

import asyncio

from tests.support.api import database_of

TENANTS = "ka:acme,kb:globex"
A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}
W = {"Authorization": "Bearer w"}


async def strict(api, **kw):
    return await api(dev=False, worker_token="w", api_keys=TENANTS, **kw)


async def enqueue(client, headers, n, queue="shared", **extra):
    jobs = [{"task_name": "t", "payload": {"i": i}, "config": {"queue": queue}, **extra} for i in range(n)]
    for start in range(0, n, 1000):
        resp = await client.post(
            "/api/v1/jobs/batch", json={"jobs": jobs[start : start + 1000]}, headers=headers
        )
        assert resp.status == 201, await resp.text()


async def lease(client, queue="shared", max_jobs=1):
    resp = await client.post(f"/api/v1/queues/{queue}/lease", json={"max_jobs": max_jobs}, headers=W)
    assert resp.status == 200
    return (await resp.json())["jobs"]


async def test_queue_view_lists_the_callers_queues_with_backlog_counts(api, db):
    client = await strict(api)
    await enqueue(client, A, 3, queue="emails")
    await enqueue(client, A, 2, queue="orders")
    await client.post(
        "/api/v1/jobs",
        json={"task_name": "t", "config": {"queue": "orders"}, "run_at": "2099-01-01T00:00:00Z"},
        headers=A,
    )
    await enqueue(client, B, 5, queue="globex-only")
    await lease(client, "orders")
    body = await (await client.get("/api/v1/queues", headers=A)).json()
    by_name = {q["queue"]: q for q in body["queues"]}
    assert list(by_name) == ["emails", "orders"]  # sorted, and only the caller's queues
    assert by_name["emails"]["pending"] == 3 and by_name["emails"]["running"] == 0
    assert by_name["orders"] == {
        **by_name["orders"],
        "pending": 1,
        "scheduled": 1,
        "running": 1,
        "paused": False,
    }
    assert by_name["orders"]["oldest_pending_age_secs"] >= 0


async def test_a_queue_stays_listed_after_its_jobs_finish(api):
    client = await strict(api)
    await enqueue(client, A, 1, queue="once")
    [leased] = await lease(client, "once")
    await client.post(
        f"/api/v1/jobs/{leased['job']['id']}/complete", json={"lease_token": leased["lease_token"]}, headers=W
    )
    [entry] = (await (await client.get("/api/v1/queues", headers=A)).json())["queues"]
    assert entry["queue"] == "once" and entry["pending"] == 0 and "oldest_pending_age_secs" not in entry


async def test_pausing_a_queue_stops_claims_of_that_tenants_jobs_only(api):
    client = await strict(api)
    await enqueue(client, A, 2)
    await enqueue(client, B, 2)
    resp = await client.post("/api/v1/queues/shared/pause", headers=A)
    assert resp.status == 200
    assert await resp.json() == {"queue": "shared", "paused": True, "pending": 2, "running": 0}
    leased = await lease(client, max_jobs=10)
    assert {j["job"]["tenant_id"] for j in leased} == {"globex"} and len(leased) == 2
    assert await lease(client) == []
    listed = (await (await client.get("/api/v1/queues", headers=A)).json())["queues"]
    assert listed[0]["paused"] is True
    resumed = await (await client.post("/api/v1/queues/shared/resume", headers=A)).json()
    assert resumed["paused"] is False
    assert {j["job"]["tenant_id"] for j in await lease(client, max_jobs=10)} == {"acme"}


async def test_pause_is_idempotent_and_running_jobs_still_finish(api):
    client = await strict(api)
    await enqueue(client, A, 1)
    [leased] = await lease(client)
    for _ in range(2):
        body = await (await client.post("/api/v1/queues/shared/pause", headers=A)).json()
        assert body["paused"] is True and body["running"] == 1
    done = await client.post(
        f"/api/v1/jobs/{leased['job']['id']}/complete", json={"lease_token": leased["lease_token"]}, headers=W
    )
    assert done.status == 204
    assert (await (await client.post("/api/v1/queues/shared/pause", headers=A)).json())["running"] == 0


async def test_resuming_wakes_a_parked_long_poll(api):
    client = await strict(api)
    await client.post("/api/v1/queues/shared/pause", headers=A)
    await enqueue(client, A, 1)
    poll = asyncio.create_task(client.post("/api/v1/queues/shared/lease", json={"wait_secs": 20}, headers=W))

    async def parked():
        return database_of(client).hub.waiting("shared") == 1

    from tests.support.waiting import eventually

    await eventually(parked)
    await client.post("/api/v1/queues/shared/resume", headers=A)
    leased = (await (await poll).json())["jobs"]
    assert len(leased) == 1 and leased[0]["job"]["tenant_id"] == "acme"


async def test_pausing_an_unused_queue_creates_it_paused(api):
    client = await strict(api)
    body = await (await client.post("/api/v1/queues/fresh/pause", headers=A)).json()
    assert body == {"queue": "fresh", "paused": True, "pending": 0, "running": 0}
    await enqueue(client, A, 1, queue="fresh")
    assert await lease(client, "fresh") == []


async def test_a_read_only_credential_cannot_pause(api):
    client = await api(dev=False, worker_token="w", api_keys="ro:acme:ro")
    resp = await client.post("/api/v1/queues/shared/pause", headers={"Authorization": "Bearer ro"})
    assert resp.status == 403


async def test_one_tenants_backlog_cannot_starve_another_tenants_job(api):
    client = await strict(api)
    await enqueue(client, A, 3000)  # a noisy neighbour, enqueued first
    await client.post("/api/v1/jobs", json={"task_name": "t", "config": {"queue": "shared"}}, headers=B)
    seen = []
    for _ in range(3):
        seen += [j["job"]["tenant_id"] for j in await lease(client)]
        if "globex" in seen:
            break
    assert "globex" in seen, f"globex's job waited behind acme's backlog: {seen}"


async def test_a_batch_lease_interleaves_tenants(api):
    client = await strict(api)
    await enqueue(client, A, 50)
    await enqueue(client, B, 3)
    leased = await lease(client, max_jobs=10)
    tenants = [j["job"]["tenant_id"] for j in leased]
    assert len(leased) == 10 and tenants.count("globex") == 3


async def test_within_a_tenant_priority_order_still_holds(api):
    client = await strict(api)
    for prio in (1, 5, 3):
        await client.post(
            "/api/v1/jobs",
            json={"task_name": "t", "config": {"queue": "shared", "priority": prio}},
            headers=A,
        )
    order = [(await lease(client))[0]["job"]["config"]["priority"] for _ in range(3)]
    assert order == [5, 3, 1]
