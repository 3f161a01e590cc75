-- QueueFlow schema, version 19: no trigger call per workflow change that nobody watches.
--
-- The change triggers on workflows and workflow_steps ran for every status change only to ask
-- whether an SSE stream watched the workflow (an EXISTS on workflow_watchers per row, about 25 us
-- of the 75 us the advancer's batched write of a settled workflow costs). As jobs did in version 7:
-- a workflow and its steps carry `watched`, set by the statement that registers a stream (never
-- cleared: a stale flag costs at most a notification nobody listens to; the steps all exist from
-- the workflow's creation, so flagging them then covers every later change), and the triggers'
-- WHEN clauses let PostgreSQL skip the call unless the row is watched.
ALTER TABLE queueflow.workflows ADD COLUMN watched boolean NOT NULL DEFAULT false;
ALTER TABLE queueflow.workflow_steps ADD COLUMN watched boolean NOT NULL DEFAULT false;

UPDATE queueflow.workflows w SET watched = true
WHERE EXISTS (SELECT 1 FROM queueflow.workflow_watchers x WHERE x.workflow_id = w.id);
UPDATE queueflow.workflow_steps s SET watched = true
WHERE EXISTS (SELECT 1 FROM queueflow.workflow_watchers x WHERE x.workflow_id = s.workflow_id);

CREATE OR REPLACE FUNCTION queueflow.workflow_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queueflow_workflow_events', NEW.id);
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION queueflow.workflow_step_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queueflow_workflow_events', NEW.workflow_id);
    RETURN NULL;
END $$;

DROP TRIGGER workflows_notify_change ON queueflow.workflows;
CREATE TRIGGER workflows_notify_change AFTER UPDATE ON queueflow.workflows
    FOR EACH ROW
    WHEN (NEW.watched AND (OLD.status IS DISTINCT FROM NEW.status
                           OR OLD.error_message IS DISTINCT FROM NEW.error_message))
    EXECUTE FUNCTION queueflow.workflow_changed();

DROP TRIGGER workflow_steps_notify_change ON queueflow.workflow_steps;
CREATE TRIGGER workflow_steps_notify_change AFTER UPDATE ON queueflow.workflow_steps
    FOR EACH ROW
    WHEN (NEW.watched AND (OLD.status IS DISTINCT FROM NEW.status
                           OR OLD.fan_completed IS DISTINCT FROM NEW.fan_completed
                           OR OLD.fan_failed IS DISTINCT FROM NEW.fan_failed))
    EXECUTE FUNCTION queueflow.workflow_step_changed();

DROP FUNCTION queueflow.announce_workflow_change(text);

-- The janitor's stalled-workflow sweep walks the live workflows in (created_at, id) order, a
-- bounded window per pass from where the last ended; the live-workflows index gains the id so
-- that the window is one index range, not a sort of every live workflow.
DROP INDEX queueflow.workflows_active_idx;
CREATE INDEX workflows_active_idx ON queueflow.workflows (created_at, id)
    WHERE status IN ('created', 'running');
