-- QueueFlow schema, version 1: jobs (the queue and the record of truth), dead letters,
-- the workflow tables' first shape, and the NOTIFY triggers that wake waiters.

CREATE SCHEMA IF NOT EXISTS queueflow;

CREATE TABLE queueflow.jobs (
    id               uuid PRIMARY KEY,
    queue_name       text        NOT NULL,
    task_name        text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    config           jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'retrying', 'cancelled')),
    priority         integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    locked_until     timestamptz,
    lease_token      uuid,
    delivery_count   integer     NOT NULL DEFAULT 0,
    retry_count      integer     NOT NULL DEFAULT 0,
    next_retry_at    timestamptz,
    error_message    text,
    result           jsonb,
    metadata         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    tenant_id        text,
    idempotency_key  text,
    workflow_id      text,
    workflow_step_id text
) WITH (fillfactor = 85, autovacuum_vacuum_scale_factor = 0.05);

-- The claim path: only claimable rows are in it, in the claim's ORDER BY.
CREATE INDEX jobs_claim_idx ON queueflow.jobs (queue_name, priority DESC, scheduled_at, created_at)
    WHERE status IN ('pending', 'retrying');
-- The janitor's expired-lease sweep.
CREATE INDEX jobs_lease_expiry_idx ON queueflow.jobs (locked_until) WHERE status = 'running';
-- "When does the next delayed job fall due": a first-row probe.
CREATE INDEX jobs_next_due_idx ON queueflow.jobs (scheduled_at) WHERE status IN ('pending', 'retrying');
-- Idempotent enqueue, per tenant (NULL tenants share one namespace).
CREATE UNIQUE INDEX jobs_idempotency_idx ON queueflow.jobs (COALESCE(tenant_id, ''), idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Tenant listings, newest first, keyset on (created_at, id).
CREATE INDEX jobs_tenant_created_idx ON queueflow.jobs (tenant_id, created_at DESC, id DESC);
CREATE INDEX jobs_workflow_idx ON queueflow.jobs (workflow_id) WHERE workflow_id IS NOT NULL;
-- Retention walks terminal rows by age.
CREATE INDEX jobs_terminal_idx ON queueflow.jobs (completed_at) WHERE status IN ('completed', 'failed', 'cancelled');

CREATE TABLE queueflow.dead_letters (
    id             bigserial PRIMARY KEY,
    job_id         uuid        NOT NULL,
    queue_name     text        NOT NULL,
    task_name      text        NOT NULL,
    reason         text        NOT NULL,
    error_message  text,
    tenant_id      text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    replayed_at    timestamptz,
    replay_job_id  uuid
);
CREATE UNIQUE INDEX dead_letters_job_idx ON queueflow.dead_letters (job_id);
CREATE INDEX dead_letters_tenant_created_idx ON queueflow.dead_letters (tenant_id, created_at DESC, id DESC);

CREATE TABLE queueflow.workflows (
    id            text PRIMARY KEY,
    name          text        NOT NULL,
    status        text        NOT NULL DEFAULT 'created',
    context       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    metadata      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    tenant_id     text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    started_at    timestamptz,
    completed_at  timestamptz
);
CREATE INDEX workflows_tenant_created_idx ON queueflow.workflows (tenant_id, created_at DESC, id DESC);

-- Retry delay for a job's next attempt: the backoff strategy, capped, jittered, and capped again so
-- jitter never pushes a delay past retry_max_delay_secs. `attempt` is retry_count before the retry.
CREATE FUNCTION queueflow.retry_delay_secs(config jsonb, attempt integer) RETURNS double precision
LANGUAGE sql VOLATILE AS $$
    WITH c AS (
        SELECT COALESCE((config->>'retry_delay_secs')::double precision, 60) AS base,
               COALESCE((config->>'retry_max_delay_secs')::double precision, 3600) AS cap,
               LEAST(GREATEST(COALESCE((config->>'jitter_factor')::double precision, 0), 0), 1) AS jitter,
               COALESCE(config->>'retry_backoff', 'exponential') AS strategy
    ), raw AS (
        SELECT cap, jitter,
               LEAST(cap, CASE strategy
                   WHEN 'fixed' THEN base
                   WHEN 'linear' THEN base * (attempt + 1)
                   ELSE base * power(2::double precision, LEAST(attempt, 62))
               END) AS delay
        FROM c
    )
    SELECT GREATEST(0, LEAST(cap, round(delay * (1 - jitter + 2 * jitter * random()))))
    FROM raw
$$;

-- Wake-ups. Inserted due rows wake their queues' waiters; future-dated ones tell the janitors to
-- recompute their next wake-up. One notification per queue per statement, whatever the batch size.
CREATE FUNCTION queueflow.notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(CASE WHEN due THEN 'queueflow_work' ELSE 'queueflow_delayed' END, queue_name)
    FROM (SELECT DISTINCT queue_name, scheduled_at <= now() AS due
          FROM inserted WHERE status = 'pending') AS q;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_inserted AFTER INSERT ON queueflow.jobs
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION queueflow.notify_inserted();

-- Who is watching a job's status (SSE streams). Status changes are announced on
-- queueflow_job_events only for watched jobs, and always for cancellations (a running in-process
-- handler must stop), so the hot claim/complete path sends no notification at all.
CREATE UNLOGGED TABLE queueflow.job_watchers (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    job_id     uuid        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX job_watchers_job_idx ON queueflow.job_watchers (job_id);

CREATE FUNCTION queueflow.notify_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('pending', 'retrying') THEN
        IF NEW.scheduled_at <= now() THEN
            PERFORM pg_notify('queueflow_work', NEW.queue_name);
        ELSE
            PERFORM pg_notify('queueflow_delayed', NEW.queue_name);
        END IF;
    END IF;
    IF NEW.status = 'cancelled'
       OR EXISTS (SELECT 1 FROM queueflow.job_watchers w WHERE w.job_id = NEW.id) THEN
        PERFORM pg_notify('queueflow_job_events', NEW.id::text || ':' || NEW.status);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_notify_status AFTER UPDATE OF status ON queueflow.jobs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION queueflow.notify_status();

-- Which tasks live in-process workers handle: each worker process upserts its rows on a heartbeat,
-- so GET /api/v1/tasks answers for the whole fleet, whichever process serves it.
CREATE TABLE queueflow.worker_tasks (
    process_id   text        NOT NULL,
    task_name    text        NOT NULL,
    queue_name   text        NOT NULL,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (process_id, task_name, queue_name)
);
