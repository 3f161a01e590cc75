-- QueueFlow schema, version 37: queues that remove a job in the statement that completes it
-- (issue 38; docs/operations.md, "Retention"; ADR 0023).
--
-- * tenant_queues.retention: what a tenant chose for its completed jobs on a queue: 'keep' or
--   'remove_completed' (PATCH /api/v1/queues/{queue}); NULL when it chose nothing, and then
--   queueflow.queue_retention_defaults decides, by queue name, for every tenant (what the api
--   processes record from --queue-retention at start), else 'keep'. The completing statements
--   (complete_jobs) read both tables once per statement, through the partial index below and the
--   defaults' primary key: a handful of rows, whatever the number of queues.
-- * jobs.lingers: the job may be read back after it completes: it was created by POST
--   /api/v1/jobs (upstream's Python client reads every job it creates back, then polls it to wait
--   for it), or read unfinished by GET /api/v1/jobs/{id} while its queue removed completed jobs.
--   Such a job, and a watched one (an SSE stream), is completed in place on a removing queue, so
--   its reader finds the outcome, and listed in queueflow.job_removals: the janitor deletes it
--   --removal-grace-secs later (remove_lingering_jobs).
-- * Deleting a job now deletes its attempts, its log state and its log lines with one statement
--   each per deleting statement (trigger jobs_deleted, over the deleted rows), instead of one
--   cascade per row through foreign keys: the two cascades cost more than the delete itself (about
--   12 of 23 us a job when completions delete). A job's attempts are looked up only when it can
--   have any: a job completed (or completing) at its first delivery has none, since only an
--   attempt that ended without completing is written there, and each such attempt was a delivery.
--   A log append locks its job row (as the foreign key's check did), so lines can never be written
--   for a job deleted meanwhile.
-- * The workflow outbox's NOTIFY is sent only by a statement that inserted rows: a completing
--   statement writes the outbox rows of the step jobs it deletes itself (the row trigger
--   jobs_step_finished fires on updates only), and does so in every statement, mostly inserting
--   none.
ALTER TABLE queueflow.tenant_queues
    ADD COLUMN retention text CHECK (retention IN ('keep', 'remove_completed'));
CREATE INDEX tenant_queues_retention_idx ON queueflow.tenant_queues (queue_name, tenant_key)
    WHERE retention IS NOT NULL;

CREATE TABLE queueflow.queue_retention_defaults (
    queue_name text PRIMARY KEY,
    retention  text NOT NULL CHECK (retention IN ('keep', 'remove_completed'))
);

-- Whether completed jobs of `queue` go when they complete, for tenant key `tenant`: its own choice,
-- else the fleet's default for the name, else keep. (complete_jobs says the same with hashed
-- lookups, once per statement: tests/db/test_removing_queues.py checks that the two agree.)
CREATE FUNCTION queueflow.removes_completed(queue text, tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT COALESCE(
        (SELECT t.retention FROM queueflow.tenant_queues t WHERE t.queue_name = queue AND t.tenant_key = tenant),
        (SELECT d.retention FROM queueflow.queue_retention_defaults d WHERE d.queue_name = queue),
        'keep') = 'remove_completed'
$$;

ALTER TABLE queueflow.jobs ADD COLUMN lingers boolean NOT NULL DEFAULT false;

CREATE TABLE queueflow.job_removals (
    job_id       uuid        NOT NULL,
    completed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_removals_due_idx ON queueflow.job_removals (completed_at);

ALTER TABLE queueflow.job_attempts DROP CONSTRAINT job_attempts_job_id_fkey;
ALTER TABLE queueflow.job_log_state DROP CONSTRAINT job_log_state_job_id_fkey;

CREATE FUNCTION queueflow.jobs_deleted() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    -- (A completing statement on a queue that keeps its jobs deletes none, and says so once.)
    IF NOT EXISTS (SELECT 1 FROM gone) THEN
        RETURN NULL;
    END IF;
    -- (Each statement of a trigger function reads with a snapshot of its own: a log line
    -- committed while the delete waited for the job's row lock is seen, and deleted, here.)
    DELETE FROM queueflow.job_attempts a USING gone g
    WHERE a.job_id = g.id AND NOT (g.status IN ('running', 'completed') AND g.delivery_count <= 1);
    WITH state AS (
        DELETE FROM queueflow.job_log_state s USING gone g WHERE s.job_id = g.id RETURNING s.job_id
    )
    DELETE FROM queueflow.job_logs l USING state WHERE l.job_id = state.job_id;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_deleted AFTER DELETE ON queueflow.jobs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queueflow.jobs_deleted();

DROP TRIGGER workflow_outbox_notify ON queueflow.workflow_outbox;
CREATE OR REPLACE FUNCTION queueflow.notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM added) THEN
        PERFORM pg_notify('queueflow_workflow', '');
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER workflow_outbox_notify AFTER INSERT ON queueflow.workflow_outbox
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION queueflow.notify_outbox();
