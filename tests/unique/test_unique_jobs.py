"""Unique jobs over a window (issue 15): `config.unique` {key, window_secs, on_conflict}.

Within the window of the job that holds a key (per tenant), `skip` answers the holder as an
idempotency-key replay does (201, the holder's id), and `replace` gives a holder that has not
started the newcomer's payload and schedule, or inserts the newcomer when the holder has started.
After the window the key is free. The API, batches and the SQL enqueue functions share one rule,
enforced by the database, so concurrent duplicates from many connections give exactly one job."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import asyncpg
import pytest

from shared.db import janitor as janitor_db
from tests.support.api import database_of

A = {"Authorization": "Bearer ua"}
B = {"Authorization": "Bearer ub"}
W = {"Authorization": "Bearer w"}
TENANTS = "ua:acme,ub:globex"


async def strict(api: Any) -> Any:
    return await api(dev=False, worker_token="w", api_keys=TENANTS)


def unique(key: str, window: int = 3600, on_conflict: str | None = None) -> dict[str, Any]:
    policy: dict[str, Any] = {"key": key, "window_secs": window}
    if on_conflict is not None:
        policy["on_conflict"] = on_conflict
    return policy


async def create(
    client: Any, payload: dict[str, Any], policy: dict[str, Any] | None, headers=A, **job: Any
) -> str:
    config: dict[str, Any] = {"queue": "u"}
    if policy is not None:
        config["unique"] = policy
    resp = await client.post(
        "/api/v1/jobs", json={"task_name": "t", "payload": payload, "config": config, **job}, headers=headers
    )
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["job_id"])


async def get(client: Any, job_id: str, headers=A) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def count(client: Any) -> int:
    return int(await database_of(client).pool.fetchval("SELECT count(*) FROM queueflow.jobs"))


async def lapse(client: Any, key: str) -> None:
    """The window ends now (a controlled clock: the key's expiry moved, not a sleep)."""
    await database_of(client).pool.execute(
        "UPDATE queueflow.unique_keys SET expires_at = now() - interval '1 millisecond' WHERE key = $1", key
    )


async def test_skip_answers_the_holder_within_the_window_and_the_key_frees_itself_after(api):
    client = await strict(api)
    first = await create(client, {"v": 1}, unique("order:1"))
    again = await create(client, {"v": 2}, unique("order:1"))
    assert again == first and await count(client) == 1
    job = await get(client, first)
    assert job["payload"] == {"v": 1}  # skip keeps the holder as it was
    assert job["config"]["unique"] == {"key": "order:1", "window_secs": 3600, "on_conflict": "skip"}

    other = await create(client, {"v": 3}, unique("order:2"))  # another key
    assert other != first
    plain = await create(client, {"v": 4}, None)  # no policy: never held back
    assert "unique" not in (await get(client, plain))["config"]  # omitted when unused

    await lapse(client, "order:1")
    after = await create(client, {"v": 5}, unique("order:1"))
    assert after not in (first, other) and await count(client) == 4
    assert await create(client, {"v": 6}, unique("order:1")) == after  # the new holder's window


async def test_keys_are_per_tenant(api):
    client = await strict(api)
    a = await create(client, {}, unique("k"), headers=A)
    b = await create(client, {}, unique("k"), headers=B)
    assert a != b
    assert (await client.get(f"/api/v1/jobs/{a}", headers=B)).status == 404


async def test_replace_updates_a_waiting_holder_and_inserts_beside_a_started_one(api):
    client = await strict(api)
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    first = await create(client, {"v": 1}, unique("digest", on_conflict="replace"), run_at=later)
    sooner = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    same = await create(client, {"v": 2}, unique("digest", on_conflict="replace"), run_at=sooner)
    assert same == first and await count(client) == 1
    job = await get(client, first)
    assert job["payload"] == {"v": 2}
    assert datetime.fromisoformat(job["scheduled_at"]) < datetime.now(UTC)  # its schedule too

    # The replaced job is due now: a worker leases it (the NOTIFY of its new schedule is not needed
    # for a lease without wait, but the job must be claimable).
    resp = await client.post("/api/v1/queues/u/lease", json={"max_jobs": 5}, headers=W)
    leased = (await resp.json())["jobs"]
    assert [item["job"]["id"] for item in leased] == [first]

    started = await create(client, {"v": 3}, unique("digest", on_conflict="replace"))
    assert started != first and await count(client) == 2  # the holder had started: a new job
    assert (await get(client, first))["payload"] == {"v": 2}  # the running one is untouched
    # The newcomer now holds the key, for a window of its own.
    assert await create(client, {"v": 4}, unique("digest", on_conflict="replace")) == started
    assert (await get(client, started))["payload"] == {"v": 4}


async def test_a_batch_answers_each_item_and_its_own_duplicates_with_the_first(api):
    client = await strict(api)
    held = await create(client, {"n": 0}, unique("b:1"))
    items = [
        {"task_name": "t", "payload": {"n": 1}, "config": {"queue": "u", "unique": unique("b:1")}},
        {"task_name": "t", "payload": {"n": 2}, "config": {"queue": "u", "unique": unique("b:2")}},
        {"task_name": "t", "payload": {"n": 3}, "config": {"queue": "u"}},
        {"task_name": "t", "payload": {"n": 4}, "config": {"queue": "u", "unique": unique("b:2")}},
        {
            "task_name": "t",
            "payload": {"n": 5},
            "config": {"queue": "u", "unique": unique("b:3", on_conflict="replace")},
        },
        {
            "task_name": "t",
            "payload": {"n": 6},
            "config": {"queue": "u", "unique": unique("b:3", on_conflict="replace")},
        },
    ]
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": items}, headers=A)
    assert resp.status == 201, await resp.text()
    body = await resp.json()
    ids = body["job_ids"]
    assert body["count"] == 6 and len(ids) == 6
    assert ids[0] == held  # held before the batch
    assert ids[3] == ids[1] != held  # a duplicate within the batch answers its first
    assert ids[5] == ids[4]
    assert len({ids[1], ids[2], ids[4], held}) == 4
    assert await count(client) == 4
    assert (await get(client, ids[4]))["payload"] == {"n": 6}  # replace within the batch: the last wins


async def test_concurrent_duplicates_over_many_connections_give_exactly_one_job(api, database_url):
    client = await strict(api)
    url = client.make_url("/api/v1/jobs")

    async def post(http: aiohttp.ClientSession, i: int) -> str:
        async with http.post(
            url,
            json={"task_name": "t", "payload": {"i": i}, "config": {"unique": unique("race")}},
            headers=A,
        ) as resp:
            assert resp.status == 201, await resp.text()
            return str((await resp.json())["job_id"])

    async def sql(i: int) -> str:
        conn = await asyncpg.connect(database_url)
        try:
            return str(
                await conn.fetchval(
                    "SELECT queueflow.enqueue('acme', 't', $1::jsonb, config => $2::jsonb)",
                    f'{{"i": {i}}}',
                    '{"unique": {"key": "race", "window_secs": 3600}}',
                )
            )
        finally:
            await conn.close()

    # Separate sessions without keep-alive: every request its own connection, so the API's single
    # enqueues are not all folded into one group commit.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        answers = await asyncio.gather(*(post(http, i) for i in range(24)), *(sql(i) for i in range(12)))
    assert len(set(answers)) == 1
    assert await count(client) == 1


async def test_the_sql_enqueue_functions_take_unique_and_check_it(api, database_url):
    client = await strict(api)
    conn = await asyncpg.connect(database_url)
    try:
        policy = '{"unique": {"key": "s", "window_secs": 60, "on_conflict": "replace"}}'
        first = await conn.fetchval(
            "SELECT queueflow.enqueue('acme', 't', '{\"v\": 1}', config => $1::jsonb)", policy
        )
        batch = await conn.fetch(
            "SELECT * FROM queueflow.enqueue_batch('acme', $1::jsonb)",
            '[{"task_name": "t", "payload": {"v": 2}, "config": ' + policy + "},"
            ' {"task_name": "t", "config": {"unique": {"key": "s2", "window_secs": 60}}}]',
        )
        assert batch[0][0] == first and batch[1][0] != first
        stored = await conn.fetchrow(
            "SELECT payload::text, config->'unique' AS u FROM queueflow.jobs WHERE id = $1", first
        )
        assert stored["payload"] == '{"v": 2}'
        assert stored["u"] == '{"key": "s", "on_conflict": "replace", "window_secs": 60}'
        api_view = await get(client, str(first))
        assert api_view["config"]["unique"]["on_conflict"] == "replace"
        bad = [
            '{"unique": "k"}',
            '{"unique": {"window_secs": 60}}',
            '{"unique": {"key": "", "window_secs": 60}}',
            '{"unique": {"key": "k"}}',
            '{"unique": {"key": "k", "window_secs": 0}}',
            '{"unique": {"key": "k", "window_secs": 1.5}}',
            '{"unique": {"key": "k", "window_secs": 60, "on_conflict": "merge"}}',
            '{"unique": {"key": "k", "window_secs": 60, "extra": 1}}',
        ]
        for config in bad:
            with pytest.raises(asyncpg.InvalidParameterValueError, match="unique"):
                await conn.fetchval("SELECT queueflow.enqueue('acme', 't', config => $1::jsonb)", config)
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "policy",
    [
        "k",
        {},
        {"key": "k"},
        {"window_secs": 60},
        {"key": "", "window_secs": 60},
        {"key": "x" * 256, "window_secs": 60},
        {"key": "é" * 128, "window_secs": 60},  # 256 bytes
        {"key": "a\nb", "window_secs": 60},
        {"key": "k", "window_secs": 0},
        {"key": "k", "window_secs": 31_536_001},
        {"key": "k", "window_secs": "60"},
        {"key": "k", "window_secs": 60, "on_conflict": "merge"},
        {"key": "k", "window_secs": 60, "extra": True},
    ],
)
async def test_a_bad_unique_policy_is_a_400_with_the_error_body(api, policy):
    client = await strict(api)
    for path, body in (
        ("/api/v1/jobs", {"task_name": "t", "config": {"unique": policy}}),
        ("/api/v1/jobs/batch", {"jobs": [{"task_name": "t", "config": {"unique": policy}}]}),
    ):
        resp = await client.post(path, json=body, headers=A)
        assert resp.status == 400, (path, await resp.text())
        assert (await resp.json())["error"]
    assert await count(client) == 0


async def test_workflow_steps_and_cron_schedules_refuse_unique(api):
    client = await strict(api)
    step = {"name": "a", "task_name": "t", "config": {"unique": unique("w")}}
    resp = await client.post("/api/v1/workflows", json={"name": "w", "steps": [step]}, headers=A)
    assert resp.status == 400, await resp.text()
    cron = {"name": "c", "cron_expr": "* * * * *", "task_name": "t", "config": {"unique": unique("c")}}
    resp = await client.post("/api/v1/cron", json=cron, headers=A)
    assert resp.status == 400, await resp.text()


async def test_a_key_whose_job_is_gone_is_free_and_lapsed_keys_are_swept(api):
    client = await strict(api)
    pool = database_of(client).pool
    first = await create(client, {}, unique("gone"))
    await pool.execute("DELETE FROM queueflow.jobs WHERE id = $1::uuid", first)  # as retention would
    second = await create(client, {}, unique("gone"))
    assert second != first

    await create(client, {}, unique("old"))
    await lapse(client, "old")
    assert await janitor_db.prune_lapsed_unique_keys(pool, 100) == 1
    assert await pool.fetchval("SELECT array_agg(key ORDER BY key) FROM queueflow.unique_keys") == ["gone"]


async def test_concurrent_batches_over_the_same_keys_in_opposite_orders_never_deadlock(api):
    client = await strict(api)
    keys = [f"k{n:02}" for n in range(20)]

    async def batch(order: list[str], n: int) -> list[str]:
        jobs = [{"task_name": "t", "payload": {"n": n}, "config": {"unique": unique(k)}} for k in order]
        resp = await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=A)
        assert resp.status == 201, await resp.text()  # a deadlock would be a 500 (or a 503)
        return list((await resp.json())["job_ids"])

    answers = await asyncio.gather(*(batch(keys if n % 2 else keys[::-1], n) for n in range(10)))
    holders = dict(zip(keys[::-1], answers[0], strict=True))  # batch 0 went in reversed
    for n, ids in enumerate(answers):
        order = keys if n % 2 else keys[::-1]
        assert [holders[k] for k in order] == ids  # every batch answers the same holder per key
    assert await count(client) == len(keys)
