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
       COALESCE(r.n, 0) AS running, s.oldest_age,
       COALESCE(q.retention, d.retention, 'keep') AS retention
FROM queueflow.tenant_queues q
LEFT JOIN queueflow.queue_retention_defaults d ON d.queue_name = q.queue_name
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

-- name: tenant_queue
-- tenant_queue_stats for one queue, $2, of tenant key $1; a queue the tenant never used is there
-- too, empty, with its defaults (every name is a queue until a job uses it).
SELECT $2::text AS queue_name, COALESCE(q.paused, false) AS paused,
       COALESCE(s.pending, 0) AS pending, COALESCE(s.scheduled, 0) AS scheduled,
       (SELECT count(*) FROM queueflow.jobs
        WHERE status = 'running' AND locked_until IS NOT NULL AND tenant_id = $1 AND queue_name = $2) AS running,
       s.oldest_age,
       COALESCE(q.retention, (SELECT d.retention FROM queueflow.queue_retention_defaults d WHERE d.queue_name = $2),
                'keep') AS retention
FROM (SELECT) AS one
LEFT JOIN queueflow.tenant_queues q ON q.queue_name = $2 AND q.tenant_key = $1
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.scheduled_at <= now()) AS pending,
           count(*) FILTER (WHERE j.scheduled_at > now()) AS scheduled,
           EXTRACT(EPOCH FROM now() - min(j.scheduled_at) FILTER (WHERE j.scheduled_at <= now())) AS oldest_age
    FROM queueflow.jobs j
    WHERE j.queue_name = $2 AND COALESCE(j.tenant_id, '') = $1 AND j.status IN ('pending', 'retrying')
) s;

-- name: set_queue_retention
-- The tenant's own retention of completed jobs on a queue (migration 37); a queue it never used
-- gets its row, as a job would give it.
INSERT INTO queueflow.tenant_queues (queue_name, tenant_key, retention) VALUES ($1, $2, $3)
ON CONFLICT (queue_name, tenant_key) DO UPDATE SET retention = EXCLUDED.retention;

-- name: record_queue_retention_defaults
-- The fleet's retention of completed jobs by queue name (--queue-retention: $1 names, $2 their
-- retentions), for every tenant that chose none of its own: exactly these, replacing what was there.
WITH given AS (
    SELECT * FROM unnest($1::text[], $2::text[]) AS g(queue_name, retention)
), dropped AS (
    DELETE FROM queueflow.queue_retention_defaults d
    WHERE NOT EXISTS (SELECT 1 FROM given g WHERE g.queue_name = d.queue_name)
)
INSERT INTO queueflow.queue_retention_defaults AS d (queue_name, retention)
SELECT queue_name, retention FROM given
ON CONFLICT (queue_name) DO UPDATE SET retention = EXCLUDED.retention WHERE d.retention <> EXCLUDED.retention;

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
