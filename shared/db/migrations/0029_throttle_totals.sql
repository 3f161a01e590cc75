-- QueueFlow schema, version 29: the throttled-claims total kept as it grows, so that /metrics reads
-- the keys that hold slots, not every key ever named.
--
-- /metrics labels the busiest keys one by one and sums the rest as `_other`. Its statement read
-- every `limit_state` row with a throttled claim (and probed each one's waiting releases) to rank
-- them and sum the rest: 23 ms at 10,000 keys, 296 ms at 100,000 and 1.8 s at 1,000,000, on every
-- scrape of every process (docs/limits.md, "Metrics"). Keys are per
-- customer in the use the feature is for, so they only grow (`limit_state` is never pruned).
--
-- The claim now also adds the jobs it counts as throttled to one of sixteen total rows (by
-- backend, so that concurrent claims rarely meet on one; the row is updated last, after every
-- other lock the claim takes, and nothing else waits on it), and /metrics reads:
-- * the running jobs' keys, through the expired-lease index (`status = 'running' AND locked_until
--   IS NOT NULL`): the count of running jobs is the keys' exact running figure, unfolded releases
--   and all;
-- * those keys' state rows, for their throttled counts;
-- * the sixteen totals, less what the keys it names hold, for `_other`.
-- A key with no job running is no longer named; its throttled claims stay in `_other`.
CREATE TABLE queueflow.limit_throttle_totals (
    shard  smallint PRIMARY KEY,
    claims bigint NOT NULL DEFAULT 0
);
INSERT INTO queueflow.limit_throttle_totals (shard, claims)
SELECT g, CASE WHEN g = 0 THEN (SELECT COALESCE(sum(throttled), 0) FROM queueflow.limit_state) ELSE 0 END
FROM generate_series(0, 15) AS g;

SELECT queueflow.edit_function(
    'queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)',
    ARRAY[
        -- the walked jobs of keys with no room, as counted on their rows
        ARRAY[E'          AND NOT EXISTS (SELECT 1 FROM pairs x WHERE x.tenant_key = h.tenant_key AND x.key = h.key)\n'
              '    ), walked_enough AS (\n',
              E'          AND NOT EXISTS (SELECT 1 FROM pairs x WHERE x.tenant_key = h.tenant_key AND x.key = h.key)\n'
              '        RETURNING h.n\n'
              '    ), walked_enough AS (\n'],
        -- the claimed keys' jobs left waiting, as counted on their rows
        ARRAY[E'        RETURNING s.wake_at IS NOT NULL AND s.wake_queue = $1 AS waking\n',
              E'        RETURNING s.wake_at IS NOT NULL AND s.wake_queue = $1 AS waking, k.refused_n AS refused\n'],
        -- both, added to this backend's total row
        ARRAY[E'                      LIMIT 1) AS k) AS n\n'
              '    )\n'
              '    UPDATE queueflow.jobs j\n',
              E'                      LIMIT 1) AS k) AS n\n'
              '    ), tallied AS (\n'
              '        -- For /metrics: this claim\'s throttled jobs, added to one of the totals (this backend\'s,\n'
              '        -- so that concurrent claims rarely update the same row).\n'
              '        UPDATE queueflow.limit_throttle_totals t SET claims = t.claims + x.n\n'
              '        FROM (SELECT (SELECT COALESCE(sum(n), 0) FROM held)\n'
              '                     + (SELECT COALESCE(sum(refused), 0) FROM bumped) AS n) AS x\n'
              '        WHERE t.shard = pg_backend_pid() % 16 AND x.n > 0\n'
              '    )\n'
              '    UPDATE queueflow.jobs j\n']],
    'migration 29');
