"""A limit key's state row (migration 30): an insert neither reads nor makes one; the first claim
that meets a job of a key without one makes it, with the key's policy, and claims the job in the
same call, from the window or from the key-by-key visit; a policy being written makes the claim
leave the key for the next one rather than copy the policy it replaces; and the claim's plans, made
while the table was empty, probe the rows of its own keys once it holds many."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import asyncpg

from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.db.queries import Q
from shared.domain.jobs import JobConfig, NewJob
from tests.limits.helpers import claim_with_scans, limited_backlog

STATE_ROWS = "SELECT key, concurrency FROM queueflow.limit_state ORDER BY key"


def jobs_of(*keys: tuple[str, ...]) -> list[NewJob]:
    return [NewJob(task_name="t", queue="q", config=JobConfig(limits=k)) for k in keys]


async def policy(db: asyncpg.Connection, key: str, concurrency: int, tenant: str = "") -> None:
    await db.execute(
        "INSERT INTO queueflow.limit_policies (tenant_key, key, concurrency) VALUES ($1, $2, $3)",
        tenant,
        key,
        concurrency,
    )


async def test_an_insert_reads_and_makes_no_state_row(db):
    await init_connection(db)  # jsonb as Python objects, like the server's pool
    await policy(db, "c:*", 3, tenant="acme")
    await db.execute(
        "INSERT INTO queueflow.limit_state (tenant_key, key, concurrency)"
        " SELECT 'acme', 'c:' || g, 3 FROM generate_series(1, 300) g"
    )
    names = ("idx_scan", "seq_scan", "n_tup_ins")
    stats = f"SELECT {', '.join(names)} FROM pg_stat_xact_user_tables WHERE relid = 'queueflow.limit_state'::regclass"
    async with db.transaction():
        before = await db.fetchrow(stats)
        # 300 known keys, 10 new ones and two more
        jobs = jobs_of(*((f"c:{n}", f"other:{n % 2}") for n in range(1, 311)))
        assert len(await jobs_db.insert_jobs(db, "acme", jobs)) == len(jobs)
        after = await db.fetchrow(stats)
    # Version 12 to 29 probed each named key's row and made the missing ones, at every insert.
    assert {name: after[name] - before[name] for name in names} == {
        "idx_scan": 0,
        "seq_scan": 0,
        "n_tup_ins": 0,
    }
    assert await db.fetchval("SELECT count(*) FROM queueflow.limit_state") == 300


async def test_the_first_claim_of_new_keys_makes_their_rows_with_their_policy_and_claims_their_jobs(db):
    await init_connection(db)
    await policy(db, "c:*", 2)
    await policy(db, "c:7", 1)  # an exact policy beats the wildcard
    # 3 jobs of each of c:0 .. c:9, each also of other:0 or other:1 (no policy: unlimited)
    await jobs_db.insert_jobs(db, None, jobs_of(*((f"c:{n % 10}", f"other:{n % 2}") for n in range(30))))
    assert await db.fetchval("SELECT count(*) FROM queueflow.limit_state") == 0

    leases = await jobs_db.claim(db, "q", 30, 60, rotation=0, key=uuid.uuid4())

    per_key = Counter(lease.job.config.limits[0] for lease in leases)
    assert per_key == {**{f"c:{n}": 2 for n in range(10)}, "c:7": 1}
    rows = {r["key"]: r["concurrency"] for r in await db.fetch(STATE_ROWS)}
    assert rows == {**{f"c:{n}": 2 for n in range(10)}, "c:7": 1, "other:0": None, "other:1": None}
    running = {
        r["key"]: r["running"] for r in await db.fetch("SELECT key, running FROM queueflow.limit_state")
    }
    assert running == {**per_key, "other:0": 10, "other:1": 9}


async def test_one_claim_makes_the_rows_of_the_next_waiting_jobs_keys_too(db):
    await limited_backlog(db, concurrency=5, keys=400, jobs=400)
    leases = await jobs_db.claim(db, "q", 10, 60, rotation=0, key=uuid.uuid4())
    assert len(leases) == 10
    # Up to 1,000 waiting jobs ahead: the next claims have nothing to make (and no second pass).
    assert await db.fetchval("SELECT count(*) FROM queueflow.limit_state") == 400


async def test_a_new_key_behind_a_saturated_backlog_is_made_and_claimed_by_the_key_by_key_visit(db):
    await init_connection(db)
    await policy(db, "hot", 1)
    await jobs_db.insert_jobs(db, None, jobs_of(("hot",)))
    [held] = await jobs_db.claim(db, "q", 5, 600, rotation=0, key=uuid.uuid4())
    # More of the saturated key's jobs than a claim's window and its look-ahead read, then one job of
    # a key with no row yet.
    await jobs_db.insert_jobs(db, None, jobs_of(*[("hot",)] * 1100))
    await jobs_db.insert_jobs(db, None, jobs_of(("new",)))

    leases = await jobs_db.claim(db, "q", 5, 600, rotation=1, key=uuid.uuid4())

    assert [lease.job.config.limits for lease in leases] == [("new",)]
    assert held.job.config.limits == ("hot",)
    assert {r["key"] for r in await db.fetch(STATE_ROWS)} == {"hot", "new"}


async def test_a_claim_meeting_a_new_key_while_its_policy_is_written_leaves_it_for_the_next_claim(
    db, database_url
):
    await init_connection(db)
    await policy(db, "c:*", 5)
    await jobs_db.insert_jobs(db, None, jobs_of(*[("c:1",)] * 4))
    writer = await asyncpg.connect(database_url)
    try:
        # A policy write under way (services' limits.put): the tenant's lock, the new policy, the
        # refresh of the rows it sees. The key has no row yet, so the refresh cannot reach it.
        tx = writer.transaction()
        await tx.start()
        await writer.execute(Q.lock_tenant_limits, "")
        await writer.execute(Q.put_limit_policy, "", "c:*", 1, None, None)
        await writer.execute(Q.refresh_limit_state, "", "c:*")

        # The claim does not wait for the write, and does not copy the policy it replaces.
        during = await asyncio.wait_for(jobs_db.claim(db, "q", 4, 60, rotation=0, key=uuid.uuid4()), 5)
        assert during == []
        assert await db.fetch(STATE_ROWS) == []

        await tx.commit()
    finally:
        await writer.close()
    after = await jobs_db.claim(db, "q", 4, 60, rotation=1, key=uuid.uuid4())
    assert len(after) == 1
    assert [tuple(r) for r in await db.fetch(STATE_ROWS)] == [("c:1", 1)]


async def test_plans_made_while_the_state_table_was_empty_probe_only_the_claims_own_keys(db):
    await limited_backlog(db, concurrency=1, keys=40, jobs=120)
    await db.execute("ALTER TABLE queueflow.limit_state SET (autovacuum_enabled = false)")
    await db.execute("ANALYZE queueflow.limit_state")  # empty: the session's plans take it for so

    first = await jobs_db.claim(db, "q", 40, 600, rotation=0, key=uuid.uuid4())
    assert len(first) == 40  # the rows made, each key's slot taken
    await db.execute(
        "INSERT INTO queueflow.limit_state (tenant_key, key, concurrency)"
        " SELECT '', 'z:' || g, 1 FROM generate_series(1, 20000) g"
    )

    # Every walked key saturated: the window's rooms, the locks and counts of the saturated keys'
    # rows, all of them.
    second, scans = await claim_with_scans(db, "limit_state", 40, rotation=1, lease_secs=600)
    assert second == []
    assert await db.fetchval("SELECT sum(throttled) FROM queueflow.limit_state") == 40 + 32
    # A plan made for an empty table reads every row to find a few: 20,000 and more a claim here,
    # without the statistics' refresh of version 30 or the probes of its window.
    assert scans["seq_scan"] == 0 and scans["idx_tup_fetch"] < 1000, scans


async def test_a_claim_by_a_role_that_does_not_own_the_state_table_makes_rows_without_a_warning(db):
    # The servers may run as a role that does not own the tables (docs/deployment.md): it may not
    # refresh the statistics, and must not try on every claim that makes a row.
    role = f"qf_server_{uuid.uuid4().hex[:8]}"
    await db.execute(f"CREATE ROLE {role}")
    try:
        await db.execute(f"GRANT USAGE ON SCHEMA queueflow TO {role}")
        await db.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA queueflow TO {role}")
        await limited_backlog(db, concurrency=1, keys=5, jobs=10)
        notices: list[str] = []
        db.add_log_listener(lambda _conn, message: notices.append(str(message)))
        await db.execute(f"SET ROLE {role}")
        leases = await jobs_db.claim(db, "q", 10, 60, rotation=0, key=uuid.uuid4())
        await db.execute("RESET ROLE")
        assert len(leases) == 5
        assert notices == []
    finally:
        await db.execute("RESET ROLE")
        await db.execute(f"DROP OWNED BY {role}")
        await db.execute(f"DROP ROLE {role}")
