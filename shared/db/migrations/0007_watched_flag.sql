-- QueueFlow schema, version 7: no trigger call on the hot path.
--
-- The status trigger ran for every claim and every completion only to ask whether an SSE stream
-- watched the job (an EXISTS on job_watchers per row, about 25 us a row). A job now carries
-- `watched`, set by the statement that registers a stream (never cleared: a stale flag costs at
-- most a notification nobody listens to), and the trigger's WHEN clause lets PostgreSQL skip the
-- call unless the new status must wake workers (pending, retrying), is a cancellation (a running
-- in-process handler must stop), or the job is watched.
ALTER TABLE queueflow.jobs ADD COLUMN watched boolean NOT NULL DEFAULT false;

CREATE OR REPLACE FUNCTION queueflow.notify_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IN ('pending', 'retrying') THEN
        PERFORM pg_notify(CASE WHEN NEW.scheduled_at <= now() THEN 'queueflow_work' ELSE 'queueflow_delayed' END,
                          NEW.queue_name);
    END IF;
    IF NEW.status = 'cancelled' OR NEW.watched THEN
        PERFORM pg_notify('queueflow_job_events', NEW.id::text || ':' || NEW.status);
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER jobs_notify_status ON queueflow.jobs;
CREATE TRIGGER jobs_notify_status AFTER UPDATE OF status ON queueflow.jobs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('pending', 'retrying', 'cancelled') OR NEW.watched))
    EXECUTE FUNCTION queueflow.notify_status();
