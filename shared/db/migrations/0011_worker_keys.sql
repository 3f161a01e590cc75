-- QueueFlow schema, version 11: worker keys, minted by a tenant for its own workers.
--
-- A key opens the worker routes for its tenant's jobs only, on its queues only (NULL: every
-- queue). Only the SHA-256 digest of the token is stored: the token itself is shown once, in the
-- answer that minted it. Revoking a key deletes its row; the deleting statement notifies
-- `queueflow_worker_keys` with the key's id, so every API process drops its cached copy at once.
-- Self-contained: nothing else in the schema refers to this table.
CREATE TABLE queueflow.worker_keys (
    id           uuid PRIMARY KEY,
    tenant_id    text NOT NULL,
    name         text NOT NULL,
    queues       text[],
    token_digest bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz
);

CREATE INDEX worker_keys_tenant_created_idx ON queueflow.worker_keys (tenant_id, created_at, id);
