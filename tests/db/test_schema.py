"""The schema: migrations apply once under concurrency, and the claim stays on its partial index."""

import asyncio
import json

import asyncpg

from shared.db.migrate import apply_migrations, migration_files
from shared.db.queries import Q


async def test_migrations_are_recorded_and_a_second_run_applies_nothing(database_url):
    # The template is already migrated: replaying finds every version recorded.
    assert await apply_migrations(database_url) == []
    conn = await asyncpg.connect(database_url)
    try:
        recorded = [
            r["version"]
            for r in await conn.fetch("SELECT version FROM queueflow.schema_migrations ORDER BY version")
        ]
    finally:
        await conn.close()
    assert recorded == [v for v, _ in migration_files()]


async def test_concurrent_migrators_apply_each_file_exactly_once(pg_cluster):
    url = await pg_cluster.create_database("t_concurrent_migrate")
    try:
        results = await asyncio.gather(*(apply_migrations(url) for _ in range(4)))
        versions = [v for v, _ in migration_files()]
        assert sorted(r for r in results if r) == [versions]  # one winner applied them all
    finally:
        await pg_cluster.drop_database("t_concurrent_migrate")


async def test_claim_query_uses_the_partial_claim_index(db):
    # Enough history that a sequential scan would be tempting without the partial index.
    await db.execute("""
        INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, completed_at)
        SELECT gen_random_uuid(), 'q' || (i % 20), 'echo', '{}'::jsonb,
               CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'completed' END, now()
        FROM generate_series(1, 5000) AS i""")
    await db.execute("ANALYZE queueflow.jobs")
    await db.execute("SET plan_cache_mode = force_generic_plan")
    await db.execute(f"PREPARE claim(text, int, int, int, bigint, uuid, text, text) AS {Q.claim_jobs}")
    plan = json.loads(
        await db.fetchval(
            "EXPLAIN (FORMAT JSON) EXECUTE claim('q0', 10, 30, NULL, 0, gen_random_uuid(), NULL, NULL)"
        )
    )

    def indexes(node):
        found = [node["Index Name"]] if "Index Name" in node else []
        for child in node.get("Plans", []):
            found += indexes(child)
        return found

    assert "jobs_claim_idx" in indexes(plan[0]["Plan"])
