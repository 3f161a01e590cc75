-- Named queries for flow-control policies (migration 12). Policy writes hold a per-tenant advisory
-- lock, so two writes of overlapping wildcards refresh the state rows one after the other.

-- name: lock_tenant_limits
SELECT pg_advisory_xact_lock(hashtextextended('queueflow.limits:' || $1, 0));

-- name: put_limit_policy
INSERT INTO queueflow.limit_policies (tenant_key, key, concurrency, rate_count, rate_per_secs)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant_key, key) DO UPDATE
SET concurrency = EXCLUDED.concurrency, rate_count = EXCLUDED.rate_count,
    rate_per_secs = EXCLUDED.rate_per_secs, updated_at = now();

-- name: delete_limit_policy
DELETE FROM queueflow.limit_policies WHERE tenant_key = $1 AND key = $2 RETURNING key;

-- name: refresh_limit_state
SELECT queueflow.refresh_limit_state($1, $2);

-- name: limit_policies
-- The tenant's policies ($2 null) or one, with live figures: `running` over the keys each governs
-- (less releases not yet folded in), and an exact key's rate room now.
SELECT p.key, p.concurrency, p.rate_count, p.rate_per_secs, p.created_at, p.updated_at,
       COALESCE((SELECT sum(s.running - (SELECT count(*) FROM queueflow.limit_releases r
                                          WHERE r.tenant_key = s.tenant_key AND r.key = s.key))
                 FROM queueflow.limit_state s
                 WHERE s.tenant_key = p.tenant_key
                   AND CASE WHEN right(p.key, 1) = '*'
                            THEN starts_with(s.key, left(p.key, -1))
                                 AND NOT EXISTS (SELECT 1 FROM queueflow.limit_policies o
                                                 WHERE o.tenant_key = s.tenant_key AND o.key = s.key)
                            ELSE s.key = p.key END), 0)::bigint AS running,
       CASE WHEN p.rate_count IS NOT NULL AND right(p.key, 1) <> '*' THEN COALESCE(
           (SELECT w.room FROM queueflow.limit_state s
            CROSS JOIN LATERAL queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start, s.rate_prev,
                                                     s.rate_cur, now()) w
            WHERE s.tenant_key = p.tenant_key AND s.key = p.key AND s.rate_count IS NOT NULL),
           p.rate_count) END AS rate_available
FROM queueflow.limit_policies p
WHERE p.tenant_key = $1 AND ($2::text IS NULL OR p.key = $2)
ORDER BY p.key;

-- name: fold_limit_releases
SELECT queueflow.fold_limit_releases($1);

-- name: wake_limited_queues
-- Keys whose wake-up time came: wake their queues' waiters when the rate has room now, else move
-- the wake-up to when it will (so a key whose room a clock's rounding hid is never left asleep).
-- The queues: the one whose claim used the rate up, and the tenant's others where a waiting job's
-- first key is this one (one probe of jobs_claim_limited_idx each), which would otherwise wait
-- for their next poll.
WITH due AS MATERIALIZED (
    SELECT s.tenant_key, s.key, s.wake_queue, w.next_at, (w.room >= 1 OR w.next_at IS NULL) AS ready
    FROM queueflow.limit_state s
    CROSS JOIN LATERAL queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start, s.rate_prev,
                                             s.rate_cur, now()) w
    WHERE s.wake_at <= now()
    FOR UPDATE OF s SKIP LOCKED
), moved AS (
    UPDATE queueflow.limit_state s
    SET wake_at = CASE WHEN d.ready THEN NULL ELSE d.next_at END
    FROM due d WHERE s.tenant_key = d.tenant_key AND s.key = d.key
)
SELECT count(pg_notify('queueflow_work', q)) AS woken
FROM (SELECT d.wake_queue AS q FROM due d WHERE d.ready AND d.wake_queue IS NOT NULL
      UNION
      SELECT t.queue_name FROM due d JOIN queueflow.tenant_queues t ON t.tenant_key = d.tenant_key
      WHERE d.ready AND NOT t.paused
        AND (SELECT 1 FROM queueflow.jobs j
             WHERE j.queue_name = t.queue_name AND COALESCE(j.tenant_id, '') = t.tenant_key
               AND j.limit_keys[1] = d.key AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL
             LIMIT 1) IS NOT NULL) AS w;

-- name: next_limit_wake
SELECT min(wake_at) AS at, now() AS now FROM queueflow.limit_state WHERE wake_at IS NOT NULL;

-- name: limit_key_figures
-- Per key, fleet-wide, for /metrics: the keys of running jobs (their count is the key's running
-- figure), the busiest $1 of them by name with their throttled claims, and one row with a NULL key
-- for the rest: their running jobs, and the throttled claims of every other key (the totals less
-- the named keys'). Reads the running jobs and their keys' rows, never every key ever named.
WITH running AS (
    SELECT COALESCE(j.tenant_id, '') AS tenant_key, k.key, count(*) AS running
    FROM queueflow.jobs j CROSS JOIN LATERAL unnest(j.limit_keys) AS k(key)
    WHERE j.status = 'running' AND j.locked_until IS NOT NULL AND j.limit_keys IS NOT NULL
    GROUP BY 1, 2
), figures AS (
    -- (A scalar subquery: one probe of a running key's row, never a join over every key's.)
    SELECT r.tenant_key, r.key, r.running,
           COALESCE((SELECT s.throttled FROM queueflow.limit_state s
                     WHERE s.tenant_key = r.tenant_key AND s.key = r.key), 0) AS throttled
    FROM running r
), ranked AS (
    SELECT *, row_number() OVER (ORDER BY running DESC, throttled DESC, tenant_key, key) AS n FROM figures
), named AS MATERIALIZED (
    SELECT tenant_key, key, running, throttled FROM ranked WHERE n <= $1
), rest AS (
    SELECT (SELECT COALESCE(sum(running), 0) FROM ranked WHERE n > $1)::bigint AS running,
           GREATEST(0, (SELECT COALESCE(sum(claims), 0) FROM queueflow.limit_throttle_totals)
                       - (SELECT COALESCE(sum(throttled), 0) FROM named))::bigint AS throttled
)
SELECT tenant_key, key, running, throttled FROM named
UNION ALL
SELECT NULL, NULL, running, throttled FROM rest WHERE running > 0 OR throttled > 0;

-- name: repair_limit_state
-- Up to $1 keys whose recorded running count (less unfolded releases) differs from their running
-- jobs, set right under their row locks (migration 34): each key's tenant, key and both figures.
SELECT tenant_key, key, recorded, actual FROM queueflow.repair_limit_state($1);

-- name: prune_limit_state
-- One page of state rows in key order after ($1, $2), up to $3: deletes those of keys idle for $4
-- seconds (migration 31). Its figures, and the next page's start (NULLs after the last page).
SELECT seen, pruned, last_tenant, last_key FROM queueflow.prune_limit_state($1, $2, $3, $4);
