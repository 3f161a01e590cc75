-- QueueFlow schema, version 3: cron schedules, per-tenant queues (pause/resume, fair share).

CREATE TABLE queueflow.cron_schedules (
    id               text        PRIMARY KEY,
    name             text        NOT NULL,
    cron_expr        text        NOT NULL,
    task_name        text        NOT NULL,
    payload          jsonb       NOT NULL DEFAULT '{}'::jsonb,
    config           jsonb,                  -- partial, stored field names; defaults fill the rest
    queue_name       text,                   -- NULL: the firing process's default queue
    tenant_id        text,
    enabled          boolean     NOT NULL DEFAULT true,
    next_run_at      timestamptz NOT NULL,   -- the durable alarm
    last_enqueued_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX cron_schedules_name_idx ON queueflow.cron_schedules (COALESCE(tenant_id, ''), name);
CREATE INDEX cron_schedules_due_idx ON queueflow.cron_schedules (next_run_at) WHERE enabled;
CREATE INDEX cron_schedules_tenant_created_idx ON queueflow.cron_schedules (tenant_id, created_at DESC, id DESC);

-- A new or resumed schedule may fall due before the janitors' next sweep: let them recompute.
CREATE FUNCTION queueflow.notify_cron_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queueflow_delayed', '');
    RETURN NULL;
END $$;
CREATE TRIGGER cron_schedules_notify AFTER INSERT OR UPDATE OF enabled ON queueflow.cron_schedules
    FOR EACH STATEMENT EXECUTE FUNCTION queueflow.notify_cron_changed();

-- Every (tenant, queue) that has ever had a job: the queue list, pause/resume, and the set of
-- tenants a claim shares a queue between. tenant_key is '' for jobs without a tenant.
CREATE TABLE queueflow.tenant_queues (
    queue_name text        NOT NULL,
    tenant_key text        NOT NULL,
    paused     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, tenant_key)
);
INSERT INTO queueflow.tenant_queues (queue_name, tenant_key)
SELECT DISTINCT queue_name, COALESCE(tenant_id, '') FROM queueflow.jobs;
CREATE INDEX tenant_queues_tenant_idx ON queueflow.tenant_queues (tenant_key, queue_name);

-- The claim walks one tenant's slice of a queue at a time.
DROP INDEX queueflow.jobs_claim_idx;
CREATE INDEX jobs_claim_idx ON queueflow.jobs
    (queue_name, (COALESCE(tenant_id, '')), priority DESC, scheduled_at, created_at)
    WHERE status IN ('pending', 'retrying');
CREATE INDEX jobs_tenant_active_idx ON queueflow.jobs (tenant_id, queue_name)
    WHERE status IN ('pending', 'retrying', 'running');

CREATE OR REPLACE FUNCTION queueflow.notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queueflow.tenant_queues (queue_name, tenant_key)
    SELECT DISTINCT queue_name, COALESCE(tenant_id, '') FROM inserted
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify(CASE WHEN due THEN 'queueflow_work' ELSE 'queueflow_delayed' END, queue_name)
    FROM (SELECT DISTINCT queue_name, scheduled_at <= now() AS due
          FROM inserted WHERE status = 'pending') AS q;
    RETURN NULL;
END $$;
