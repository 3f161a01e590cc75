"""A limited claim reads the state rows of its own keys only (migration 26), even in a session
whose plans were made while few keys were known (every server's, on a young database)."""

from __future__ import annotations

import uuid

from shared.db import jobs as jobs_db
from tests.limits.helpers import claim_with_scans, limited_backlog

OTHERS = 20_000  # keys named by no waiting job (other customers', say)


async def test_a_limited_claim_probes_its_keys_state_however_many_keys_are_known(db):
    await limited_backlog(db, concurrency=1, keys=40, jobs=120)
    await db.execute("ANALYZE queueflow.limit_state")

    # The session's first claim plans the claim while 40 keys are known: one job per key.
    first = await jobs_db.claim(db, "q", 30, 60, rotation=0, key=uuid.uuid4())
    assert len({lease.job.config.limits[0] for lease in first}) == 30
    await db.execute(
        "INSERT INTO queueflow.limit_state (tenant_key, key, concurrency)"
        " SELECT '', 'z:' || g, 1 FROM generate_series(1, $1::int) g",
        OTHERS,
    )
    await db.execute("ANALYZE queueflow.limit_state")

    second, scans = await claim_with_scans(db, "limit_state", 30, rotation=1)
    # The ten keys the first claim did not reach, and nothing of the thirty it holds (concurrency 1).
    held = {lease.job.config.limits[0] for lease in first}
    assert {lease.job.config.limits[0] for lease in second} == {f"c:{n}" for n in range(40)} - held
    # Version 25 joined the window's keys to the whole table, read in full in a plan made while it
    # was small: a claim's cost grew with every key ever named.
    assert scans["seq_scan"] == 0 and scans["idx_scan"] > 0, scans
