-- QueueFlow schema, version 38: push delivery (issue 39; docs/push.md).
--
-- * push_endpoints: a tenant's HTTP endpoints. `secret` signs every delivery (Standard Webhooks);
--   after a rotation `previous_secret` signs beside it until `previous_secret_until`. The circuit
--   breaker's state is kept here, shared by every pusher replica: `failures` counts the
--   consecutive retryable failures, `open_until` (when set) is when the open breaker lets one
--   delivery through again (half-open).
-- * push_bindings: which queue of a tenant an endpoint drains. A queue of a tenant is bound to one
--   endpoint at most, and a bound queue is drained by push only (leasing it is a 409).
-- * push_inflight: the deliveries an endpoint holds, one row per claimed job and lease. A claim for
--   an endpoint locks the endpoint's row, drops the rows whose job no longer runs under that lease
--   (finished by the pusher, by its receiver through the worker routes after a 202, cancelled, or
--   reclaimed by the janitor), counts the rest, and claims at most `concurrency` minus that count,
--   in the same transaction: so the endpoint's concurrency holds across any number of pushers,
--   without touching the claim path of other queues.
-- * push_deliveries: one row per HTTP delivery (the status, latency and first KiB of the answer's
--   body): the attempt history of pushed jobs and the endpoint's recent deliveries. Rows of a job
--   that is gone are pruned by the pushers an hour later.
CREATE TABLE queueflow.push_endpoints (
    id uuid PRIMARY KEY,
    tenant_key text NOT NULL,
    name text NOT NULL,
    url text NOT NULL,
    concurrency int NOT NULL CHECK (concurrency > 0),
    timeout_secs int NOT NULL CHECK (timeout_secs > 0),
    headers jsonb,
    secret text NOT NULL,
    previous_secret text,
    previous_secret_until timestamptz,
    paused boolean NOT NULL DEFAULT false,
    failures int NOT NULL DEFAULT 0,
    open_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX push_endpoints_name_idx ON queueflow.push_endpoints (tenant_key, name);

CREATE TABLE queueflow.push_bindings (
    tenant_key text NOT NULL,
    queue_name text NOT NULL,
    endpoint_id uuid NOT NULL REFERENCES queueflow.push_endpoints (id) ON DELETE CASCADE,
    PRIMARY KEY (tenant_key, queue_name)
);
CREATE INDEX push_bindings_endpoint_idx ON queueflow.push_bindings (endpoint_id);

CREATE TABLE queueflow.push_inflight (
    endpoint_id uuid NOT NULL REFERENCES queueflow.push_endpoints (id) ON DELETE CASCADE,
    job_id uuid NOT NULL,
    lease_token uuid NOT NULL,
    PRIMARY KEY (endpoint_id, job_id, lease_token)
);

CREATE TABLE queueflow.push_deliveries (
    id bigserial PRIMARY KEY,
    endpoint_id uuid NOT NULL REFERENCES queueflow.push_endpoints (id) ON DELETE CASCADE,
    job_id uuid NOT NULL,
    attempt int NOT NULL,
    webhook_id text NOT NULL,
    status int,
    latency_ms double precision NOT NULL,
    body text,
    outcome text NOT NULL,
    error text,
    delivered_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX push_deliveries_endpoint_idx ON queueflow.push_deliveries (endpoint_id, id DESC);
CREATE INDEX push_deliveries_job_idx ON queueflow.push_deliveries (job_id, attempt);
CREATE INDEX push_deliveries_age_idx ON queueflow.push_deliveries (delivered_at);
