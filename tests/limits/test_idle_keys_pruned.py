"""The state rows of idle limit keys are deleted (migration 31), and only theirs: a key whose jobs
hold slots, whose rate window or wake-up is still on, that a claim used lately, or whose row a
claim holds keeps its row. The janitor goes round the table a page at a time; the next claim that
meets a job of a pruned key makes its row again, with its policy."""

from __future__ import annotations

import dataclasses
import uuid

import asyncpg

from shared.db import jobs as jobs_db
from shared.db import limits
from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig, NewJob
from tests.limits.helpers import A, complete, enqueue, lease, put_limit, strict
from tests.support.api import janitor_of

IDLE_SECS = 3600.0
STATE = """INSERT INTO queueflow.limit_state
    (tenant_key, key, concurrency, running, rate_count, rate_per_secs, rate_start, wake_at, used_at)
VALUES ('', $1, $2, $3, $4, $5, now() - make_interval(secs => $6), now() + make_interval(secs => $7),
        now() - make_interval(secs => $8))"""


async def keys(db: asyncpg.Connection) -> set[str]:
    return {r["key"] for r in await db.fetch("SELECT key FROM queueflow.limit_state")}


async def test_only_idle_keys_with_nothing_running_or_due_lose_their_rows(db, database_url):
    await init_connection(db)  # jsonb as Python objects, like the server's pool
    old = 2 * IDLE_SECS
    #   key, concurrency, running, rate count, per secs, rate start (s ago), wake-up (s from now), used (s ago)
    rows = [
        ("idle", 2, 0, None, None, None, None, old),
        ("released", 2, 1, None, None, None, None, old),  # its one slot released, not yet folded
        ("rate-over", None, 0, 10, 60.0, 200.0, None, old),  # two windows ago
        ("used-lately", 2, 0, None, None, None, None, 60.0),
        ("slot-held", 2, 1, None, None, None, None, old),
        ("rate-on", None, 0, 10, 60.0, 90.0, None, old),
        ("waking", None, 0, 10, 60.0, None, 30.0, old),
        ("row-held", 2, 0, None, None, None, None, old),
        ("job-running", 2, 0, None, None, None, None, old),  # a running job names it (a count gone wrong)
    ]
    for row in rows:
        await db.execute(STATE, *row)
    await db.execute("INSERT INTO queueflow.limit_releases (tenant_key, key) VALUES ('', 'released')")
    [job] = await jobs_db.insert_jobs(
        db, None, [NewJob(task_name="t", queue="q", config=JobConfig(limits=("job-running",)))]
    )
    await db.execute(
        "UPDATE queueflow.jobs SET status = 'running', locked_until = now() + interval '1 minute' WHERE id = $1",
        job,
    )
    holder = await asyncpg.connect(database_url)
    try:
        async with holder.transaction():
            await holder.execute("SELECT 1 FROM queueflow.limit_state WHERE key = 'row-held' FOR UPDATE")
            seen, pruned, after = await limits.prune_idle_keys(db, ("", ""), 100, IDLE_SECS)
    finally:
        await holder.close()

    assert (seen, pruned, after) == (len(rows), 3, None)
    assert await keys(db) == {"used-lately", "slot-held", "rate-on", "waking", "row-held", "job-running"}
    assert await db.fetchval("SELECT count(*) FROM queueflow.limit_releases") == 0


async def test_the_pruning_goes_round_the_table_a_page_at_a_time(db):
    for n in range(25):
        await db.execute(STATE, f"k:{n:02}", 1, 0, None, None, None, None, 2 * IDLE_SECS)
    pages = []
    after: tuple[str, str] | None = ("", "")
    while after is not None:
        seen, pruned, after = await limits.prune_idle_keys(db, after, 10, IDLE_SECS)
        pages.append((seen, pruned, after))
    assert pages == [(10, 10, ("", "k:09")), (10, 10, ("", "k:19")), (5, 5, None)]
    assert await keys(db) == set()


async def test_the_janitor_prunes_an_idle_key_and_its_next_job_makes_its_row_again(api):
    client = await strict(api)
    await put_limit(client, "c:*", {"concurrency": 1})
    await enqueue(client, 2, ["c:1"])
    for _ in range(2):
        [job] = await lease(client)
        await complete(client, job)
    janitor = janitor_of(client)
    pool = janitor.db.pool
    assert await keys(pool) == {"c:1"}
    assert await janitor.prune_idle_limit_keys() == 0  # used a moment ago (the default: an hour)

    janitor.settings = dataclasses.replace(janitor.settings, limit_key_idle_secs=0.0)
    assert await janitor.prune_idle_limit_keys() == 1
    assert await keys(pool) == set()

    await enqueue(client, 3, ["c:1"])
    assert len(await lease(client, max_jobs=3)) == 1  # the wildcard's concurrency, copied again
    body = await (await client.get("/api/v1/limits/c:*", headers=A)).json()
    assert body["running"] == 1
    assert [tuple(r) for r in await pool.fetch("SELECT key, concurrency FROM queueflow.limit_state")] == [
        ("c:1", 1)
    ]


async def test_a_pruned_keys_releases_go_with_it_and_its_next_claim_counts_from_none(db):
    await init_connection(db)
    await db.execute(
        "INSERT INTO queueflow.limit_policies (tenant_key, key, concurrency) VALUES ('', 'c:*', 2)"
    )
    await jobs_db.insert_jobs(db, None, [NewJob(task_name="t", queue="q", config=JobConfig(limits=("c:1",)))])
    assert len(await jobs_db.claim(db, "q", 5, 60, rotation=0, key=uuid.uuid4())) == 1
    await db.execute("UPDATE queueflow.jobs SET status = 'completed'")  # (its release appended)
    await db.execute("UPDATE queueflow.limit_state SET used_at = now() - interval '2 hours'")
    assert (await limits.prune_idle_keys(db, ("", ""), 10, IDLE_SECS))[1] == 1
    await jobs_db.insert_jobs(
        db, None, [NewJob(task_name="t", queue="q", config=JobConfig(limits=("c:1",))) for _ in range(3)]
    )
    assert len(await jobs_db.claim(db, "q", 5, 60, rotation=1, key=uuid.uuid4())) == 2
    assert await db.fetchval("SELECT running FROM queueflow.limit_state WHERE key = 'c:1'") == 2
