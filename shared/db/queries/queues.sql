-- Named queries for the queue view and pause/resume (per tenant).

-- name: tenant_queue_stats
-- The caller's backlog on every queue it has used, sorted by name.
SELECT q.queue_name, q.paused,
       COALESCE(s.pending, 0) AS pending, COALESCE(s.scheduled, 0) AS scheduled,
       COALESCE(s.running, 0) AS running, s.oldest_age
FROM queueflow.tenant_queues q
LEFT JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.status IN ('pending', 'retrying') AND j.scheduled_at <= now()) AS pending,
           count(*) FILTER (WHERE j.status IN ('pending', 'retrying') AND j.scheduled_at > now()) AS scheduled,
           count(*) FILTER (WHERE j.status = 'running') AS running,
           EXTRACT(EPOCH FROM now() - min(j.scheduled_at)
               FILTER (WHERE j.status IN ('pending', 'retrying') AND j.scheduled_at <= now())) AS oldest_age
    FROM queueflow.jobs j
    WHERE j.tenant_id = $1 AND j.queue_name = q.queue_name AND j.status IN ('pending', 'retrying', 'running')
) s ON true
WHERE q.tenant_key = $1
ORDER BY q.queue_name;

-- name: set_queue_paused
INSERT INTO queueflow.tenant_queues (queue_name, tenant_key, paused) VALUES ($1, $2, $3)
ON CONFLICT (queue_name, tenant_key) DO UPDATE SET paused = EXCLUDED.paused
RETURNING paused;

-- name: wake_queue
SELECT pg_notify('queueflow_work', $1);

-- name: tenant_queue_counts
SELECT count(*) FILTER (WHERE status IN ('pending', 'retrying') AND scheduled_at <= now()) AS pending,
       count(*) FILTER (WHERE status = 'running') AS running
FROM queueflow.jobs
WHERE tenant_id = $1 AND queue_name = $2 AND status IN ('pending', 'retrying', 'running');
