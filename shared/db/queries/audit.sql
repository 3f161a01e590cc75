-- The audit log (migration 42; shared/db/audit.py).

-- name: insert_audit_entry
INSERT INTO queueflow.audit_log
    (tenant_id, actor, actor_name, role, action, targets, filter, affected, request_id, source, outcome, status)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)

-- name: prune_audit_log
-- The oldest entries past the retention, a round at a time (the janitor repeats while a round is full).
DELETE FROM queueflow.audit_log
WHERE id IN (
    SELECT id FROM queueflow.audit_log
    WHERE created_at < now() - make_interval(secs => $1::float8 * 86400)
    ORDER BY created_at
    LIMIT $2
)
