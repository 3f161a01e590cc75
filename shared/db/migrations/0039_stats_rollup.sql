-- QueueFlow schema, version 39: a per-minute rollup of what happened to each tenant's jobs, for the
-- console's charts and GET /api/v1/stats/series (issue 41; docs/console.md, "Charts";
-- docs/operations.md, "The stats rollup").
--
-- Two sources feed it, and each event has exactly one:
-- * The janitor's scan (source 0): once a minute has ended (and a few seconds more, for the
--   statements still committing in it), the janitor counts from the job rows that are there the
--   jobs created in it (through jobs_tenant_created_idx, tenant by tenant), and the jobs that
--   finished in it (completed or failed, through jobs_terminal_idx) with their wait and run times,
--   and moves queueflow.stats_rollup.rolled_up_to past it. A scan replaces what an earlier scan of
--   the same minutes wrote, so moving rolled_up_to back recounts those minutes from the rows.
-- * Captures (source 1), for what the scan cannot see: the rows a statement deletes before the
--   scan counted them, and retries (a job row does not say when it was retried).
--   - jobs_deleted (the statement trigger of migration 37, over the deleted rows) writes one
--     queueflow.stats_captures row per tenant, queue and minute: a running job deleted by the
--     statement that completes it (a queue that removes completed jobs) is a completion now, with
--     its wait and run times; a finished job deleted before its minute was scanned (the janitor's
--     removal of a lingering job, retention) is its finish; any job created in a minute not yet
--     scanned is its creation. Whether a minute was scanned is read under a shared advisory lock
--     that the scan holds exclusively, so a job is never both counted and captured, nor neither.
--     A completing statement that deletes jobs pays for the aggregate over its own deleted rows
--     and one insert (docs/operations.md has the figure); one that keeps its jobs pays nothing.
--   - fail_job and reclaim_expired write one capture row per tenant and queue for the jobs they
--     sent to `retrying`.
--   The janitor folds captures into the rollup (and deletes them) every few seconds.
-- * Backlog (pending, scheduled, running) has no history in the rows: the janitor samples it each
--   time it scans a minute and files the sample under that minute (its end).
--
-- Rows are per tenant key (COALESCE(tenant_id, '')) and queue, and again for the tenant's queues
-- together under the queue name '' (no queue is named that): a tenant-wide chart reads one row a
-- minute, whatever the number of queues. Wait and run times are kept as histograms, one row per
-- non-empty bucket: bucket 0 is under 0.1 ms, bucket b > 0 is [0.1 ms * 2^((b-1)/4), 0.1 ms * 2^(b/4))
-- (queueflow.stats_bucket; shared/domain/stats.py reads them back), so a percentile is within a
-- bucket's width (about 19 %) of the exact figure, and histograms of many minutes add up.

CREATE TABLE queueflow.stats_rollup (
    one          boolean     PRIMARY KEY DEFAULT true CHECK (one),
    rolled_up_to timestamptz NOT NULL
);
INSERT INTO queueflow.stats_rollup (rolled_up_to) VALUES (date_trunc('minute', now()));

CREATE TABLE queueflow.stats_minutes (
    tenant_key text        NOT NULL,
    queue_name text        NOT NULL,  -- '': every queue of the tenant
    minute     timestamptz NOT NULL,
    source     smallint    NOT NULL,  -- 0: the janitor's scan of the rows, 1: captures
    enqueued   bigint      NOT NULL DEFAULT 0,
    completed  bigint      NOT NULL DEFAULT 0,
    failed     bigint      NOT NULL DEFAULT 0,
    retried    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_key, queue_name, minute, source)
);

CREATE TABLE queueflow.stats_durations (
    tenant_key text        NOT NULL,
    queue_name text        NOT NULL,
    minute     timestamptz NOT NULL,
    kind       "char"      NOT NULL,  -- 'w': wait (due to start of the last attempt), 'r': run
    source     smallint    NOT NULL,
    bucket     smallint    NOT NULL,
    jobs       bigint      NOT NULL,
    -- (jobs included: a chart reads a window's buckets from the index alone)
    PRIMARY KEY (tenant_key, queue_name, kind, minute, source, bucket) INCLUDE (jobs)
);

CREATE TABLE queueflow.stats_backlog (
    tenant_key text        NOT NULL,
    queue_name text        NOT NULL,
    minute     timestamptz NOT NULL,
    pending    bigint      NOT NULL,
    scheduled  bigint      NOT NULL,
    running    bigint      NOT NULL,
    PRIMARY KEY (tenant_key, queue_name, minute)
);

-- (By minute, for the janitor's pruning and a recount's clearing.)
CREATE INDEX stats_minutes_minute_idx ON queueflow.stats_minutes (minute);
CREATE INDEX stats_durations_minute_idx ON queueflow.stats_durations (minute);
CREATE INDEX stats_backlog_minute_idx ON queueflow.stats_backlog (minute);

-- Appended to by the statements above (no index: the janitor takes them all, a page at a time).
CREATE TABLE queueflow.stats_captures (
    tenant_key text        NOT NULL,
    queue_name text        NOT NULL,
    minute     timestamptz NOT NULL,
    enqueued   integer     NOT NULL DEFAULT 0,
    completed  integer     NOT NULL DEFAULT 0,
    failed     integer     NOT NULL DEFAULT 0,
    retried    integer     NOT NULL DEFAULT 0,
    waits      real[],
    runs       real[]
);

-- The histogram bucket of a duration in seconds (NULL for NULL; a negative one is bucket 0).
CREATE FUNCTION queueflow.stats_bucket(secs float8) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN secs < 0.0001 THEN 0
                ELSE LEAST(250, 1 + floor(4 * ln(secs / 0.0001) / ln(2.0::float8)))::smallint END
$$;

CREATE OR REPLACE FUNCTION queueflow.jobs_deleted() RETURNS trigger
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    counted timestamptz;
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

    -- The stats rollup (migration 39): what of these rows its scan has not counted, and never will.
    -- rolled_up_to only grows, so a row older than it read without the lock is older than it read
    -- with the lock; only when some row is newer is the lock taken and the mark read again.
    -- (With sequential scans off, as the statements above need them, reading the one row of
    -- stats_rollup cost about 150 us a deleted job, measured by bench/stats_series.py: they are
    -- on again until the function returns.)
    SET LOCAL enable_seqscan = on;
    counted := (SELECT rolled_up_to FROM queueflow.stats_rollup);
    IF EXISTS (SELECT 1 FROM gone g
               WHERE g.created_at >= counted OR (g.status IN ('completed', 'failed') AND g.completed_at >= counted)) THEN
        PERFORM pg_advisory_xact_lock_shared(5850492716117963939);
        counted := (SELECT rolled_up_to FROM queueflow.stats_rollup);
    END IF;
    INSERT INTO queueflow.stats_captures (tenant_key, queue_name, minute, enqueued, completed, failed, waits, runs)
    SELECT e.tenant_key, e.queue_name, e.minute, sum(e.enqueued), sum(e.completed), sum(e.failed),
           array_agg(e.wait) FILTER (WHERE e.wait IS NOT NULL), array_agg(e.run) FILTER (WHERE e.run IS NOT NULL)
    FROM (
        -- Only the statement that completes a job deletes it while it runs (complete_jobs).
        SELECT COALESCE(g.tenant_id, '') AS tenant_key, g.queue_name,
               date_trunc('minute', CASE WHEN g.status = 'running' THEN now() ELSE g.completed_at END) AS minute,
               0 AS enqueued, (g.status <> 'failed')::int AS completed, (g.status = 'failed')::int AS failed,
               EXTRACT(EPOCH FROM COALESCE(g.attempt_started_at, g.started_at) - g.scheduled_at)::real AS wait,
               EXTRACT(EPOCH FROM CASE WHEN g.status = 'running' THEN now() ELSE g.completed_at END
                                  - COALESCE(g.attempt_started_at, g.started_at))::real AS run
        FROM gone g
        WHERE g.status = 'running' OR (g.status IN ('completed', 'failed') AND g.completed_at >= counted)
        UNION ALL
        SELECT COALESCE(g.tenant_id, ''), g.queue_name, date_trunc('minute', g.created_at), 1, 0, 0, NULL, NULL
        FROM gone g WHERE g.created_at >= counted
    ) e
    GROUP BY e.tenant_key, e.queue_name, e.minute;
    RETURN NULL;
END $$;
