-- QueueFlow schema, version 8: a cheaper insert (issue: speed).
--
-- * The "next delayed job" index holds only jobs that were not due when they were written (a delay,
--   a retry's back-off, a re-queue): a job due at its insert was announced by the insert trigger, so
--   neither the next-due probe nor the wake-up of due queues ever needs it. Immediate jobs, nearly
--   all of them, no longer pay an index insert for it.
-- * The queue-name rule of migration 6 is checked in the insert trigger, once per distinct queue of
--   the statement rather than once per row, and the second statement trigger is gone.
DROP INDEX queueflow.jobs_next_due_idx;
CREATE INDEX jobs_delayed_idx ON queueflow.jobs (scheduled_at)
    WHERE status IN ('pending', 'retrying') AND scheduled_at > created_at;

CREATE OR REPLACE FUNCTION queueflow.notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    SELECT q.queue_name INTO bad
    FROM (SELECT DISTINCT queue_name FROM inserted) AS q
    WHERE octet_length(q.queue_name) NOT BETWEEN 1 AND 128 OR q.queue_name ~ '[[:space:][:cntrl:]]'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('queue name must be 1 to 128 bytes with no whitespace or control characters, not %L', bad);
    END IF;
    INSERT INTO queueflow.tenant_queues (queue_name, tenant_key)
    SELECT DISTINCT queue_name, COALESCE(tenant_id, '') FROM inserted
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify(CASE WHEN due THEN 'queueflow_work' ELSE 'queueflow_delayed' END, queue_name)
    FROM (SELECT DISTINCT queue_name, scheduled_at <= now() AS due
          FROM inserted WHERE status = 'pending') AS q;
    RETURN NULL;
END $$;

DROP TRIGGER jobs_check_queue_names ON queueflow.jobs;
DROP FUNCTION queueflow.check_inserted_queue_names();
