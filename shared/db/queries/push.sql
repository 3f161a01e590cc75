-- Push delivery (migration 38; docs/push.md): a tenant's endpoints, the queues bound to them, the
-- pushers' claims under each endpoint's concurrency, the breaker, and the delivery history.
-- Every change of an endpoint notifies queueflow_push (payload: its id) in its transaction, so the
-- pushers reload their endpoints and the api processes their bound queues on commit.

-- name: insert_push_endpoint
INSERT INTO queueflow.push_endpoints (id, tenant_key, name, url, concurrency, timeout_secs, headers, secret)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (tenant_key, name) DO NOTHING
RETURNING id;

-- name: bind_push_queues
-- Bind queues $3 of tenant $1 to endpoint $2; a queue another endpoint holds is left out of the
-- answer (the caller then refuses the change).
INSERT INTO queueflow.push_bindings (tenant_key, queue_name, endpoint_id)
SELECT $1, q, $2 FROM unnest($3::text[]) AS q
ON CONFLICT (tenant_key, queue_name) DO UPDATE SET endpoint_id = EXCLUDED.endpoint_id
WHERE push_bindings.endpoint_id = EXCLUDED.endpoint_id
RETURNING queue_name;

-- name: push_queue_holder
-- Which other endpoint of tenant $1 holds one of the queues $2 (for the 409 that says so).
SELECT b.queue_name, e.name FROM queueflow.push_bindings b
JOIN queueflow.push_endpoints e ON e.id = b.endpoint_id
WHERE b.tenant_key = $1 AND b.queue_name = ANY($2::text[]) AND b.endpoint_id <> $3
ORDER BY b.queue_name LIMIT 1;

-- name: unbind_push_queues
DELETE FROM queueflow.push_bindings WHERE endpoint_id = $1 AND NOT (queue_name = ANY($2::text[]));

-- name: notify_push_change
SELECT pg_notify('queueflow_push', $1::text);

-- name: get_push_endpoint
SELECT e.id, e.name, e.url, e.concurrency, e.timeout_secs, e.headers, e.paused, e.failures, e.open_until,
       e.created_at, e.updated_at,
       CASE WHEN e.previous_secret_until > now() THEN e.previous_secret_until END AS previous_secret_expires_at,
       ARRAY(SELECT b.queue_name FROM queueflow.push_bindings b WHERE b.endpoint_id = e.id ORDER BY b.queue_name) AS queues
FROM queueflow.push_endpoints e WHERE e.id = $1 AND e.tenant_key = $2;

-- name: list_push_endpoints
SELECT e.id, e.name, e.url, e.concurrency, e.timeout_secs, e.headers, e.paused, e.failures, e.open_until,
       e.created_at, e.updated_at,
       CASE WHEN e.previous_secret_until > now() THEN e.previous_secret_until END AS previous_secret_expires_at,
       ARRAY(SELECT b.queue_name FROM queueflow.push_bindings b WHERE b.endpoint_id = e.id ORDER BY b.queue_name) AS queues
FROM queueflow.push_endpoints e WHERE e.tenant_key = $1
ORDER BY e.created_at, e.id;

-- name: update_push_endpoint
-- A PATCH: null leaves a field as it is; headers '{}' removes them.
UPDATE queueflow.push_endpoints
SET name = COALESCE($3, name),
    url = COALESCE($4, url),
    concurrency = COALESCE($5, concurrency),
    timeout_secs = COALESCE($6, timeout_secs),
    headers = CASE WHEN $7::jsonb IS NULL THEN headers WHEN $7::jsonb = '{}'::jsonb THEN NULL ELSE $7::jsonb END,
    paused = COALESCE($8, paused),
    updated_at = now()
WHERE id = $1 AND tenant_key = $2
RETURNING id;

-- name: rotate_push_secret
-- The new secret $3 signs from now; the old one beside it until $4 (null: not at all).
UPDATE queueflow.push_endpoints
SET previous_secret = CASE WHEN $4::timestamptz IS NULL THEN NULL ELSE secret END,
    previous_secret_until = $4::timestamptz,
    secret = $3,
    updated_at = now()
WHERE id = $1 AND tenant_key = $2
RETURNING id;

-- name: delete_push_endpoint
-- Its bindings, holds and deliveries go by their foreign keys; its jobs stay, and a worker may
-- lease them again.
DELETE FROM queueflow.push_endpoints WHERE id = $1 AND tenant_key = $2 RETURNING id;

-- name: pushed_queues
-- Every bound queue and its tenant (what the api's lease route refuses), and whether every tenant
-- with the queue bound it (the worker token's lease is refused only then: a claim for every
-- tenant leaves the bound tenants out and serves the others).
SELECT b.queue_name, b.tenant_key,
       NOT EXISTS (SELECT 1 FROM queueflow.tenant_queues t
                   WHERE t.queue_name = b.queue_name
                     AND NOT EXISTS (SELECT 1 FROM queueflow.push_bindings o
                                     WHERE o.tenant_key = t.tenant_key AND o.queue_name = t.queue_name)) AS all_pushed
FROM queueflow.push_bindings b;

-- name: active_push_endpoints
-- What the pushers deliver to: every endpoint not paused (or only endpoint $1), with its signing
-- secrets (the previous one while it still signs, and until when) and its version (updated_at).
SELECT e.id, e.tenant_key, e.name, e.url, e.concurrency, e.timeout_secs, e.headers, e.secret,
       CASE WHEN e.previous_secret_until > now() THEN e.previous_secret END AS previous_secret,
       CASE WHEN e.previous_secret_until > now() THEN e.previous_secret_until END AS previous_secret_until,
       e.failures, e.open_until, e.open_until IS NOT NULL AND e.open_until > now() AS open,
       ARRAY(SELECT b.queue_name FROM queueflow.push_bindings b WHERE b.endpoint_id = e.id ORDER BY b.queue_name) AS queues,
       e.updated_at
FROM queueflow.push_endpoints e WHERE NOT e.paused AND ($1::uuid IS NULL OR e.id = $1);

-- name: lock_push_endpoint
-- The first statement of a claim for endpoint $1, in the claim's transaction: claims for one
-- endpoint take turns, whatever pusher makes them. (Its own statement: the next one then reads a
-- snapshot taken after the lock was granted, which sees the holds the previous claim committed. In
-- one statement with the lock, READ COMMITTED would count them from before the wait.) It answers
-- the endpoint's version: a change committed before the claim (a rotated secret, a new URL) is
-- read again in the claim, so the claim's jobs are never sent as the endpoint was before it.
SELECT updated_at FROM queueflow.push_endpoints WHERE id = $1 AND NOT paused FOR UPDATE;

-- name: push_slots
-- The second: drop the endpoint's holds whose job no longer runs under the held lease, and answer
-- its concurrency, how many deliveries it still holds, and its breaker.
-- (The count reads the statement's snapshot, from before the delete: the deleted are subtracted.)
WITH gone AS (
    DELETE FROM queueflow.push_inflight f
    WHERE f.endpoint_id = $1
      AND NOT EXISTS (SELECT 1 FROM queueflow.jobs j
                      WHERE j.id = f.job_id AND j.status = 'running' AND j.lease_token = f.lease_token)
    RETURNING f.job_id
)
SELECT e.concurrency,
       e.open_until IS NOT NULL AS tripped,
       e.open_until IS NOT NULL AND e.open_until > now() AS open,
       (SELECT count(*) FROM queueflow.push_inflight f WHERE f.endpoint_id = e.id)
         - (SELECT count(*) FROM gone) AS held
FROM queueflow.push_endpoints e WHERE e.id = $1;

-- name: hold_push_jobs
-- The claim's jobs, held by endpoint $1 until they stop running under these leases.
INSERT INTO queueflow.push_inflight (endpoint_id, job_id, lease_token)
SELECT $1, u.job_id, u.token FROM unnest($2::uuid[], $3::uuid[]) AS u(job_id, token);

-- name: push_endpoint_failed
-- A retryable failure of endpoint $1: one more in a row.
UPDATE queueflow.push_endpoints SET failures = failures + 1 WHERE id = $1 RETURNING failures;

-- name: open_push_breaker
UPDATE queueflow.push_endpoints SET open_until = now() + make_interval(secs => $2::float8)
WHERE id = $1 RETURNING open_until;

-- name: close_push_breaker
UPDATE queueflow.push_endpoints SET failures = 0, open_until = NULL
WHERE id = $1 AND (failures > 0 OR open_until IS NOT NULL);

-- name: insert_push_deliveries
-- Group commit: many deliveries' history rows in one statement.
INSERT INTO queueflow.push_deliveries
    (endpoint_id, job_id, attempt, webhook_id, status, latency_ms, body, outcome, error)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[], $5::int[], $6::float8[], $7::text[],
                     $8::text[], $9::text[]);

-- name: recent_push_deliveries
SELECT d.endpoint_id, d.job_id, d.attempt, d.webhook_id, d.status, d.latency_ms, d.body, d.outcome,
       d.error, d.delivered_at
FROM queueflow.push_deliveries d
JOIN queueflow.push_endpoints e ON e.id = d.endpoint_id AND e.tenant_key = $2
WHERE d.endpoint_id = $1
ORDER BY d.id DESC LIMIT $3;

-- name: job_push_deliveries
SELECT d.endpoint_id, d.job_id, d.attempt, d.webhook_id, d.status, d.latency_ms, d.body, d.outcome,
       d.error, d.delivered_at
FROM queueflow.push_deliveries d WHERE d.job_id = $1
ORDER BY d.attempt, d.id;

-- name: prune_push_deliveries
-- Deliveries of jobs that are gone, an hour after the delivery, $1 at a time.
DELETE FROM queueflow.push_deliveries WHERE id IN (
    SELECT d.id FROM queueflow.push_deliveries d
    WHERE d.delivered_at < now() - interval '1 hour'
      AND NOT EXISTS (SELECT 1 FROM queueflow.jobs j WHERE j.id = d.job_id)
    ORDER BY d.delivered_at LIMIT $1
);
