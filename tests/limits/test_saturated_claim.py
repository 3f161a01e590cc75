"""A limited claim whose window finds every key saturated locks and counts those keys' state rows
once each (migration 27): its work grows with the keys it walks, not with their square."""

from __future__ import annotations

import uuid

from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig, NewJob
from tests.limits.helpers import claim_with_scans

KEYS = 200


async def test_a_claim_of_saturated_keys_counts_each_once_without_probing_them_again(db):
    await init_connection(db)  # jsonb as Python objects, like the server's pool
    await db.execute(
        "INSERT INTO queueflow.limit_policies (tenant_key, key, concurrency) VALUES ('', 'c:*', 1)"
    )
    for _ in range(4):  # each key's jobs, one a round
        await jobs_db.insert_jobs(
            db,
            None,
            [NewJob(task_name="t", queue="q", config=JobConfig(limits=(f"c:{n}",))) for n in range(KEYS)],
        )
    first = await jobs_db.claim(db, "q", KEYS, 600, rotation=0, key=uuid.uuid4())
    assert len(first) == KEYS  # every key's slot is taken

    second, scans = await claim_with_scans(db, "limit_state", KEYS, rotation=1, lease_secs=600)
    probes = scans["idx_scan"]
    assert second == []
    # Every walked job's key was counted as throttled, once per job the window saw.
    throttled = await db.fetchval("SELECT sum(throttled) FROM queueflow.limit_state")
    walked = KEYS + 32  # the window: the batch and 32 more
    assert throttled == walked
    # A few probes a key: the window's room, the visit key by key, the lock and the count (601
    # here). Version 26 locked them in a subquery it ran again for each key it counted: 22,101,
    # read when this helper still counted the set-up's statements too (1,600 of them here).
    assert probes < 20 * KEYS, probes
