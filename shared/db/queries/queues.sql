-- Named queries for the queue view and pause/resume (per tenant).

-- name: tenant_queue_stats
-- The caller's backlog on every queue it has used, sorted by name: waiting jobs through the claim
-- index (queue, tenant), running ones once for the tenant through the expired-lease index.
WITH running AS (
    SELECT queue_name, count(*) AS n FROM queueflow.jobs
    WHERE status = 'running' AND locked_until IS NOT NULL AND tenant_id = $1
    GROUP BY queue_name
)
SELECT q.queue_name, q.paused,
       COALESCE(s.pending, 0) AS pending, COALESCE(s.scheduled, 0) AS scheduled,
       COALESCE(r.n, 0) AS running, s.oldest_age
FROM queueflow.tenant_queues q
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.scheduled_at <= now()) AS pending,
           count(*) FILTER (WHERE j.scheduled_at > now()) AS scheduled,
           EXTRACT(EPOCH FROM now() - min(j.scheduled_at) FILTER (WHERE j.scheduled_at <= now())) AS oldest_age
    FROM queueflow.jobs j
    WHERE j.queue_name = q.queue_name AND COALESCE(j.tenant_id, '') = $1
      AND j.status IN ('pending', 'retrying')
) s ON true
LEFT JOIN running r ON r.queue_name = q.queue_name
WHERE q.tenant_key = $1
ORDER BY q.queue_name;

-- name: set_queue_paused
INSERT INTO queueflow.tenant_queues (queue_name, tenant_key, paused) VALUES ($1, $2, $3)
ON CONFLICT (queue_name, tenant_key) DO UPDATE SET paused = EXCLUDED.paused
RETURNING paused;

-- name: wake_queue
SELECT pg_notify('queueflow_work', $1);

-- name: tenant_queue_counts
SELECT (SELECT count(*) FROM queueflow.jobs
        WHERE queue_name = $2 AND COALESCE(tenant_id, '') = $1 AND status IN ('pending', 'retrying')
          AND scheduled_at <= now()) AS pending,
       (SELECT count(*) FROM queueflow.jobs
        WHERE status = 'running' AND locked_until IS NOT NULL AND tenant_id = $1
          AND queue_name = $2) AS running;

-- name: record_queue_cap
-- The cap on each tenant's distinct queues (0: none), for the trigger of migration 35.
UPDATE queueflow.queue_cap SET max_queues_per_tenant = $1 WHERE max_queues_per_tenant <> $1;

-- name: check_queue_room
-- Raises SQLSTATE QFQ01 when the names $2 new to tenant key $1 would take it past the cap.
SELECT queueflow.check_queue_room($1, $2::text[]);
