-- Named queries of the stats rollup (migration 39): the janitor's scan, fold, backlog sample and
-- pruning, and the series that GET /api/v1/stats/series reads.

-- name: stats_scan_lock
-- The scan holds this exclusively; jobs_deleted takes it shared before it reads rolled_up_to.
SELECT pg_advisory_xact_lock(5850492716117963939);

-- name: stats_scan_range
-- The minutes the next scan counts: from rolled_up_to to the last whole minute that ended more than
-- $1 seconds ago (the statements of that minute have committed), at most $2 minutes.
SELECT rolled_up_to AS start,
       LEAST(rolled_up_to + make_interval(mins => $2), date_trunc('minute', now() - make_interval(secs => $1))) AS stop
FROM queueflow.stats_rollup FOR UPDATE;

-- name: stats_scan_clear
-- What an earlier scan of [$1, $2) wrote (none, unless rolled_up_to was moved back).
WITH minutes AS (
    DELETE FROM queueflow.stats_minutes WHERE source = 0 AND minute >= $1 AND minute < $2
)
DELETE FROM queueflow.stats_durations WHERE source = 0 AND minute >= $1 AND minute < $2;

-- name: stats_scan
-- Count the minutes [$1, $2) from the job rows: jobs created in them (tenant by tenant, through
-- jobs_tenant_created_idx: the tenants are those of tenant_queues, and NULL's), jobs that finished
-- in them (completed or failed, through jobs_terminal_idx) with their wait (from due to the start
-- of the last attempt) and run times; per queue and for the tenant's queues together (''). Then
-- move rolled_up_to to $2. Answers how many jobs it counted.
WITH finished AS (
    SELECT COALESCE(j.tenant_id, '') AS tenant_key, j.queue_name, date_trunc('minute', j.completed_at) AS minute,
           j.status,
           queueflow.stats_bucket(EXTRACT(EPOCH FROM COALESCE(j.attempt_started_at, j.started_at) - j.scheduled_at)::float8) AS wait_bucket,
           queueflow.stats_bucket(EXTRACT(EPOCH FROM j.completed_at - COALESCE(j.attempt_started_at, j.started_at))::float8) AS run_bucket
    FROM queueflow.jobs j
    WHERE j.status IN ('completed', 'failed') AND j.completed_at >= $1 AND j.completed_at < $2
), created AS (
    SELECT t.tenant_key, c.queue_name, date_trunc('minute', c.created_at) AS minute
    FROM (SELECT DISTINCT tenant_key FROM queueflow.tenant_queues) t
    CROSS JOIN LATERAL (
        SELECT j.queue_name, j.created_at FROM queueflow.jobs j
        WHERE j.tenant_id = t.tenant_key AND j.created_at >= $1 AND j.created_at < $2
    ) c
    UNION ALL
    SELECT '', j.queue_name, date_trunc('minute', j.created_at) FROM queueflow.jobs j
    WHERE j.tenant_id IS NULL AND j.created_at >= $1 AND j.created_at < $2
), counts AS (
    INSERT INTO queueflow.stats_minutes (tenant_key, queue_name, minute, source, enqueued, completed, failed)
    SELECT e.tenant_key, COALESCE(e.queue_name, ''), e.minute, 0, sum(e.enqueued), sum(e.completed), sum(e.failed)
    FROM (
        SELECT tenant_key, queue_name, minute, 0 AS enqueued,
               (status = 'completed')::int AS completed, (status = 'failed')::int AS failed
        FROM finished
        UNION ALL
        SELECT tenant_key, queue_name, minute, 1, 0, 0 FROM created
    ) e
    GROUP BY GROUPING SETS ((e.tenant_key, e.minute, e.queue_name), (e.tenant_key, e.minute))
), durations AS (
    INSERT INTO queueflow.stats_durations (tenant_key, queue_name, minute, kind, source, bucket, jobs)
    SELECT d.tenant_key, COALESCE(d.queue_name, ''), d.minute, d.kind, 0, d.bucket, count(*)
    FROM (
        SELECT tenant_key, queue_name, minute, 'w'::"char" AS kind, wait_bucket AS bucket
        FROM finished WHERE wait_bucket IS NOT NULL
        UNION ALL
        SELECT tenant_key, queue_name, minute, 'r'::"char", run_bucket FROM finished WHERE run_bucket IS NOT NULL
    ) d
    GROUP BY GROUPING SETS ((d.tenant_key, d.minute, d.kind, d.bucket, d.queue_name), (d.tenant_key, d.minute, d.kind, d.bucket))
), moved AS (
    UPDATE queueflow.stats_rollup SET rolled_up_to = $2
)
SELECT (SELECT count(*) FROM finished) + (SELECT count(*) FROM created) AS counted;

-- name: stats_fold_captures
-- Add up to $1 capture rows into the rollup (source 1), per queue and for the tenant's queues
-- together, and delete them; a row another janitor is folding is skipped. Answers how many went.
WITH taken AS (
    DELETE FROM queueflow.stats_captures c
    WHERE c.ctid = ANY (ARRAY(SELECT x.ctid FROM queueflow.stats_captures x LIMIT $1 FOR UPDATE SKIP LOCKED))
    RETURNING c.tenant_key, c.queue_name, c.minute, c.enqueued, c.completed, c.failed, c.retried, c.waits, c.runs
), counts AS (
    INSERT INTO queueflow.stats_minutes AS m (tenant_key, queue_name, minute, source, enqueued, completed, failed, retried)
    SELECT t.tenant_key, COALESCE(t.queue_name, ''), t.minute, 1,
           sum(t.enqueued), sum(t.completed), sum(t.failed), sum(t.retried)
    FROM taken t
    GROUP BY GROUPING SETS ((t.tenant_key, t.minute, t.queue_name), (t.tenant_key, t.minute))
    ON CONFLICT (tenant_key, queue_name, minute, source) DO UPDATE
    SET enqueued = m.enqueued + EXCLUDED.enqueued, completed = m.completed + EXCLUDED.completed,
        failed = m.failed + EXCLUDED.failed, retried = m.retried + EXCLUDED.retried
), durations AS (
    INSERT INTO queueflow.stats_durations AS d (tenant_key, queue_name, minute, kind, source, bucket, jobs)
    SELECT x.tenant_key, COALESCE(x.queue_name, ''), x.minute, x.kind, 1, x.bucket, count(*)
    FROM (
        SELECT t.tenant_key, t.queue_name, t.minute, 'w'::"char" AS kind, queueflow.stats_bucket(w) AS bucket
        FROM taken t CROSS JOIN LATERAL unnest(t.waits) AS w
        UNION ALL
        SELECT t.tenant_key, t.queue_name, t.minute, 'r'::"char", queueflow.stats_bucket(r)
        FROM taken t CROSS JOIN LATERAL unnest(t.runs) AS r
    ) x
    GROUP BY GROUPING SETS ((x.tenant_key, x.minute, x.kind, x.bucket, x.queue_name), (x.tenant_key, x.minute, x.kind, x.bucket))
    ON CONFLICT (tenant_key, queue_name, kind, minute, source, bucket) DO UPDATE SET jobs = d.jobs + EXCLUDED.jobs
)
SELECT count(*) FROM taken;

-- name: stats_sample_backlog
-- Every tenant's backlog now, per queue and for its queues together, filed under minute $1: waiting
-- jobs through the claim indexes, running ones through the expired-lease index (as queue_gauges).
WITH per_status AS (
    SELECT COALESCE(tenant_id, '') AS tenant_key, queue_name,
           count(*) FILTER (WHERE scheduled_at <= now()) AS pending,
           count(*) FILTER (WHERE scheduled_at > now()) AS scheduled,
           0 AS running
    FROM queueflow.jobs WHERE status IN ('pending', 'retrying')
    GROUP BY 1, 2
    UNION ALL
    SELECT COALESCE(tenant_id, ''), queue_name, 0, 0, count(*)
    FROM queueflow.jobs WHERE status = 'running' AND locked_until IS NOT NULL
    GROUP BY 1, 2
)
INSERT INTO queueflow.stats_backlog AS b (tenant_key, queue_name, minute, pending, scheduled, running)
SELECT p.tenant_key, COALESCE(p.queue_name, ''), $1, sum(p.pending), sum(p.scheduled), sum(p.running)
FROM per_status p
GROUP BY GROUPING SETS ((p.tenant_key, p.queue_name), (p.tenant_key))
ON CONFLICT (tenant_key, queue_name, minute) DO UPDATE
SET pending = EXCLUDED.pending, scheduled = EXCLUDED.scheduled, running = EXCLUDED.running;

-- name: stats_prune
-- The rollup's rows of minutes before $1.
WITH minutes AS (
    DELETE FROM queueflow.stats_minutes WHERE minute < $1
), durations AS (
    DELETE FROM queueflow.stats_durations WHERE minute < $1
)
DELETE FROM queueflow.stats_backlog WHERE minute < $1;

-- name: stats_rolled_up_to
SELECT rolled_up_to FROM queueflow.stats_rollup;

-- name: stats_counts
-- Tenant key $1, queue $2 ('': all its queues), [$3, $4) in steps of $5 seconds: each step's counts.
SELECT floor(EXTRACT(EPOCH FROM m.minute - $3) / $5)::int AS step,
       sum(m.enqueued)::bigint AS enqueued, sum(m.completed)::bigint AS completed,
       sum(m.failed)::bigint AS failed, sum(m.retried)::bigint AS retried
FROM queueflow.stats_minutes m
WHERE m.tenant_key = $1 AND m.queue_name = $2 AND m.minute >= $3 AND m.minute < $4
GROUP BY 1;

-- name: stats_histograms
-- As stats_counts: each step's histogram of the kinds $6 ('w' wait, 'r' run).
SELECT floor(EXTRACT(EPOCH FROM d.minute - $3) / $5)::int AS step, d.kind::text AS kind, d.bucket,
       sum(d.jobs)::bigint AS jobs
FROM queueflow.stats_durations d
WHERE d.tenant_key = $1 AND d.queue_name = $2 AND d.kind = ANY (($6::text[])::"char"[]) AND d.minute >= $3 AND d.minute < $4
GROUP BY 1, 2, 3;

-- name: stats_backlog_samples
-- As stats_counts: each step's last backlog sample.
SELECT DISTINCT ON (step) step, pending, scheduled, running
FROM (
    SELECT floor(EXTRACT(EPOCH FROM b.minute - $3) / $5)::int AS step, b.minute, b.pending, b.scheduled, b.running
    FROM queueflow.stats_backlog b
    WHERE b.tenant_key = $1 AND b.queue_name = $2 AND b.minute >= $3 AND b.minute < $4
) s
ORDER BY step, minute DESC;

-- name: stats_failing_tasks
-- Tenant $1's tasks with the most dead letters (terminal failures) in [$3, $4) on queue $2 (NULL:
-- any), at most $5.
SELECT task_name, count(*) AS failures, max(created_at) AS last_failed_at
FROM queueflow.dead_letters
WHERE tenant_id = $1 AND ($2::text IS NULL OR queue_name = $2) AND created_at >= $3 AND created_at < $4
GROUP BY task_name
ORDER BY failures DESC, task_name
LIMIT $5;
