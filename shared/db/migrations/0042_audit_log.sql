-- QueueFlow schema, version 42: the audit log (issue 40; docs/access.md, "The audit log").
--
-- One row per mutating request to a tenant route: who (`actor`, a credential's non-secret id or an
-- identity provider's subject, with its display name and role), what (`action`, the route's
-- operation id; `targets`, the ids it named; for a bulk action `filter`, what selected the rows,
-- and `affected`, how many), and how it went (`outcome`: success, denied or failed, and the HTTP
-- `status`), with the request's id and the caller's address. A change that is one transaction
-- writes its row in that transaction. Request bodies and secrets are never stored.
--
-- The console and GET /api/v1/audit page a tenant's rows newest first (the first index; actor and
-- action filters use the next two, a target the GIN index); the janitor deletes rows older than
-- --audit-retention-days, oldest first (created_at).
CREATE TABLE queueflow.audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    tenant_id text NOT NULL,
    actor text NOT NULL,
    actor_name text,
    role text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    action text NOT NULL,
    targets text[] NOT NULL DEFAULT '{}',
    filter jsonb,
    affected bigint,
    request_id text,
    source text,
    outcome text NOT NULL CHECK (outcome IN ('success', 'denied', 'failed')),
    status int NOT NULL
);
CREATE INDEX audit_log_tenant_created_idx ON queueflow.audit_log (tenant_id, created_at DESC, id DESC);
CREATE INDEX audit_log_actor_idx ON queueflow.audit_log (tenant_id, actor, created_at DESC, id DESC);
CREATE INDEX audit_log_action_idx ON queueflow.audit_log (tenant_id, action, created_at DESC, id DESC);
CREATE INDEX audit_log_targets_idx ON queueflow.audit_log USING gin (targets);
CREATE INDEX audit_log_created_idx ON queueflow.audit_log (created_at);
