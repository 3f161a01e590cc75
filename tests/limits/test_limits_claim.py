"""The claim enforces limits: concurrency per key (exact and wildcard policies, several keys per
job), slots given back on every way out of `running`, no head-of-line blocking, a parked lease
woken by a freed slot, and the rate window (its arithmetic on a fixed clock)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from shared.db import jobs as jobs_db
from shared.db import limits
from tests.limits.helpers import A, W, complete, enqueue, lease, put_limit, strict
from tests.support.api import database_of, janitor_of
from tests.support.waiting import eventually
from tests.workflow.helpers import create, manual, step_jobs, wait_step_job
from tests.workflow.helpers import lease as lease_steps


async def running_of(client, key: str) -> int:
    return (await (await client.get(f"/api/v1/limits/{key}", headers=A)).json())["running"]


async def test_a_key_runs_at_most_its_concurrency_and_a_freed_slot_is_taken_next(api):
    client = await strict(api)
    await put_limit(client, "k", {"concurrency": 2})
    await enqueue(client, 5, ["k"])
    first = await lease(client, max_jobs=10)
    assert len(first) == 2
    assert await lease(client, max_jobs=10) == []
    await complete(client, first[0])
    again = await lease(client, max_jobs=10)
    assert len(again) == 1
    assert await running_of(client, "k") == 2


async def test_the_next_limited_job_is_claimed_in_priority_order(api):
    client = await strict(api)
    await put_limit(client, "k", {"concurrency": 1})
    [low] = await enqueue(client, 1, ["k"], priority=1)
    [high] = await enqueue(client, 1, ["k"], priority=9)
    [mid] = await enqueue(client, 1, ["k"], priority=5)
    order = []
    for _ in range(3):
        [job] = await lease(client, max_jobs=10)
        order.append(job["job"]["id"])
        await complete(client, job)
    assert order == [high, mid, low]


async def test_a_wildcard_applies_to_each_key_separately_and_an_exact_policy_wins(api):
    client = await strict(api)
    await put_limit(client, "customer:*", {"concurrency": 1})
    await put_limit(client, "customer:vip", {"concurrency": 3})
    await enqueue(client, 3, ["customer:1"])
    await enqueue(client, 3, ["customer:2"])
    await enqueue(client, 5, ["customer:vip"])
    await enqueue(client, 2, ["other:1"])  # no policy: unlimited
    leased = await lease(client, max_jobs=50)
    per_key: dict[str, int] = {}
    for job in leased:
        [key] = job["job"]["config"]["limits"]
        per_key[key] = per_key.get(key, 0) + 1
    assert per_key == {"customer:1": 1, "customer:2": 1, "customer:vip": 3, "other:1": 2}
    wildcard = await (await client.get("/api/v1/limits/customer:*", headers=A)).json()
    assert wildcard["running"] == 2  # the keys it governs, not the vip key with its own policy


async def test_a_job_with_several_keys_needs_room_in_every_one(api):
    client = await strict(api)
    await put_limit(client, "api:stripe", {"concurrency": 1})
    await enqueue(client, 1, ["customer:1", "api:stripe"])
    await enqueue(client, 1, ["customer:2", "api:stripe"])
    await enqueue(client, 1, ["customer:3"])
    leased = await lease(client, max_jobs=10)
    keys = sorted(tuple(j["job"]["config"]["limits"]) for j in leased)
    assert len(keys) == 2 and ("customer:3",) in keys  # one of the stripe jobs waits
    stripe = next(j for j in leased if "api:stripe" in j["job"]["config"]["limits"])
    await complete(client, stripe)
    [last] = await lease(client, max_jobs=10)
    assert "api:stripe" in last["job"]["config"]["limits"]


async def test_a_policy_change_applies_from_the_next_claim_and_cancels_nothing(api):
    client = await strict(api)
    await put_limit(client, "k", {"concurrency": 3})
    await enqueue(client, 6, ["k"])
    running = await lease(client, max_jobs=10)
    assert len(running) == 3
    await put_limit(client, "k", {"concurrency": 1})
    assert await running_of(client, "k") == 3  # nothing cancelled
    await complete(client, running[0])
    await complete(client, running[1])
    assert await lease(client, max_jobs=10) == []  # still 1 running, the cap is 1
    await complete(client, running[2])
    assert len(await lease(client, max_jobs=10)) == 1
    assert (await client.delete("/api/v1/limits/k", headers=A)).status == 204
    assert len(await lease(client, max_jobs=10)) == 2  # no policy: unlimited


async def test_head_of_line_a_saturated_key_never_holds_back_other_jobs(api):
    client = await strict(api)
    await put_limit(client, "busy", {"concurrency": 1})
    await enqueue(client, 10_000, ["busy"], priority=9)
    [held] = await lease(client, max_jobs=1)
    [free] = await enqueue(client, 1, None, priority=0)
    [other] = await enqueue(client, 1, ["quiet"], priority=-5)
    got = await lease(client, max_jobs=100)
    assert {j["job"]["id"] for j in got} == {free, other}
    assert held["job"]["config"]["limits"] == ["busy"]


async def fail(client, job, retryable: bool) -> None:
    resp = await client.post(
        f"/api/v1/jobs/{job['job']['id']}/fail",
        json={"lease_token": job["lease_token"], "error": "boom", "retryable": retryable},
        headers=W,
    )
    assert resp.status in (200, 204), await resp.text()


async def test_a_slot_comes_back_on_every_way_out_of_running(api):
    client = await strict(api)
    db = database_of(client)
    await put_limit(client, "one", {"concurrency": 1})
    await enqueue(client, 8, ["one"], max_retries=5, retry_delay_secs=0, jitter_factor=0)

    async def take() -> dict:
        [job] = await lease(client, max_jobs=10)
        assert await lease(client, max_jobs=10) == []  # the slot is held
        assert await running_of(client, "one") == 1
        return job

    await complete(client, await take())  # complete
    await fail(client, await take(), retryable=True)  # fail with a retry left
    await fail(client, await take(), retryable=False)  # fail for good: dead letter
    job = await take()
    resp = await client.post(f"/api/v1/jobs/{job['job']['id']}/cancel", headers=A)
    assert resp.status in (200, 204), await resp.text()  # cancelled while running
    # the lease expires and the janitor reclaims it
    resp = await client.post("/api/v1/queues/q/lease", json={"max_jobs": 1, "lease_secs": 1}, headers=W)
    [expiring] = (await resp.json())["jobs"]
    await db.pool.execute(
        "UPDATE queueflow.jobs SET locked_until = now() - interval '1 second' WHERE id = $1",
        expiring["job"]["id"],
    )
    assert await janitor_of(client).reclaim_expired() == 1
    # given back unfinished (a graceful shutdown's release)
    job = await take()
    assert await jobs_db.release(db.pool, [(uuid.UUID(job["job"]["id"]), uuid.UUID(job["lease_token"]))]) == 1
    # deleted while running
    job = await take()
    await db.pool.execute("DELETE FROM queueflow.jobs WHERE id = $1", job["job"]["id"])
    assert await running_of(client, "one") == 0
    assert len(await lease(client, max_jobs=10)) == 1


async def test_the_janitor_folds_released_slots_no_claim_visits(api):
    client = await strict(api)
    db = database_of(client)
    await put_limit(client, "k", {"concurrency": 2})
    await enqueue(client, 2, ["k"])
    for job in await lease(client, max_jobs=10):
        await complete(client, job)
    assert await db.pool.fetchval("SELECT running FROM queueflow.limit_state WHERE key = 'k'") == 2
    assert await running_of(client, "k") == 0  # the releases are counted before they are folded
    assert await limits.fold_releases(db.pool, 100) == 1
    assert await db.pool.fetchval("SELECT running FROM queueflow.limit_state WHERE key = 'k'") == 0
    assert await db.pool.fetchval("SELECT count(*) FROM queueflow.limit_releases") == 0


async def test_a_parked_lease_is_woken_by_a_freed_slot_not_by_a_poll(api):
    client = await strict(api, worker_poll_secs=120.0)
    await put_limit(client, "k", {"concurrency": 1})
    await enqueue(client, 2, ["k"])
    [first] = await lease(client, max_jobs=10)
    parked = asyncio.create_task(
        client.post("/api/v1/queues/q/lease", json={"max_jobs": 10, "wait_secs": 30}, headers=W)
    )
    await asyncio.sleep(0.5)
    assert not parked.done()
    await complete(client, first)
    resp = await asyncio.wait_for(parked, 40)
    assert len((await resp.json())["jobs"]) == 1  # woken by the release's NOTIFY (the poll is 120 s)


async def test_the_claim_never_deadlocks_with_completions_of_many_keys(api):
    client = await strict(api)
    await put_limit(client, "k:*", {"concurrency": 2})
    for i in range(20):
        await enqueue(client, 10, [f"k:{i}", "shared"])

    db = database_of(client)

    async def worker() -> None:
        while await db.pool.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status <> 'completed'"):
            got = await lease(client, max_jobs=20)  # a deadlock would be a 500 here or below
            await asyncio.gather(*(complete(client, j) for j in got))
            for job in got:
                assert len(job["job"]["config"]["limits"]) == 2

    await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(6))), 120)
    assert await db.pool.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'completed'") == 200


# --- the rate window on a fixed clock ------------------------------------------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def window(db, count, per, start, prev, cur, at, taken=0):
    return await db.fetchrow(
        "SELECT * FROM queueflow.rate_window($1, $2, $3, $4, $5, $6, $7)",
        count,
        per,
        start,
        prev,
        cur,
        at,
        taken,
    )


async def test_rate_window_arithmetic_on_a_fixed_clock(db):
    fresh = await window(db, 20, 1.0, None, 0, 0, T0)
    assert (fresh["room"], fresh["start"], fresh["prev"], fresh["cur"]) == (20, T0, 0, 0)
    used = await window(db, 20, 1.0, T0, 0, 20, T0 + timedelta(seconds=0.5))
    assert used["room"] == 0
    assert used["next_at"] == T0 + timedelta(seconds=1, microseconds=1)  # as the next window opens
    assert (await window(db, 20, 1.0, T0, 0, 20, used["next_at"]))["room"] == 1
    one = await window(db, 1, 60.0, None, 0, 0, T0, taken=1)
    assert one["room"] == 1 and one["next_at"] == T0 + timedelta(seconds=60, microseconds=1)
    rolled = await window(db, 20, 1.0, T0, 0, 20, T0 + timedelta(seconds=1.25))
    assert (rolled["start"], rolled["prev"], rolled["cur"]) == (T0 + timedelta(seconds=1), 20, 0)
    assert rolled["room"] == 5  # 20 - 20 * 0.75
    idle = await window(db, 20, 1.0, T0, 5, 20, T0 + timedelta(seconds=2.5))
    assert (idle["prev"], idle["cur"], idle["room"]) == (0, 0, 20)


async def test_rate_window_never_starts_more_than_its_count_in_any_window_on_a_fixed_clock(db):
    # Claim greedily every 10 ms for 10 s of backlog: 20 in every window, 200 in the 10 s, and no
    # 1-second span with more than 20 but the one where the first burst meets the next window.
    start, prev, cur = None, 0, 0
    starts: list[float] = []
    for step in range(1000):
        at = T0 + timedelta(milliseconds=10 * step)
        w = await window(db, 20, 1.0, start, prev, cur, at)
        start, prev, cur = w["start"], w["prev"], w["cur"] + w["room"]
        starts += [step / 100] * w["room"]
    assert len(starts) == 200
    spans = [sum(1 for s in starts if t <= s < t + 1) for t in [x / 100 for x in range(900)]]
    assert max(spans) <= 21 and sorted(spans)[-2] <= 21


async def test_a_rate_of_one_per_window_starts_one_per_window(db):
    start, prev, cur = None, 0, 0
    starts = 0
    for step in range(600):  # 10 minutes, every second, of 1 per 60 s
        w = await window(db, 1, 60.0, start, prev, cur, T0 + timedelta(seconds=step))
        start, prev, cur = w["start"], w["prev"], w["cur"] + w["room"]
        starts += w["room"]
    assert starts == 10


async def test_a_keys_room_is_its_concurrency_left_with_unfolded_releases_and_its_rate_room(db):
    # queueflow.limit_room, which the claim asks for each waiting key it visits one by one.
    await db.execute(
        """INSERT INTO queueflow.limit_state
               (tenant_key, key, concurrency, running, rate_count, rate_per_secs, rate_start, rate_cur)
           VALUES ('', 'free', NULL, 0, NULL, NULL, NULL, 0),
                  ('', 'conc', 5, 4, NULL, NULL, NULL, 0),
                  ('', 'full', 2, 2, NULL, NULL, NULL, 0),
                  ('', 'rate', NULL, 0, 20, 60, now() - interval '1 second', 20),
                  ('', 'both', 3, 0, 2, 60, NULL, 0),
                  ('t', 'conc', 5, 0, NULL, NULL, NULL, 0)"""
    )
    await db.execute(
        "INSERT INTO queueflow.limit_releases (tenant_key, key) VALUES ('', 'conc'), ('', 'conc'), ('t', 'free')"
    )
    rooms = {
        (r["tenant_key"], r["key"]): r["room"]
        for r in await db.fetch(
            "SELECT tenant_key, key, queueflow.limit_room(s, 1000) AS room FROM queueflow.limit_state s"
        )
    }
    assert rooms == {
        ("", "free"): 1000,  # neither limit: the caller's `big`
        ("", "conc"): 3,  # 5 - 4 running + 2 releases not yet folded in
        ("", "full"): 0,
        ("", "rate"): 0,  # 20 started in the current window
        ("", "both"): 2,  # the rate's 2 below the concurrency's 3
        ("t", "conc"): 5,  # another tenant's releases are not this key's
    }


async def test_workflow_steps_and_cron_schedules_carry_limits_to_their_jobs(api):
    client = await api(mode="all")
    dev = {"Authorization": "Bearer dev"}
    resp = await client.put("/api/v1/limits/wf:k", json={"concurrency": 1}, headers=dev)
    assert resp.status == 200
    wf_id = await create(
        client, [manual("a", config={"limits": ["wf:k"]}), manual("b", config={"limits": ["wf:k"]})]
    )
    for name in ("a", "b"):
        await wait_step_job(client, wf_id, name)
    leased = await lease_steps(client, max_jobs=10)
    assert len(leased) == 1  # both steps are due; the key lets one run
    assert leased[0][0]["config"]["limits"] == ["wf:k"]
    assert len(await step_jobs(client, wf_id)) == 2

    bad = await client.post(
        "/api/v1/workflows",
        json={"name": "w", "steps": [manual("a", config={"limits": ["x", "x"]})]},
        headers=dev,
    )
    assert bad.status == 400  # checked when the workflow is written, not when its job is
    cron = await client.post(
        "/api/v1/cron",
        json={"name": "c", "cron_expr": "* * * * *", "task_name": "t", "config": {"limits": ["cron:k"]}},
        headers=dev,
    )
    assert cron.status == 201, await cron.text()
    db = database_of(client)
    await db.pool.execute("UPDATE queueflow.cron_schedules SET next_run_at = now() - interval '1 second'")
    # (the app's own janitor loop may fire it first)
    await janitor_of(client).fire_crons()
    fired = await eventually(
        lambda: db.pool.fetchval("SELECT config->'limits' FROM queueflow.jobs WHERE task_name = 't'")
    )
    assert fired == ["cron:k"]
    bad_cron = await client.post(
        "/api/v1/cron",
        json={"name": "d", "cron_expr": "* * * * *", "task_name": "t", "config": {"limits": ["a b"]}},
        headers=dev,
    )
    assert bad_cron.status == 400
