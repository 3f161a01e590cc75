"""The insert trigger's state rows for the limit keys a statement names (migrations 12 and 21): a
new key gets one, with its policy; a known key costs one probe, however many keys are known."""

from __future__ import annotations

from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig, NewJob

KNOWN = 5000


async def test_an_insert_probes_its_known_keys_and_creates_the_new_ones_with_their_policy(db):
    await init_connection(db)  # jsonb as Python objects, like the server's pool
    await db.execute(
        "INSERT INTO queueflow.limit_policies (tenant_key, key, concurrency) VALUES ('acme', 'c:*', 3)"
    )
    await db.execute(
        "INSERT INTO queueflow.limit_state (tenant_key, key, concurrency)"
        " SELECT 'acme', 'c:' || g, 3 FROM generate_series(1, $1::int) g",
        KNOWN,
    )
    await db.execute("ANALYZE queueflow.limit_state")
    jobs = [
        NewJob(task_name="t", queue="q", config=JobConfig(limits=(f"c:{n}", f"other:{n % 2}")))
        for n in range(KNOWN - 299, KNOWN + 11)  # 300 known keys, 10 new ones and two more
    ]
    async with db.transaction():
        assert len(await jobs_db.insert_jobs(db, "acme", jobs)) == len(jobs)
        scans = await db.fetchrow(
            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables"
            " WHERE relid = 'queueflow.limit_state'::regclass"
        )
    # Version 12's statement joined the distinct keys to the whole table, read in full: its cost
    # grew with every key ever named.
    assert scans["seq_scan"] == 0 and scans["idx_scan"] > 0, dict(scans)
    created = await db.fetch(
        "SELECT key, concurrency FROM queueflow.limit_state WHERE tenant_key = 'acme' AND NOT key = ANY ($1)",
        [f"c:{n}" for n in range(1, KNOWN + 1)],
    )
    assert sorted((r["key"], r["concurrency"]) for r in created) == sorted(
        [(f"c:{n}", 3) for n in range(KNOWN + 1, KNOWN + 11)] + [("other:0", None), ("other:1", None)]
    )
