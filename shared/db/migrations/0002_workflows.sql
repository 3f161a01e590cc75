-- QueueFlow schema, version 2: workflows. Steps, the outbox that carries step outcomes to the
-- advancer, and the change notifications for workflow event streams.

ALTER TABLE queueflow.workflows
    ADD COLUMN steps              jsonb   NOT NULL DEFAULT '[]'::jsonb,  -- definitions as declared
    ADD COLUMN timeout_secs       integer,
    ADD COLUMN deadline_at        timestamptz,
    ADD COLUMN error_message      text,
    ADD COLUMN retry_count        integer NOT NULL DEFAULT 0,
    ADD COLUMN parent_workflow_id text,
    ADD COLUMN parent_step_name   text,
    ADD COLUMN depth              integer NOT NULL DEFAULT 0,
    ADD COLUMN halted             boolean NOT NULL DEFAULT false;

CREATE INDEX workflows_deadline_idx ON queueflow.workflows (deadline_at)
    WHERE status IN ('created', 'running') AND deadline_at IS NOT NULL;
CREATE INDEX workflows_parent_idx ON queueflow.workflows (parent_workflow_id) WHERE parent_workflow_id IS NOT NULL;
CREATE INDEX workflows_active_idx ON queueflow.workflows (created_at) WHERE status IN ('created', 'running');

CREATE TABLE queueflow.workflow_steps (
    workflow_id       text        NOT NULL REFERENCES queueflow.workflows (id) ON DELETE CASCADE,
    name              text        NOT NULL,
    idx               integer     NOT NULL,          -- declaration order
    definition        jsonb       NOT NULL,          -- the normalised step (task, payload, when, ...)
    depends_on        text[]      NOT NULL DEFAULT '{}',
    on_failure        text        NOT NULL DEFAULT 'halt',
    status            text        NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled', 'skipped')),
    skip_kind         text,                          -- 'condition' or 'policy' for a skipped step
    attempt           integer     NOT NULL DEFAULT 0,  -- bumped each time the step is scheduled
    job_id            uuid,                          -- its job (the first child, for a fan-out)
    child_workflow_id text,
    error             text,
    started_at        timestamptz,
    completed_at      timestamptz,
    fan_total         integer,
    fan_completed     integer     NOT NULL DEFAULT 0,
    fan_failed        integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (workflow_id, name)
);

-- A fan-out child's position, and which scheduling of its step a job belongs to.
ALTER TABLE queueflow.jobs ADD COLUMN step_index integer, ADD COLUMN step_attempt integer;

-- The advancer's inbox. A step job's terminal outcome writes its row in the same transaction as
-- the outcome (trigger below); API creates and retries write 'start'/'retry' rows; a settled child
-- workflow writes a 'child' row for its parent. Consumed with SKIP LOCKED, deleted in the same
-- transaction as the advancement it caused.
CREATE TABLE queueflow.workflow_outbox (
    id                bigserial   PRIMARY KEY,
    workflow_id       text        NOT NULL,
    kind              text        NOT NULL CHECK (kind IN ('start', 'job', 'child', 'retry', 'heal')),
    step_name         text,
    job_id            uuid,
    step_index        integer,
    step_attempt      integer,
    outcome           text,
    result            jsonb,                     -- the step job's result, copied by the trigger
    error_message     text,                      -- and its last error
    child_workflow_id text,
    attempts          integer     NOT NULL DEFAULT 0,  -- failed applications (a bug, not an outcome)
    last_error        text,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX workflow_outbox_workflow_idx ON queueflow.workflow_outbox (workflow_id);

CREATE FUNCTION queueflow.step_job_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queueflow.workflow_outbox
        (workflow_id, kind, step_name, job_id, step_index, step_attempt, outcome, result, error_message)
    VALUES (NEW.workflow_id, 'job', NEW.workflow_step_id, NEW.id, NEW.step_index, NEW.step_attempt, NEW.status,
            NEW.result, NEW.error_message);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_step_finished AFTER UPDATE OF status ON queueflow.jobs
    FOR EACH ROW
    WHEN (NEW.workflow_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION queueflow.step_job_finished();

CREATE FUNCTION queueflow.notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queueflow_workflow', '');
    RETURN NULL;
END $$;

CREATE TRIGGER workflow_outbox_notify AFTER INSERT ON queueflow.workflow_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION queueflow.notify_outbox();

-- Workflow event streams: changes to a watched workflow or its steps are announced.
CREATE UNLOGGED TABLE queueflow.workflow_watchers (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    workflow_id text        NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX workflow_watchers_workflow_idx ON queueflow.workflow_watchers (workflow_id);

CREATE FUNCTION queueflow.announce_workflow_change(wf text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM queueflow.workflow_watchers w WHERE w.workflow_id = wf) THEN
        PERFORM pg_notify('queueflow_workflow_events', wf);
    END IF;
END $$;

CREATE FUNCTION queueflow.workflow_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM queueflow.announce_workflow_change(NEW.id);
    RETURN NULL;
END $$;

CREATE FUNCTION queueflow.workflow_step_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM queueflow.announce_workflow_change(NEW.workflow_id);
    RETURN NULL;
END $$;

CREATE TRIGGER workflows_notify_change AFTER UPDATE ON queueflow.workflows
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.error_message IS DISTINCT FROM NEW.error_message)
    EXECUTE FUNCTION queueflow.workflow_changed();
CREATE TRIGGER workflow_steps_notify_change AFTER UPDATE ON queueflow.workflow_steps
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.fan_completed IS DISTINCT FROM NEW.fan_completed
                       OR OLD.fan_failed IS DISTINCT FROM NEW.fan_failed)
    EXECUTE FUNCTION queueflow.workflow_step_changed();
