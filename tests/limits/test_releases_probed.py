"""A limited claim reads the release rows of its own keys only (migration 24), through their index,
even in a session whose plans were made while no release was waiting (every server's at start);
takes them key by key however few wait (migration 25); and counts a walked key's releases only when
its recorded room is short of its walked jobs (migration 28)."""

from __future__ import annotations

import uuid

from shared.db import jobs as jobs_db
from tests.limits.helpers import claim_with_scans, limited_backlog, other_keys_releases

OTHERS = 5000  # releases of other keys, waiting for their fold
FEW_OTHERS = 600  # fewer than the thousand above which a claim counts its keys' releases key by key


async def _first_claim_then_releases(db, others: int) -> None:
    """60 jobs over 20 keys of concurrency 1; the session's first claim (which plans the claim
    with an empty releases table) takes one job per key and completes it, leaving one release per
    key; then `others` releases of other keys."""
    await limited_backlog(db, concurrency=1, keys=20, jobs=60)

    # The session's first claim plans the claim with an empty releases table: one job per key.
    first = await jobs_db.claim(db, "q", 60, 60, rotation=0, key=uuid.uuid4())
    assert sorted(lease.job.config.limits[0] for lease in first) == sorted(f"c:{n}" for n in range(20))
    done = await jobs_db.complete_many(db, [(lease.job.id, lease.token, {}) for lease in first])
    assert done == [None] * 20  # each completion appends a release row of its key
    await other_keys_releases(db, others)


async def test_a_limited_claim_folds_its_own_keys_releases_without_reading_the_others(db):
    await _first_claim_then_releases(db, OTHERS)

    second, scans = await claim_with_scans(db, "limit_releases", 60, rotation=1)
    # The slots the completions gave back are found and taken again: one more job per key.
    assert sorted(lease.job.config.limits[0] for lease in second) == sorted(f"c:{n}" for n in range(20))
    # Version 12's claim counted every key's waiting releases and folded through a hash join: both
    # read the whole table, so a claim's cost grew with every other key's unfolded releases.
    assert scans["seq_scan"] == 0 and scans["idx_scan"] > 0, scans
    left = await db.fetch(
        "SELECT key, count(*) AS n FROM queueflow.limit_releases GROUP BY key HAVING key LIKE 'c:%'"
    )
    assert left == []  # this claim folded its keys' releases
    assert await db.fetchval("SELECT count(*) FROM queueflow.limit_releases") == OTHERS
    running = await db.fetch(
        "SELECT key, running FROM queueflow.limit_state WHERE key LIKE 'c:%' ORDER BY key"
    )
    assert {r["key"]: r["running"] for r in running} == {f"c:{n}": 1 for n in range(20)}


async def test_with_a_few_hundred_releases_waiting_the_fold_reads_only_its_own_keys(db):
    await _first_claim_then_releases(db, FEW_OTHERS)

    second, scans = await claim_with_scans(db, "limit_releases", 60, rotation=1)
    read = scans["idx_tup_fetch"]
    assert sorted(lease.job.config.limits[0] for lease in second) == sorted(f"c:{n}" for n in range(20))
    assert await db.fetchval("SELECT count(*) FROM queueflow.limit_releases") == FEW_OTHERS
    # Each key is at its concurrency by its recorded count, so the window counts its one release
    # (20), and the fold reads them again (20). Version 24 folded by a join planned on the empty
    # table, which read every waiting release once more (and the key list once for each of them):
    # 1,880 here; versions 25 to 27 read all 620 for the window's count (1,260).
    assert read <= 4 * 20, read


async def test_a_window_whose_keys_have_room_counts_none_of_their_releases(db):
    """Concurrency 3 and one job of each key running by the recorded count: the window's two jobs a
    key fit without the waiting releases, so only the fold reads them."""
    await limited_backlog(db, concurrency=3, keys=20, jobs=60)
    first = await jobs_db.claim(db, "q", 20, 60, rotation=0, key=uuid.uuid4())
    assert sorted(lease.job.config.limits[0] for lease in first) == sorted(f"c:{n}" for n in range(20))
    await jobs_db.complete_many(db, [(lease.job.id, lease.token, {}) for lease in first])
    await other_keys_releases(db, FEW_OTHERS)

    second, scans = await claim_with_scans(db, "limit_releases", 20, rotation=1)
    assert sorted(lease.job.config.limits[0] for lease in second) == sorted(f"c:{n}" for n in range(20))
    # The fold reads its 20 keys' 20 releases; version 27 read all 620 once more for the window.
    assert scans["idx_tup_fetch"] <= 2 * 20, scans
    running = await db.fetch("SELECT key, running FROM queueflow.limit_state WHERE key LIKE 'c:%'")
    assert {r["key"]: r["running"] for r in running} == {f"c:{n}": 1 for n in range(20)}
