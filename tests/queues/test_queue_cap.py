"""The cap on a tenant's distinct queues (--max-queues-per-tenant, migration 35): a queue new to a
tenant past it is refused with 409 and the contract's error body, on every path that makes one;
the tenant's existing queues keep working; concurrent creates cannot race past it."""

import asyncio

import asyncpg
import pytest

from shared.db.pool import init_connection
from tests.support.api import database_of, janitor_of
from tests.support.waiting import eventually

TENANTS = "ka:acme,kb:globex"
A = {"Authorization": "Bearer ka"}
B = {"Authorization": "Bearer kb"}
W = {"Authorization": "Bearer w"}


async def capped(api, cap, **kw):
    return await api(dev=False, worker_token="w", api_keys=TENANTS, max_queues_per_tenant=cap, **kw)


async def create(client, queue, headers=A):
    return await client.post(
        "/api/v1/jobs", json={"task_name": "t", "config": {"queue": queue}}, headers=headers
    )


async def batch(client, queues, headers=A):
    jobs = [{"task_name": "t", "config": {"queue": q}} for q in queues]
    return await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=headers)


async def assert_refused(resp, queue):
    assert resp.status == 409, await resp.text()
    body = await resp.json()
    assert set(body) == {"error", "timestamp"}
    assert body["error"].startswith(
        "conflict: too many queues: a tenant may have 3 (--max-queues-per-tenant)"
    )
    assert f"'{queue}' would be one more" in body["error"]


async def queue_names(client, headers=A):
    return [
        q["queue"] for q in (await (await client.get("/api/v1/queues", headers=headers)).json())["queues"]
    ]


async def test_a_queue_past_the_cap_is_409_on_single_and_batch_create_and_existing_queues_still_work(api):
    client = await capped(api, 3)
    for queue in ("q1", "q2", "q3"):
        assert (await create(client, queue)).status == 201
    await assert_refused(await create(client, "q4"), "q4")
    resp = await batch(client, ["q1", "q2", "q5", "q6"])  # the whole batch is one statement
    assert resp.status == 409
    assert (await resp.json())["error"].startswith("conflict: too many queues:")
    # Nothing of the refused batch was written; the tenant's own queues still take jobs.
    assert (await batch(client, ["q1", "q2", "q3"] * 40)).status == 201  # (by COPY: 120 jobs)
    assert (await create(client, "q2")).status == 201
    leased = await client.post("/api/v1/queues/q1/lease", json={"max_jobs": 100}, headers=W)
    assert len((await leased.json())["jobs"]) == 41
    assert await queue_names(client) == ["q1", "q2", "q3"]
    # Each tenant has a cap of its own.
    assert (await batch(client, ["q4", "q5", "q6"], headers=B)).status == 201


async def test_concurrent_creates_on_new_queues_cannot_race_past_the_cap(api):
    client = await capped(api, 3)
    answers = await asyncio.gather(*(create(client, f"race-{n}") for n in range(30)))
    assert sorted(r.status for r in answers).count(201) == 3
    assert all(r.status in (201, 409) for r in answers)
    assert len(await queue_names(client)) == 3


async def test_transactions_growing_one_tenant_at_once_wait_for_each_other_and_count_exactly(
    api, database_url, db
):
    await capped(api, 3)
    conns = [await asyncpg.connect(database_url) for _ in range(8)]
    release = asyncio.Event()

    async def grow(conn, n):
        async with conn.transaction():
            await conn.execute("SELECT queueflow.enqueue('acme', 't', queue => $1)", f"tx-{n}")
            await release.wait()  # still open: the others' counts cannot see this one yet

    writers = [asyncio.create_task(grow(conn, n)) for n, conn in enumerate(conns)]
    try:
        # The first holds the tenant's total; every other waits for its row lock.
        async def seven_wait() -> bool:
            waiting = await db.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            return waiting == 7

        await eventually(seven_wait)
    finally:
        release.set()
        outcomes = await asyncio.gather(*writers, return_exceptions=True)
        for conn in conns:
            await conn.close()
    assert [o for o in outcomes if not isinstance(o, BaseException)] == [None] * 3
    assert {getattr(o, "sqlstate", None) for o in outcomes if isinstance(o, BaseException)} == {"QFQ01"}
    assert await db.fetchval("SELECT count(*) FROM queueflow.tenant_queues WHERE tenant_key = 'acme'") == 3
    assert (
        await db.fetchval("SELECT queues FROM queueflow.tenant_queue_totals WHERE tenant_key = 'acme'") == 3
    )


async def test_pausing_a_queue_never_used_counts_toward_the_cap(api):
    client = await capped(api, 3)
    for queue in ("p1", "p2", "p3"):
        assert (await client.post(f"/api/v1/queues/{queue}/pause", headers=A)).status == 200
    await assert_refused(await client.post("/api/v1/queues/p4/pause", headers=A), "p4")
    await assert_refused(await create(client, "q1"), "q1")
    assert (await client.post("/api/v1/queues/p1/resume", headers=A)).status == 200


async def test_a_cron_schedule_or_a_workflow_that_would_pass_the_cap_is_refused_when_made(api):
    client = await capped(api, 3)
    assert (await batch(client, ["q1", "q2"])).status == 201  # room for one more
    steps = [
        {"name": "a", "task_name": "t", "queue": "q1"},
        {"name": "b", "task_name": "t", "queue": "q3", "depends_on": ["a"]},
        {"name": "c", "task_name": "t", "queue": "q4", "depends_on": ["a"]},  # two new: one too many
    ]
    resp = await client.post("/api/v1/workflows", json={"name": "w", "steps": steps}, headers=A)
    await assert_refused(resp, "q3")  # (the first of the new names)
    cron = {"name": "c", "cron_expr": "* * * * *", "task_name": "t"}
    resp = await client.post("/api/v1/cron", json={**cron, "queue": "q3"}, headers=A)
    assert resp.status == 201, await resp.text()  # the third
    assert (await create(client, "q3")).status == 201
    cron["name"] = "d"
    await assert_refused(await client.post("/api/v1/cron", json={**cron, "queue": "q9"}, headers=A), "q9")
    sub = {"name": "s", "steps": [{"name": "x", "task_name": "t", "queue": "q2"}, {"name": "y", "task_name": "t", "queue": "q8"}]}  # fmt: skip
    nested = [{"name": "a", "task_name": "t", "queue": "q1"}, {"name": "sub", "workflow": sub}]
    resp = await client.post("/api/v1/workflows", json={"name": "w", "steps": nested}, headers=A)
    await assert_refused(resp, "q8")
    assert await queue_names(client) == ["q1", "q2", "q3"]  # nothing of the refused ones was written
    steps[2]["queue"] = "q2"
    resp = await client.post("/api/v1/workflows", json={"name": "w", "steps": steps}, headers=A)
    assert resp.status == 201, await resp.text()


async def test_a_cron_occurrence_past_the_cap_is_skipped_and_the_others_still_fire(api, db):
    client = await capped(api, 0)  # no cap while the schedules are made
    cron = {"cron_expr": "* * * * *", "task_name": "t"}
    for name, queue in (("fresh", "never-used"), ("known", "used")):
        resp = await client.post("/api/v1/cron", json={**cron, "name": name, "queue": queue}, headers=A)
        assert resp.status == 201, await resp.text()
    assert (await create(client, "used")).status == 201
    await db.execute("UPDATE queueflow.queue_cap SET max_queues_per_tenant = 1")  # lowered since
    await db.execute("UPDATE queueflow.cron_schedules SET next_run_at = now() - interval '1 second'")
    assert await janitor_of(client).fire_crons() == 1
    fired = await db.fetch("SELECT queue_name FROM queueflow.jobs WHERE metadata ? 'cron_id'")
    assert [r["queue_name"] for r in fired] == ["used"]
    # The skipped schedule moved on to its next occurrence instead of blocking the batch.
    assert await db.fetchval("SELECT count(*) FROM queueflow.cron_schedules WHERE next_run_at <= now()") == 0


async def test_the_sql_enqueue_functions_are_capped_too(api, database_url):
    await capped(api, 1)  # records the cap
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        await conn.execute("SELECT queueflow.enqueue('acme', 't', queue => 'one')")
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.execute("SELECT queueflow.enqueue('acme', 't', queue => 'two')")
        assert refused.value.sqlstate == "QFQ01"
        assert "too many queues" in str(refused.value)
        await conn.execute("SELECT queueflow.enqueue('acme', 't', queue => 'one')")
        await conn.execute("SELECT queueflow.enqueue('globex', 't', queue => 'two')")
    finally:
        await conn.close()


async def test_a_cap_of_zero_is_no_cap_and_lowering_the_cap_keeps_a_tenants_queues(api):
    client = await capped(api, 0)
    assert (await batch(client, [f"q{n}" for n in range(60)])).status == 201
    db = database_of(client)
    await db.pool.execute("UPDATE queueflow.queue_cap SET max_queues_per_tenant = 3")
    assert (await batch(client, ["q0", "q59"])).status == 201
    await assert_refused(await create(client, "q60"), "q60")


async def test_the_default_cap_is_a_thousand_queues_and_the_api_records_the_setting(api, db):
    await api(dev=False, worker_token="w", api_keys=TENANTS)
    assert await db.fetchval("SELECT max_queues_per_tenant FROM queueflow.queue_cap") == 1000
    await capped(api, 7)
    assert await db.fetchval("SELECT max_queues_per_tenant FROM queueflow.queue_cap") == 7
