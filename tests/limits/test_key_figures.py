"""/metrics' per-key figures (migration 29): the claim keeps the throttled-claims total as it
counts them, so the figures read the running jobs' keys and the totals, never every key ever named."""

from __future__ import annotations

import uuid

from shared.db import jobs as jobs_db
from shared.db import limits as limits_db
from tests.limits.helpers import limited_backlog

IDLE = 20_000  # keys named once, long ago, with throttled claims and nothing running


async def _totals(db) -> tuple[int, int]:
    per_key = await db.fetchval("SELECT COALESCE(sum(throttled), 0) FROM queueflow.limit_state")
    total = await db.fetchval("SELECT sum(claims) FROM queueflow.limit_throttle_totals")
    return per_key, total


async def test_every_throttled_claim_is_added_to_the_totals_too(db):
    await limited_backlog(db, concurrency=1, keys=3, jobs=9)

    # One job per key: the window saw room for one of each and picked only those.
    first = await jobs_db.claim(db, "q", 10, 60, rotation=0, key=uuid.uuid4())
    assert len(first) == 3
    assert await _totals(db) == (0, 0)
    # Every key saturated: the window counts its six walked jobs on the rows of keys with no room.
    assert await jobs_db.claim(db, "q", 10, 60, rotation=1, key=uuid.uuid4()) == []
    assert await _totals(db) == (6, 6)
    # The keys freed and claimed again: nothing throttled, nothing added.
    await jobs_db.complete_many(db, [(lease.job.id, lease.token, {}) for lease in first])
    again = await jobs_db.claim(db, "q", 10, 60, rotation=2, key=uuid.uuid4())
    assert len(again) == 3
    assert await _totals(db) == (6, 6)  # their keys' other jobs were not walked past (room for one)


async def test_the_figures_name_the_running_keys_and_sum_the_rest_without_reading_every_key(db):
    await limited_backlog(db, concurrency=2, keys=4, jobs=4 * 3)
    claimed = await jobs_db.claim(db, "q", 6, 60, rotation=0, key=uuid.uuid4())
    # A batch's jobs share their timestamps and the claim breaks ties by id, so which six of the
    # eight that fit it took is not fixed: at least two keys have both their slots taken.
    per_key: dict[str, list] = {}
    for lease in claimed:
        per_key.setdefault(lease.job.config.limits[0], []).append(lease)
    assert len(claimed) == 6 and all(len(leases) <= 2 for leases in per_key.values())
    full = min(key for key, leases in per_key.items() if len(leases) == 2)
    done = per_key[full]
    # A completion leaves its release unfolded: the running figure counts the running jobs.
    await jobs_db.complete_many(db, [(lease.job.id, lease.token, {}) for lease in done[:1]])
    # Many keys named long ago, each with throttled claims, none running (and counted in the totals,
    # as the claims that throttled them would have).
    await db.execute(
        """INSERT INTO queueflow.limit_state (tenant_key, key, concurrency, throttled)
           SELECT '', 'old:' || g, 1, 3 FROM generate_series(1, $1::int) g""",
        IDLE,
    )
    await db.execute(
        "UPDATE queueflow.limit_throttle_totals SET claims = claims + $1 WHERE shard = 0", 3 * IDLE
    )
    await db.execute("ANALYZE queueflow.limit_state")
    per_key, total = await _totals(db)
    assert per_key == total

    stats = "SELECT seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables WHERE relid = 'queueflow.limit_state'::regclass"
    async with db.transaction():
        # (Before and after: PostgreSQL 15 also shows here what this session's earlier statements
        # did, until it reports them, such as the sum just read.)
        before = await db.fetchrow(stats)
        figures = await limits_db.key_figures(db, 2)
        after = await db.fetchrow(stats)
    scans = {name: after[name] - before[name] for name in ("seq_scan", "idx_tup_fetch")}
    named = {f.key: f for f in figures if f.key is not None}
    rest = [f for f in figures if f.key is None]
    running: dict[str, int] = {}
    for lease in claimed:
        running[lease.job.config.limits[0]] = running.get(lease.job.config.limits[0], 0) + 1
    running[full] -= 1  # completed, its release not yet folded
    # The two busiest running keys by name (most running first, then by name), with their running
    # jobs and throttled claims...
    busiest = [key for _, key in sorted((-n, key) for key, n in running.items() if n > 0)[:2]]
    assert set(named) == set(busiest)
    for key, f in named.items():
        assert f.tenant == "" and f.running == running[key]
        assert f.throttled == await db.fetchval(
            "SELECT throttled FROM queueflow.limit_state WHERE tenant_key = '' AND key = $1", key
        )
    # ... and the rest: the other running keys' jobs, every other key's throttled claims.
    assert len(rest) == 1
    assert rest[0].running == sum(running.values()) - sum(running[key] for key in busiest)
    assert rest[0].throttled == total - sum(f.throttled for f in named.values())
    # Read: the running keys' rows (one probe each), not the 20,000 idle ones.
    assert scans["seq_scan"] == 0 and scans["idx_tup_fetch"] <= 10, scans
