-- Worker keys (migration 0011): a tenant's keys for its own workers, stored as token digests.

-- name: insert_worker_key
INSERT INTO queueflow.worker_keys (id, tenant_id, name, queues, token_digest, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, name, queues, created_at, expires_at;

-- name: list_worker_keys
SELECT id, name, queues, created_at, expires_at FROM queueflow.worker_keys
WHERE tenant_id = $1
ORDER BY created_at, id;

-- name: delete_worker_key
-- Revoke: the row goes, and every API process is told (in this transaction, so on commit) to drop
-- its cached copy of the key.
WITH gone AS (
    DELETE FROM queueflow.worker_keys WHERE id = $1 AND tenant_id = $2 RETURNING id
)
SELECT id, pg_notify('queueflow_worker_keys', id::text) FROM gone;

-- name: find_worker_key
-- An API process resolving a presented token by its digest (expiry is checked by the caller, at
-- every use).
SELECT id, tenant_id, queues, expires_at FROM queueflow.worker_keys WHERE token_digest = $1;

-- name: jobs_of_tenant
-- Which of the given jobs belong to tenant $2: a worker key may touch no other tenant's job.
SELECT id FROM queueflow.jobs WHERE id = ANY($1::uuid[]) AND tenant_id = $2;
