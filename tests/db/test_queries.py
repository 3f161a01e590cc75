"""Every named query (shared/db/queries/*.sql) prepares against the migrated schema: a renamed
column or a typo in a rarely-run statement fails here, not in production."""

from __future__ import annotations

import asyncpg

from shared.db.queries import Q


async def test_every_named_query_prepares_against_the_schema(db):
    assert len(Q) > 50  # the loader found them
    failures = {}
    for name, sql in sorted(Q.items()):
        try:
            await db.prepare(sql)
        except asyncpg.PostgresError as err:
            failures[name] = f"{type(err).__name__}: {err}"
    assert failures == {}


BY_ID = (
    "get_job",
    "heartbeat",
    "heartbeat_progress",
    "complete_jobs",
    "complete_jobs_traced",
    "fail_job",
    "release_jobs",
    "lease_states",
    "cancel_job",
    "append_job_logs",
)


async def _generic_plan(db: asyncpg.Connection, sql: str) -> str:
    params = len((await db.prepare(sql)).get_parameters())
    async with db.transaction():
        await db.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await db.execute(f"PREPARE probe AS {sql}")
        try:
            args = ", ".join(["NULL"] * params)
            rows = await db.fetch(f"EXPLAIN EXECUTE probe({args})" if params else "EXPLAIN EXECUTE probe")
        finally:
            await db.execute("DEALLOCATE probe")
    return "\n".join(r[0] for r in rows)


async def test_writes_and_reads_by_job_id_use_the_primary_key_whatever_the_statistics(db):
    """Statistics taken when no job was running (all waiting, or all finished) once made the
    planner walk every running job for each completion (migration 9): on a table of some size,
    every by-id statement must go through the primary key in both states."""
    await db.execute(
        """INSERT INTO queueflow.jobs (id, queue_name, task_name, config, tenant_id)
           SELECT gen_random_uuid(), 'q', 't', '{}', 'acme' FROM generate_series(1, 20000)"""
    )
    for state in ("waiting", "finished"):
        if state == "finished":
            await db.execute("UPDATE queueflow.jobs SET status = 'completed', completed_at = now()")
        await db.execute("ANALYZE queueflow.jobs")
        for name in BY_ID:
            plan = await _generic_plan(db, Q[name])
            assert "jobs_pkey" in plan, f"{name} with {state} statistics:\n{plan}"


async def test_the_claim_reads_no_table_whole_beside_limited_jobs(db):
    """The claim adds the trace context to claim_limited's rows from the jobs table. Planned as a
    join (the planner expects 1,000 rows of a function), it hashed every job there was on every
    limited claim while the table was small enough for that to look cheaper (20,000 jobs: 8 ms of a
    15 ms claim). Each leased job must be a primary-key probe."""
    await db.execute(
        """INSERT INTO queueflow.jobs (id, queue_name, task_name, config)
           SELECT gen_random_uuid(), 'q', 't',
                  CASE WHEN i % 2 = 0 THEN '{"limits": ["k"]}'::jsonb ELSE '{}'::jsonb END
           FROM generate_series(1, 20000) i"""
    )
    await db.execute("ANALYZE queueflow.jobs")
    plan = await _generic_plan(db, Q["claim_jobs"])
    assert "Seq Scan on jobs" not in plan, plan
    assert "claim_limited" in plan, plan
