-- Named queries for cron schedules.

-- name: insert_cron
INSERT INTO queueflow.cron_schedules (id, name, cron_expr, task_name, payload, config, queue_name, tenant_id,
                                      next_run_at, timezone, workflow)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (COALESCE(tenant_id, ''), name) DO NOTHING
RETURNING id;

-- name: get_cron
SELECT * FROM queueflow.cron_schedules WHERE id = $1 AND tenant_id = $2;

-- name: delete_cron
DELETE FROM queueflow.cron_schedules WHERE id = $1 AND tenant_id = $2 RETURNING id;

-- name: pause_cron
UPDATE queueflow.cron_schedules SET enabled = false WHERE id = $1 AND tenant_id = $2 RETURNING id;

-- name: lock_tenant_cron
SELECT * FROM queueflow.cron_schedules WHERE id = $1 AND tenant_id = $2 FOR UPDATE;

-- name: resume_cron
-- Resuming does not catch up: the next firing is the next future occurrence.
UPDATE queueflow.cron_schedules SET enabled = true, next_run_at = $3 WHERE id = $1 AND tenant_id = $2;

-- name: due_crons
-- Due schedules, locked: each occurrence is fired by exactly one janitor.
SELECT *, now() AS db_now FROM queueflow.cron_schedules
WHERE enabled AND next_run_at <= now()
ORDER BY next_run_at
LIMIT $1
FOR UPDATE SKIP LOCKED;

-- name: cron_fired
UPDATE queueflow.cron_schedules SET last_enqueued_at = now(), next_run_at = COALESCE($2, next_run_at),
                                    enabled = enabled AND $2::timestamptz IS NOT NULL
WHERE id = $1;

-- name: next_cron_due
SELECT min(next_run_at) AS at, now() AS now FROM queueflow.cron_schedules WHERE enabled;
