-- The worker registry (migration 17, docs/visibility.md): workers that name themselves on lease.

-- name: worker_seen
-- One lease call of worker $1 on queue $2, with what it reported ($3, or null to keep what it last
-- reported), for the tenants $4 (sorted, so two calls lock rows in one order): a worker key's
-- tenant, or for the worker token '' (the fleet-wide row) and the tenants of the jobs leased. A
-- worker's queues are the last 32 it leased from.
INSERT INTO queueflow.workers AS w (tenant_key, worker_id, queues, info)
SELECT t, $1, ARRAY[$2::text], $3::jsonb FROM unnest($4::text[]) AS t
ON CONFLICT (tenant_key, worker_id) DO UPDATE
SET last_seen_at = now(),
    info = COALESCE(EXCLUDED.info, w.info),
    queues = CASE WHEN $2 = ANY (w.queues) THEN w.queues
                  ELSE (w.queues || $2::text)[GREATEST(1, cardinality(w.queues) - 30):] END;

-- name: tenant_workers
-- The workers that served tenant $1: last seen (the fleet-wide row counts for a worker-token
-- worker's idle polls), live when seen within $2 seconds, and how many of the tenant's jobs each
-- holds now (running ones through the expired-lease index). At most $3, most recently seen first.
WITH mine AS (
    SELECT w.worker_id, w.queues, w.info, w.first_seen_at,
           GREATEST(w.last_seen_at, g.last_seen_at) AS last_seen_at
    FROM queueflow.workers w
    LEFT JOIN queueflow.workers g ON g.tenant_key = '' AND g.worker_id = w.worker_id
    WHERE w.tenant_key = $1
), busy AS (
    SELECT j.worker_id, count(*) AS n FROM queueflow.jobs j
    WHERE j.status = 'running' AND j.locked_until IS NOT NULL AND j.tenant_id = $1 AND j.worker_id IS NOT NULL
    GROUP BY j.worker_id
)
SELECT m.worker_id, m.queues, m.info, m.first_seen_at, m.last_seen_at, COALESCE(b.n, 0)::int AS in_flight,
       m.last_seen_at > now() - make_interval(secs => $2) AS live
FROM mine m LEFT JOIN busy b USING (worker_id)
ORDER BY m.last_seen_at DESC, m.worker_id
LIMIT $3;
