"""Jobs with several limit keys, all enqueued in one batch (so they share their timestamps): a claim
never refuses every job while one of them fits (migration 34), never passes a key's cap, and the
janitor sets right a key's running count that disagrees with its running jobs.

Before migration 34 each key ranked a batch's tied jobs in its own order, so the first places of
two keys could go to different jobs carrying both, and every candidate was refused: the queue
stalled with every slot free (issue 37). The scenarios below are drawn from a seeded generator, so
a failure names a scenario that fails again."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from shared.db import limits
from tests.limits.helpers import A, W, put_limit, strict
from tests.support.api import database_of, janitor_of

SCENARIOS = 40
KEYS = ("k0", "k1", "k2", "k3")


async def waiting_and_running(db: Any, queue: str) -> tuple[list[list[str]], Counter[str]]:
    rows = await db.fetch(
        "SELECT status, limit_keys FROM queueflow.jobs WHERE queue_name = $1 AND status IN ('pending', 'running')",
        queue,
    )
    running: Counter[str] = Counter()
    waiting = []
    for r in rows:
        if r["status"] == "running":
            running.update(r["limit_keys"])
        else:
            waiting.append(list(r["limit_keys"]))
    return waiting, running


async def test_a_claim_never_refuses_every_job_while_one_fits_and_never_passes_a_cap(api):
    client = await strict(api)
    pool = database_of(client).pool
    rng = random.Random(37)
    caps = {}
    for key in KEYS:
        caps[key] = rng.randint(1, 3)
        await put_limit(client, key, {"concurrency": caps[key]})
    for scenario in range(SCENARIOS):
        queue = f"multi-{scenario}"
        jobs = [
            {
                "task_name": "t",
                "payload": {},
                "config": {"queue": queue, "limits": rng.sample(KEYS, rng.randint(1, 3))},
            }
            for _ in range(rng.randint(8, 30))
        ]
        resp = await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=A)
        assert resp.status == 201, await resp.text()
        held: list[dict[str, Any]] = []
        done = 0
        while done < len(jobs):
            resp = await client.post(
                f"/api/v1/queues/{queue}/lease", json={"max_jobs": rng.randint(1, 3)}, headers=W
            )
            leased = (await resp.json())["jobs"]
            held += leased
            waiting, running = await waiting_and_running(pool, queue)
            over = {k: n for k, n in running.items() if n > caps[k]}
            assert not over, f"scenario {scenario}: keys over their caps: {over}"
            if not leased:
                fits = [keys for keys in waiting if all(running[k] < caps[k] for k in keys)]
                assert not fits, (
                    f"scenario {scenario}: a claim gave nothing while {fits} fit ({dict(running)})"
                )
            if held and (not leased or rng.random() < 0.5):
                job = held.pop(rng.randrange(len(held)))
                resp = await client.post(
                    f"/api/v1/jobs/{job['job']['id']}/complete",
                    json={"lease_token": job["lease_token"], "result": {}},
                    headers=W,
                )
                assert resp.status in (200, 204), await resp.text()
                done += 1


async def test_the_janitor_sets_right_a_running_count_that_disagrees_with_the_running_jobs(api):
    client = await strict(api)
    pool = database_of(client).pool
    await put_limit(client, "leaked", {"concurrency": 2})
    await put_limit(client, "lost", {"concurrency": 2})
    for key in ("leaked", "lost"):
        jobs = [
            {"task_name": "t", "payload": {}, "config": {"queue": key, "limits": [key]}} for _ in range(3)
        ]
        assert (await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=A)).status == 201
    # "lost": two of its jobs run, and its row forgets them; "leaked": nothing runs, and its row
    # holds both slots (and a release waits to be folded, which must not be counted twice).
    lost = (await (await client.post("/api/v1/queues/lost/lease", json={"max_jobs": 5}, headers=W)).json())[
        "jobs"
    ]
    assert len(lost) == 2
    await pool.execute("UPDATE queueflow.limit_state SET running = 0 WHERE key = 'lost'")
    await pool.execute(
        "INSERT INTO queueflow.limit_state (tenant_key, key, concurrency, running) VALUES ('acme', 'leaked', 2, 3)"
        " ON CONFLICT (tenant_key, key) DO UPDATE SET running = 3"
    )
    await pool.execute("INSERT INTO queueflow.limit_releases (tenant_key, key) VALUES ('acme', 'leaked')")
    leak = await client.post("/api/v1/queues/leaked/lease", json={"max_jobs": 5}, headers=W)
    assert (await leak.json())["jobs"] == []  # the leaked slots refuse every job

    repaired = await janitor_of(client).repair_limit_keys()

    assert repaired == 2
    state = {
        r["key"]: r["running"]
        for r in await pool.fetch(
            "SELECT key, running FROM queueflow.limit_state WHERE key IN ('leaked', 'lost')"
        )
    }
    assert state == {"leaked": 0, "lost": 2}
    assert await pool.fetchval("SELECT count(*) FROM queueflow.limit_releases WHERE key = 'leaked'") == 0
    leased = await client.post("/api/v1/queues/leaked/lease", json={"max_jobs": 5}, headers=W)
    assert len((await leased.json())["jobs"]) == 2  # its cap again, not more
    third = await client.post("/api/v1/queues/lost/lease", json={"max_jobs": 5}, headers=W)
    assert (await third.json())["jobs"] == []  # two run: the cap holds
    assert await janitor_of(client).repair_limit_keys() == 0  # nothing left to set right
    assert [r.key for r in await limits.repair_running_counts(pool, 10)] == []
