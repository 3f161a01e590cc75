-- Named queries for jobs and dead letters. Loaded once by shared/db/queries.py.
-- Every outcome write is guarded by status = 'running' AND lease_token = $token.

-- name: insert_jobs
-- Many jobs in one statement, from one JSON array of rows (`_InsertRow` in shared/db/jobs.py):
-- one text parameter costs the server a fraction of what fourteen parallel arrays cost to encode,
-- element by element. A batch without idempotency keys takes this plain insert; one with them
-- takes insert_jobs_idempotent, whose ON CONFLICT makes every row a speculative insertion.
-- $3: the audit entries of the requests that enqueue these jobs (shared/db/audit.py, `entries`),
-- written by the same statement so that neither exists without the other; NULL for none.
WITH audited AS (
    INSERT INTO queueflow.audit_log
        (tenant_id, actor, actor_name, role, action, targets, filter, affected, request_id, source,
         outcome, status)
    SELECT e.tenant_id, e.actor, e.actor_name, e.role, e.action, e.targets, e.filter, e.affected,
           e.request_id, e.source, e.outcome, e.status
    FROM json_to_recordset($3::json)
         AS e(tenant_id text, actor text, actor_name text, role text, action text, targets text[],
              filter jsonb, affected bigint, request_id text, source text, outcome text, status int)
)
INSERT INTO queueflow.jobs
    (id, queue_name, task_name, payload, config, priority, scheduled_at, metadata, tenant_id,
     idempotency_key, workflow_id, workflow_step_id, step_index, step_attempt, limit_keys, traceparent,
     tracestate, lingers)
SELECT u.id, u.q, u.t, COALESCE(u.p, '{}'), u.c, COALESCE(u.pr, 0),
       COALESCE(u.s, now()), COALESCE(u.m, '{}'), $2, u.k, u.w, u.st, u.si, u.sa, u.lk, u.tp, u.ts,
       COALESCE(u.l, false)
FROM json_to_recordset($1::json)
     AS u(id uuid, q text, t text, p jsonb, c jsonb, pr int, s timestamptz, m jsonb, k text, w text, st text,
          si int, sa int, lk text[], tp text, ts text, l bool)
RETURNING id;

-- name: insert_jobs_handed_off
-- insert_jobs for jobs that go straight to a lease call parked on their queue
-- (shared/runtime/leasing.py, "hand-off"): a row with a lease token ($1's lt) is written
-- already leased, as claim_jobs would lease it (its claim key ck, lease secs ls, timeout grace lg,
-- worker wk), unless it is not due or its tenant's queue is paused: then it waits as any job. A
-- leased row announces nothing (the insert trigger wakes waiters for pending rows only). Every row
-- comes back with claim_jobs' columns; the leased ones are the lease call's answer.
-- $3, as in insert_jobs: the requests' audit entries, written by the same statement.
WITH audited AS (
    INSERT INTO queueflow.audit_log
        (tenant_id, actor, actor_name, role, action, targets, filter, affected, request_id, source,
         outcome, status)
    SELECT e.tenant_id, e.actor, e.actor_name, e.role, e.action, e.targets, e.filter, e.affected,
           e.request_id, e.source, e.outcome, e.status
    FROM json_to_recordset($3::json)
         AS e(tenant_id text, actor text, actor_name text, role text, action text, targets text[],
              filter jsonb, affected bigint, request_id text, source text, outcome text, status int)
)
INSERT INTO queueflow.jobs
    (id, queue_name, task_name, payload, config, priority, scheduled_at, metadata, tenant_id,
     idempotency_key, workflow_id, workflow_step_id, step_index, step_attempt, limit_keys, traceparent,
     tracestate, lingers, status, lease_token, claim_key, locked_until, delivery_count, started_at,
     attempt_started_at, worker_id)
SELECT u.id, u.q, u.t, COALESCE(u.p, '{}'), u.c, COALESCE(u.pr, 0),
       COALESCE(u.s, now()), COALESCE(u.m, '{}'), $2, u.k, u.w, u.st, u.si, u.sa, u.lk, u.tp, u.ts,
       COALESCE(u.l, false),
       CASE WHEN l.leased THEN 'running' ELSE 'pending' END,
       CASE WHEN l.leased THEN u.lt END,
       CASE WHEN l.leased THEN u.ck END,
       CASE WHEN l.leased THEN now() + make_interval(secs => GREATEST(u.ls,
           COALESCE(COALESCE((u.c->>'timeout_secs')::int, 300) + u.lg, 0))) END,
       CASE WHEN l.leased THEN 1 ELSE 0 END,
       CASE WHEN l.leased THEN now() END,
       CASE WHEN l.leased THEN now() END,
       CASE WHEN l.leased THEN u.wk END
FROM json_to_recordset($1::json)
     AS u(id uuid, q text, t text, p jsonb, c jsonb, pr int, s timestamptz, m jsonb, k text, w text, st text,
          si int, sa int, lk text[], tp text, ts text, l bool, lt uuid, ck uuid, ls int, lg int, wk text)
CROSS JOIN LATERAL (
    SELECT u.lt IS NOT NULL AND u.lk IS NULL AND COALESCE(u.s, now()) <= now()
           AND NOT EXISTS (SELECT 1 FROM queueflow.tenant_queues t
                           WHERE t.queue_name = u.q AND t.tenant_key = COALESCE($2, '') AND t.paused) AS leased
) l
RETURNING id, queue_name, task_name, payload, config::text AS config, status, retry_count, delivery_count,
    created_at, scheduled_at, metadata, started_at, completed_at, next_retry_at, error_message, result,
    idempotency_key, tenant_id, workflow_id, workflow_step_id, lease_token, priority, traceparent, tracestate;

-- name: insert_jobs_idempotent
-- insert_jobs for a batch that carries idempotency keys: a key the tenant already used inserts
-- nothing (the caller looks the original up).
INSERT INTO queueflow.jobs
    (id, queue_name, task_name, payload, config, priority, scheduled_at, metadata, tenant_id,
     idempotency_key, workflow_id, workflow_step_id, step_index, step_attempt, limit_keys, traceparent,
     tracestate, lingers)
SELECT u.id, u.q, u.t, COALESCE(u.p, '{}'), u.c, COALESCE(u.pr, 0),
       COALESCE(u.s, now()), COALESCE(u.m, '{}'), $2, u.k, u.w, u.st, u.si, u.sa, u.lk, u.tp, u.ts,
       COALESCE(u.l, false)
FROM json_to_recordset($1::json)
     AS u(id uuid, q text, t text, p jsonb, c jsonb, pr int, s timestamptz, m jsonb, k text, w text, st text,
          si int, sa int, lk text[], tp text, ts text, l bool)
ON CONFLICT (COALESCE(tenant_id, ''), idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id;

-- name: unique_key_holders
-- The jobs holding these unique keys (migration 13), read in the transaction whose insert they
-- kept jobs out of.
SELECT key, job_id FROM queueflow.unique_keys WHERE tenant_key = COALESCE($1, '') AND key = ANY($2::text[]);

-- name: prune_lapsed_unique_keys
-- Unique keys whose window has passed, oldest first, at most $1 (a key being taken over is skipped).
DELETE FROM queueflow.unique_keys
WHERE (tenant_key, key) IN (
    SELECT tenant_key, key FROM queueflow.unique_keys WHERE expires_at <= now()
    ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
);

-- name: ids_for_idempotency_keys
SELECT idempotency_key, id FROM queueflow.jobs
WHERE COALESCE(tenant_id, '') = COALESCE($1, '') AND idempotency_key = ANY($2::text[]);

-- name: get_job
SELECT * FROM queueflow.jobs WHERE id = $1 AND tenant_id = $2;

-- name: get_job_watched
-- get_job for GET /api/v1/jobs/{id}: an unfinished job of a queue that removes completed jobs is
-- flagged `lingers` by the read that finds it so (migration 37), so that whoever polls it
-- (`wait_for_job`) reads its outcome: such a job is completed in place and deleted only
-- --removal-grace-secs later. The flag is set before the answer is read, in this one statement.
WITH flagged AS (
    UPDATE queueflow.jobs j SET lingers = true
    WHERE j.id = $1 AND j.tenant_id = $2 AND NOT j.lingers AND j.status IN ('pending', 'retrying', 'running')
      AND queueflow.removes_completed(j.queue_name, COALESCE(j.tenant_id, ''))
    RETURNING j.*
)
SELECT * FROM flagged
UNION ALL
SELECT * FROM queueflow.jobs WHERE id = $1 AND tenant_id = $2 AND NOT EXISTS (SELECT 1 FROM flagged);

-- name: job_owner_state
-- Existence and state of one job for the caller's tenant (404 versus 409 on cancel).
SELECT status FROM queueflow.jobs WHERE id = $1 AND tenant_id = $2;

-- name: cancel_job
-- A running job's attempt ends here, and its history row is written here: the status is read under
-- the row lock, so a claim that committed meanwhile is seen.
WITH target AS (
    SELECT id, status FROM queueflow.jobs
    WHERE id = $1 AND tenant_id = $2 AND status IN ('pending', 'retrying', 'running')
    FOR UPDATE
), cancelled AS (
    UPDATE queueflow.jobs j
    SET status = 'cancelled', completed_at = now(), locked_until = NULL
    FROM target t WHERE j.id = t.id
    RETURNING j.id, t.status AS was, j.task_name, j.delivery_count, j.worker_id,
              COALESCE(j.attempt_started_at, j.started_at) AS attempt_started_at
), attempt AS (
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome)
    SELECT id, delivery_count, worker_id, attempt_started_at, 'cancelled' FROM cancelled WHERE was = 'running'
)
SELECT id, task_name, was = 'running' AS ended_attempt,
       EXTRACT(EPOCH FROM now() - attempt_started_at)::float8 AS secs
FROM cancelled;

-- name: cancel_jobs_matching
-- Cancel by filter, oldest first, at most $7 rows; rows finishing concurrently are skipped. A running
-- job's attempt gets its history row here.
WITH picked AS (
    SELECT id, status FROM queueflow.jobs
    WHERE tenant_id = $1
      AND status = ANY($2::text[])
      AND ($3::text IS NULL OR queue_name = $3)
      AND ($4::text IS NULL OR task_name = $4)
      AND ($5::timestamptz IS NULL OR created_at >= $5)
      AND ($6::timestamptz IS NULL OR created_at < $6)
    ORDER BY created_at, id
    LIMIT $7
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE queueflow.jobs j
    SET status = 'cancelled', completed_at = now(), locked_until = NULL
    FROM picked WHERE j.id = picked.id
    RETURNING j.id, picked.status AS was, j.task_name, j.delivery_count, j.worker_id,
              COALESCE(j.attempt_started_at, j.started_at) AS attempt_started_at
), attempt AS (
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome)
    SELECT id, delivery_count, worker_id, attempt_started_at, 'cancelled' FROM cancelled WHERE was = 'running'
)
SELECT id, task_name, was = 'running' AS ended_attempt,
       EXTRACT(EPOCH FROM now() - attempt_started_at)::float8 AS secs
FROM cancelled;

-- name: retry_jobs
-- Failed or cancelled jobs run again in place (same id): pending and due now, the retry budget
-- reset, the last run's outcome cleared. A workflow's job is never retried here (the workflow's
-- retry does that). Its dead letter, if any, is marked replayed by the job itself, so the DLQ
-- cannot run it a second time. One job by id ($8), or by filter: oldest first, at most $7. The attempt
-- that failed or was cancelled is already in the history (job_attempts): nothing of it is lost here.
WITH picked AS (
    SELECT id FROM queueflow.jobs
    WHERE tenant_id = $1
      AND status = ANY($2::text[])
      AND workflow_id IS NULL
      AND ($3::text IS NULL OR queue_name = $3)
      AND ($4::text IS NULL OR task_name = $4)
      AND ($5::timestamptz IS NULL OR created_at >= $5)
      AND ($6::timestamptz IS NULL OR created_at < $6)
      AND ($8::uuid IS NULL OR id = $8)
    ORDER BY created_at, id
    LIMIT $7
    FOR UPDATE SKIP LOCKED
), retried AS (
    UPDATE queueflow.jobs j
    SET status = 'pending', retry_count = 0, scheduled_at = now(), started_at = NULL, completed_at = NULL,
        next_retry_at = NULL, error_message = NULL, result = NULL, lease_token = NULL, locked_until = NULL,
        progress = NULL
    FROM picked WHERE j.id = picked.id
    RETURNING j.id
), replayed AS (
    UPDATE queueflow.dead_letters d SET replayed_at = now(), replay_job_id = d.job_id
    FROM retried r WHERE d.job_id = r.id AND d.replayed_at IS NULL
)
SELECT id FROM retried;

-- name: job_retry_state
-- Why a job could not be retried: its status and workflow, for the caller's tenant.
SELECT status, workflow_id FROM queueflow.jobs WHERE id = $1 AND tenant_id = $2;

-- name: claim_jobs
-- Lease up to $2 due jobs of queue $1. $3 is the lease in seconds; $4, when not null, is the grace
-- added to the job's own timeout so an in-process handler's lease always covers its timeout.
-- Fair share between the queue's tenants with due work (paused ones left out): a first pass takes
-- at most ceil($2 / tenants) jobs per tenant, each tenant's in its own priority, scheduled_at,
-- created_at order, with SKIP LOCKED; a fill pass tops the batch up from tenants with more work.
-- The batch is then cut in rounds (every tenant's first job, then every tenant's second ...), and
-- $5 rotates which tenant leads a round, so one tenant's backlog can never starve another's job.
-- $6: the claim's key (see claim_key below). $7, when not null, is the only tenant claimed from
-- (a worker key's). $8: the worker id the lease request gave, or null.
-- A queue with waiting jobs that carry limit keys (migration 12) is claimed by
-- queueflow.claim_limited instead, which enforces them: one index probe tells which. The fair
-- share below is written there too, on purpose: one function for both kinds of queue (tried) cost
-- the remote drain of queues without limits about a sixth (9,000 against 11,000 jobs/s).
-- The queue ($1) and the batch size ($2) are read through scalar subqueries, which the planner
-- cannot see into: its estimates, and so the plan, are the same whatever queue and size a call
-- names, and PostgreSQL keeps the one generic plan after its first five calls. With $1 visible, a
-- large backlog of another queue made every call's custom plan look cheaper than the generic one
-- (a queue the statistics have not seen holds no job in them), and each claim was planned again:
-- about 0.7 ms of a claim of 50 beside a 1,000,000-job backlog (ADR 0022, with the other
-- plans of the hot paths that had to survive their statistics).
WITH flags AS MATERIALIZED (
    -- Any tenant's: one probe of jobs_claim_limited_order_idx. (In the index's order: without it a
    -- generic plan may read the table from its first page to the queue's first limited job.)
    SELECT (SELECT 1 FROM queueflow.jobs j
            WHERE j.queue_name = (SELECT $1::text) AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL
            ORDER BY j.queue_name, COALESCE(j.tenant_id, ''), j.priority DESC, j.scheduled_at, j.created_at
            LIMIT 1) IS NOT NULL AS limited
), tenants AS (
    SELECT t.tenant_key, row_number() OVER (ORDER BY t.tenant_key) AS pos
    FROM queueflow.tenant_queues t
    WHERE t.queue_name = (SELECT $1::text) AND NOT t.paused
      -- A named tenant (a pusher's, a worker key's) is claimed whatever drains it; a claim for every
      -- tenant leaves out the tenants that bound this queue to a push endpoint (migration 41).
      AND CASE WHEN $7::text IS NULL
               THEN NOT EXISTS (SELECT 1 FROM queueflow.push_bindings b
                                WHERE b.tenant_key = t.tenant_key AND b.queue_name = (SELECT $1::text))
               ELSE t.tenant_key = $7 END
      AND NOT (SELECT limited FROM flags)
      -- One probe per tenant: a scalar subquery, which the planner cannot turn into a hash of every
      -- due job of the queue (as it may an EXISTS when its statistics are stale).
      AND (SELECT 1 FROM queueflow.jobs j
           WHERE j.queue_name = (SELECT $1::text) AND COALESCE(j.tenant_id, '') = t.tenant_key
             AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NULL AND j.scheduled_at <= now()
           ORDER BY j.queue_name, COALESCE(j.tenant_id, ''), j.priority DESC, j.scheduled_at, j.created_at
           LIMIT 1) IS NOT NULL
), share AS (
    SELECT CEIL($2::numeric / GREATEST(count(*), 1))::int AS n, GREATEST(count(*), 1) AS tenants FROM tenants
), first_pass AS (
    SELECT c.id, (t.pos + $5::bigint) % share.tenants AS lead,
           row_number() OVER (PARTITION BY t.tenant_key
                              ORDER BY c.priority DESC, c.scheduled_at, c.created_at) AS round,
           c.priority, c.scheduled_at, c.created_at
    FROM tenants t CROSS JOIN share
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.scheduled_at, j.created_at FROM queueflow.jobs j
        WHERE j.queue_name = (SELECT $1::text) AND COALESCE(j.tenant_id, '') = t.tenant_key
          AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NULL AND j.scheduled_at <= now()
        ORDER BY j.priority DESC, j.scheduled_at, j.created_at
        LIMIT share.n
        FOR UPDATE SKIP LOCKED
    ) c
), fill AS (
    SELECT c.id, (t.pos + $5::bigint) % share.tenants AS lead,
           share.n + row_number() OVER (PARTITION BY t.tenant_key
                                        ORDER BY c.priority DESC, c.scheduled_at, c.created_at) AS round,
           c.priority, c.scheduled_at, c.created_at
    FROM tenants t CROSS JOIN share
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.scheduled_at, j.created_at FROM queueflow.jobs j
        WHERE j.queue_name = (SELECT $1::text) AND COALESCE(j.tenant_id, '') = t.tenant_key
          AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NULL AND j.scheduled_at <= now()
          AND j.id NOT IN (SELECT id FROM first_pass)
        ORDER BY j.priority DESC, j.scheduled_at, j.created_at
        LIMIT GREATEST(0, $2 - (SELECT count(*) FROM first_pass))
        FOR UPDATE SKIP LOCKED
    ) c
), chosen AS (
    SELECT id FROM (SELECT * FROM first_pass UNION ALL SELECT * FROM fill) AS candidates
    ORDER BY round, lead, priority DESC, scheduled_at, created_at
    LIMIT (SELECT $2::int)
), plain AS (
    UPDATE queueflow.jobs j
    SET status = 'running',
        lease_token = gen_random_uuid(),
        -- $6, a random key of this claim: should the answer be lost (the connection dropped after
        -- the commit), the claimer can still give its jobs back (release_unanswered_claim).
        claim_key = $6::uuid,
        -- (a stored config may leave out the default timeout: ADR 0016)
        locked_until = now() + make_interval(secs => GREATEST($3::int,
            COALESCE(COALESCE((j.config->>'timeout_secs')::int, 300) + $4::int, 0))),
        delivery_count = j.delivery_count + 1,
        started_at = COALESCE(j.started_at, now()),
        next_retry_at = NULL,
        -- This attempt (its number is delivery_count): when its lease began and, when the lease
        -- request named one, its worker ($8).
        attempt_started_at = now(),
        worker_id = $8,
        progress = NULL
    FROM chosen WHERE j.id = chosen.id
    -- A job's fields (jobs.to_lease), with its config as text: most jobs share one, decoded once.
    RETURNING j.id, j.queue_name, j.task_name, j.payload, j.config::text AS config, j.status, j.retry_count,
        j.delivery_count, j.created_at, j.scheduled_at, j.metadata, j.started_at, j.completed_at,
        j.next_retry_at, j.error_message, j.result, j.idempotency_key, j.tenant_id, j.workflow_id,
        j.workflow_step_id, j.lease_token, j.priority, j.traceparent, j.tracestate
)
SELECT * FROM plain
UNION ALL
-- (The trace context, which a claim never changes, is read beside claim_limited's rows: migration
-- 18 added it to the jobs, not to that function's answer. One primary-key probe per leased job:
-- OFFSET 0 keeps the subquery a per-row probe. As a plain join the planner, which expects 1,000
-- rows of any function, hashed the whole jobs table instead while it was small enough to look
-- cheaper: 20,000 waiting jobs, 8 ms of a 15 ms claim, on every claim.)
SELECT l.*, t.traceparent, t.tracestate
FROM queueflow.claim_limited($1, $2::int, $3::int, $4::int, $5::bigint, $6::uuid, $7::text, $8::text) l
CROSS JOIN LATERAL (SELECT j.traceparent, j.tracestate FROM queueflow.jobs j WHERE j.id = l.id OFFSET 0) t
WHERE (SELECT limited FROM flags);

-- name: heartbeat
UPDATE queueflow.jobs SET locked_until = now() + make_interval(secs => $3::int)
WHERE id = $1 AND status = 'running' AND lease_token = $2
RETURNING status;

-- name: heartbeat_jobs
-- Group commit: many heartbeats (no progress) in one statement; rows not returned lost their
-- lease or left running. The arrays come sorted by job id, so the usual plan (one primary-key
-- probe per element) takes the rows in that order.
UPDATE queueflow.jobs j SET locked_until = now() + make_interval(secs => u.secs)
FROM unnest($1::uuid[], $2::uuid[], $3::int[]) AS u(id, token, secs)
WHERE j.id = u.id AND j.status = 'running' AND j.lease_token = u.token
RETURNING j.id, u.token;

-- name: heartbeat_progress
-- A heartbeat that reports progress ($4 percent, $5 message or null): stored on the job and, for a
-- job an SSE stream watches, announced (`<id>:progress`).
WITH beat AS (
    UPDATE queueflow.jobs
    SET locked_until = now() + make_interval(secs => $3::int),
        progress = jsonb_strip_nulls(jsonb_build_object('percent', $4::float8, 'message', $5::text,
                                                        'updated_at', now()))
    WHERE id = $1 AND status = 'running' AND lease_token = $2
    RETURNING id, status, watched
)
SELECT status, (SELECT count(pg_notify('queueflow_job_events', id::text || ':progress'))
                FROM beat WHERE watched) AS announced
FROM beat;

-- name: report_progress
-- Progress an in-process handler reported ($3 percent, $4 message or null), for the holder of the
-- job's lease ($2); the lease stays as it is (the runtime's own lease covers the handler's
-- time-out). A watched job's stream is told (`<id>:progress`).
WITH noted AS (
    UPDATE queueflow.jobs
    SET progress = jsonb_strip_nulls(jsonb_build_object('percent', $3::float8, 'message', $4::text,
                                                        'updated_at', now()))
    WHERE id = $1 AND status = 'running' AND lease_token = $2
    RETURNING id, watched
)
SELECT (SELECT count(*) FROM noted) AS found,
       (SELECT count(pg_notify('queueflow_job_events', id::text || ':progress')) FROM noted WHERE watched)
       AS announced;

-- name: complete_jobs
-- Group commit: many completions in one statement; rows not returned lost their lease or finished.
-- The attempt stays described by the job row (no history row: this is the drain's path); its task
-- and length are returned for /metrics.
-- A queue may remove its completed jobs (migration 37: the tenant's retention for it, else the
-- fleet's default for its name; docs/operations.md, "Retention"). Its job is deleted here
-- (`removed`): its step's outbox row is written here, with its result (the row trigger
-- jobs_step_finished fires on updates only), and its attempts and log lines go by the statement
-- trigger jobs_deleted. Not when something still needs the row. A reader that may come back for
-- the outcome (`watched`: an SSE stream; `lingers`: its creator, through POST /api/v1/jobs, or a
-- poll while it was unfinished) gets a job completed in place and listed in job_removals, which the
-- janitor deletes --removal-grace-secs later. An idempotency key or a unique key promises one job
-- for as long as the job is there (a cron occurrence's key promises nothing past its firing), and
-- the fan-out step of a child reads every child's result when the last one ends: those are kept as
-- on any queue. `kept` completes in place every job `removed` did not delete, a job whose reader
-- came while this statement ran among them (the delete, rechecking the row it waited for, found
-- the reader's flag; this update's own recheck finds the row still running under the token).
-- With no queue removing anything (`removing`, tested once), `removed` reads nothing.
WITH chosen AS MATERIALIZED (
    -- The tenants' own choices and the fleet's defaults (migration 37): a few rows, read once.
    SELECT t.queue_name, t.tenant_key, t.retention = 'remove_completed' AS removes
    FROM queueflow.tenant_queues t WHERE t.retention IS NOT NULL
), fleet AS MATERIALIZED (
    SELECT d.queue_name FROM queueflow.queue_retention_defaults d WHERE d.retention = 'remove_completed'
), removing AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM chosen WHERE removes) OR EXISTS (SELECT 1 FROM fleet) AS active
), u AS NOT MATERIALIZED (
    -- (The arrays through scalar subqueries: the planner cannot see how long they are, so every
    -- call's plan is the same, and PostgreSQL keeps its generic plan (ADR 0022). Planned again at
    -- every call, this statement would cost about a millisecond more a call.)
    SELECT * FROM unnest((SELECT $1::uuid[]), (SELECT $2::uuid[]), (SELECT $3::jsonb[])) AS u(id, token, result)
), removed AS (
    DELETE FROM queueflow.jobs j USING u
    WHERE (SELECT active FROM removing)
      AND j.id = u.id AND j.status = 'running' AND j.lease_token = u.token AND NOT j.watched AND NOT j.lingers
      AND j.step_index IS NULL AND NOT (j.config ? 'unique')
      AND (j.idempotency_key IS NULL OR (starts_with(j.idempotency_key, 'cron:') AND j.metadata ? 'cron_id'))
      AND ((j.queue_name, COALESCE(j.tenant_id, '')) IN (SELECT queue_name, tenant_key FROM chosen WHERE removes)
           OR (j.queue_name IN (SELECT queue_name FROM fleet)
               AND (j.queue_name, COALESCE(j.tenant_id, '')) NOT IN (SELECT queue_name, tenant_key FROM chosen)))
    RETURNING j.id, u.token, j.workflow_id, j.task_name,
              EXTRACT(EPOCH FROM now() - COALESCE(j.attempt_started_at, j.started_at))::float8 AS secs, u.result, j.workflow_step_id, j.step_attempt
), kept AS (
    UPDATE queueflow.jobs j
    SET status = 'completed', result = u.result, completed_at = now(), locked_until = NULL
    FROM u
    WHERE u.id NOT IN (SELECT id FROM removed) AND j.id = u.id AND j.status = 'running' AND j.lease_token = u.token
    RETURNING j.id, u.token, j.workflow_id, j.task_name,
              EXTRACT(EPOCH FROM now() - COALESCE(j.attempt_started_at, j.started_at))::float8 AS secs,
              (SELECT active FROM removing)
              AND j.step_index IS NULL AND NOT (j.config ? 'unique')
              AND (j.idempotency_key IS NULL OR (starts_with(j.idempotency_key, 'cron:') AND j.metadata ? 'cron_id'))
              AND ((j.queue_name, COALESCE(j.tenant_id, '')) IN (SELECT queue_name, tenant_key FROM chosen WHERE removes)
                   OR (j.queue_name IN (SELECT queue_name FROM fleet)
                       AND (j.queue_name, COALESCE(j.tenant_id, '')) NOT IN (SELECT queue_name, tenant_key FROM chosen))) AS deferred
), outbox AS (
    INSERT INTO queueflow.workflow_outbox (workflow_id, kind, step_name, job_id, step_attempt, outcome, result)
    SELECT workflow_id, 'job', workflow_step_id, id, step_attempt, 'completed', result
    FROM removed WHERE workflow_id IS NOT NULL
), deferring AS (
    INSERT INTO queueflow.job_removals (job_id) SELECT id FROM kept WHERE deferred
)
SELECT id, token, workflow_id, task_name, secs FROM removed
UNION ALL
SELECT id, token, workflow_id, task_name, secs FROM kept;

-- name: complete_jobs_traced
-- complete_jobs in a process that exports traces: also what the completion's span names.
WITH chosen AS MATERIALIZED (
    -- The tenants' own choices and the fleet's defaults (migration 37): a few rows, read once.
    SELECT t.queue_name, t.tenant_key, t.retention = 'remove_completed' AS removes
    FROM queueflow.tenant_queues t WHERE t.retention IS NOT NULL
), fleet AS MATERIALIZED (
    SELECT d.queue_name FROM queueflow.queue_retention_defaults d WHERE d.retention = 'remove_completed'
), removing AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM chosen WHERE removes) OR EXISTS (SELECT 1 FROM fleet) AS active
), u AS NOT MATERIALIZED (
    -- (The arrays through scalar subqueries: the planner cannot see how long they are, so every
    -- call's plan is the same, and PostgreSQL keeps its generic plan (ADR 0022). Planned again at
    -- every call, this statement would cost about a millisecond more a call.)
    SELECT * FROM unnest((SELECT $1::uuid[]), (SELECT $2::uuid[]), (SELECT $3::jsonb[])) AS u(id, token, result)
), removed AS (
    DELETE FROM queueflow.jobs j USING u
    WHERE (SELECT active FROM removing)
      AND j.id = u.id AND j.status = 'running' AND j.lease_token = u.token AND NOT j.watched AND NOT j.lingers
      AND j.step_index IS NULL AND NOT (j.config ? 'unique')
      AND (j.idempotency_key IS NULL OR (starts_with(j.idempotency_key, 'cron:') AND j.metadata ? 'cron_id'))
      AND ((j.queue_name, COALESCE(j.tenant_id, '')) IN (SELECT queue_name, tenant_key FROM chosen WHERE removes)
           OR (j.queue_name IN (SELECT queue_name FROM fleet)
               AND (j.queue_name, COALESCE(j.tenant_id, '')) NOT IN (SELECT queue_name, tenant_key FROM chosen)))
    RETURNING j.id, u.token, j.workflow_id, j.task_name,
              EXTRACT(EPOCH FROM now() - COALESCE(j.attempt_started_at, j.started_at))::float8 AS secs,
              j.queue_name, j.tenant_id, j.delivery_count, j.traceparent, j.tracestate, u.result, j.workflow_step_id, j.step_attempt
), kept AS (
    UPDATE queueflow.jobs j
    SET status = 'completed', result = u.result, completed_at = now(), locked_until = NULL
    FROM u
    WHERE u.id NOT IN (SELECT id FROM removed) AND j.id = u.id AND j.status = 'running' AND j.lease_token = u.token
    RETURNING j.id, u.token, j.workflow_id, j.task_name,
              EXTRACT(EPOCH FROM now() - COALESCE(j.attempt_started_at, j.started_at))::float8 AS secs,
              j.queue_name, j.tenant_id, j.delivery_count, j.traceparent, j.tracestate,
              (SELECT active FROM removing)
              AND j.step_index IS NULL AND NOT (j.config ? 'unique')
              AND (j.idempotency_key IS NULL OR (starts_with(j.idempotency_key, 'cron:') AND j.metadata ? 'cron_id'))
              AND ((j.queue_name, COALESCE(j.tenant_id, '')) IN (SELECT queue_name, tenant_key FROM chosen WHERE removes)
                   OR (j.queue_name IN (SELECT queue_name FROM fleet)
                       AND (j.queue_name, COALESCE(j.tenant_id, '')) NOT IN (SELECT queue_name, tenant_key FROM chosen))) AS deferred
), outbox AS (
    INSERT INTO queueflow.workflow_outbox (workflow_id, kind, step_name, job_id, step_attempt, outcome, result)
    SELECT workflow_id, 'job', workflow_step_id, id, step_attempt, 'completed', result
    FROM removed WHERE workflow_id IS NOT NULL
), deferring AS (
    INSERT INTO queueflow.job_removals (job_id) SELECT id FROM kept WHERE deferred
)
SELECT id, token, workflow_id, task_name, secs, queue_name, tenant_id, delivery_count, traceparent, tracestate FROM removed
UNION ALL
SELECT id, token, workflow_id, task_name, secs, queue_name, tenant_id, delivery_count, traceparent, tracestate FROM kept;

-- name: lease_states
-- Why a guarded write matched nothing: the job's current status and lease token.
SELECT id, status, lease_token FROM queueflow.jobs WHERE id = ANY($1::uuid[]);

-- name: fail_job
-- One failure through the retry policy. $3 error, $4 retryable, $5 dead-letter reason override,
-- $6 the retry delay in seconds instead of the job's backoff (a push receiver's Retry-After), or null.
-- A terminal failure and its dead-letter row are written by this one statement, and so is the
-- attempt's history row (outcome retry or failed).
WITH target AS (
    SELECT id, retry_count, config FROM queueflow.jobs
    WHERE id = $1 AND status = 'running' AND lease_token = $2
    FOR UPDATE
), decision AS (
    SELECT id,
           ($4::bool AND retry_count < COALESCE((config->>'max_retries')::int, 3)) AS retry,
           COALESCE($6::int, queueflow.retry_delay_secs(config, retry_count)) AS delay
    FROM target
), updated AS (
    UPDATE queueflow.jobs j
    SET status = CASE WHEN d.retry THEN 'retrying' ELSE 'failed' END,
        error_message = $3,
        retry_count = j.retry_count + CASE WHEN d.retry THEN 1 ELSE 0 END,
        scheduled_at = CASE WHEN d.retry THEN now() + make_interval(secs => d.delay) ELSE j.scheduled_at END,
        next_retry_at = CASE WHEN d.retry THEN now() + make_interval(secs => d.delay) END,
        completed_at = CASE WHEN d.retry THEN NULL ELSE now() END,
        locked_until = NULL
    FROM decision d WHERE j.id = d.id
    RETURNING j.id, j.status, j.queue_name, j.task_name, j.error_message, j.tenant_id, j.workflow_id,
              j.delivery_count, j.worker_id, COALESCE(j.attempt_started_at, j.started_at) AS attempt_started_at,
              j.traceparent, j.tracestate
), dead AS (
    INSERT INTO queueflow.dead_letters (job_id, queue_name, task_name, reason, error_message, tenant_id)
    SELECT id, queue_name, task_name,
           COALESCE($5::text, CASE WHEN $4::bool THEN 'max_attempts_exceeded' ELSE 'non_retryable' END),
           error_message, tenant_id
    FROM updated WHERE status = 'failed'
    RETURNING id
), attempt AS (
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome, error_message)
    SELECT id, delivery_count, worker_id, attempt_started_at,
           CASE WHEN status = 'retrying' THEN 'retry' ELSE 'failed' END, error_message
    FROM updated
), retried AS (
    -- The stats rollup's count of retries (migration 39): a job row does not say when it retried.
    INSERT INTO queueflow.stats_captures (tenant_key, queue_name, minute, retried)
    SELECT COALESCE(tenant_id, ''), queue_name, date_trunc('minute', now()), count(*)
    FROM updated WHERE status = 'retrying' GROUP BY 1, 2
)
-- (queue, tenant, attempt and trace context: what a failure's span names, when traced)
SELECT u.id, u.status, u.workflow_id, u.task_name,
       EXTRACT(EPOCH FROM now() - u.attempt_started_at)::float8 AS secs,
       u.queue_name, u.tenant_id, u.delivery_count, u.traceparent, u.tracestate
FROM updated u;

-- name: reclaim_expired
-- The janitor: expired leases go through the retry policy as a retryable failure, so a crash
-- consumes retry budget. The lease token is cleared, so the old holder's writes get 409. The
-- attempt's history row (outcome lease_expired) is written by this statement.
WITH target AS (
    SELECT id, retry_count, config FROM queueflow.jobs
    WHERE status = 'running' AND locked_until < now()
    ORDER BY locked_until
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), decision AS (
    SELECT id,
           retry_count < COALESCE((config->>'max_retries')::int, 3) AS retry,
           queueflow.retry_delay_secs(config, retry_count) AS delay
    FROM target
), updated AS (
    UPDATE queueflow.jobs j
    SET status = CASE WHEN d.retry THEN 'retrying' ELSE 'failed' END,
        error_message = 'lease expired: the worker crashed or stopped heartbeating',
        retry_count = j.retry_count + CASE WHEN d.retry THEN 1 ELSE 0 END,
        scheduled_at = CASE WHEN d.retry THEN now() + make_interval(secs => d.delay) ELSE j.scheduled_at END,
        next_retry_at = CASE WHEN d.retry THEN now() + make_interval(secs => d.delay) END,
        completed_at = CASE WHEN d.retry THEN NULL ELSE now() END,
        locked_until = NULL,
        lease_token = NULL
    FROM decision d WHERE j.id = d.id
    RETURNING j.id, j.status, j.queue_name, j.task_name, j.error_message, j.tenant_id, j.workflow_id,
              j.delivery_count, j.worker_id, COALESCE(j.attempt_started_at, j.started_at) AS attempt_started_at
), dead AS (
    INSERT INTO queueflow.dead_letters (job_id, queue_name, task_name, reason, error_message, tenant_id)
    SELECT id, queue_name, task_name, 'max_attempts_exceeded', error_message, tenant_id
    FROM updated WHERE status = 'failed'
    RETURNING id
), attempt AS (
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome, error_message)
    SELECT id, delivery_count, worker_id, attempt_started_at, 'lease_expired', error_message FROM updated
), retried AS (
    -- The stats rollup's count of retries (migration 39), as fail_job's.
    INSERT INTO queueflow.stats_captures (tenant_key, queue_name, minute, retried)
    SELECT COALESCE(tenant_id, ''), queue_name, date_trunc('minute', now()), count(*)
    FROM updated WHERE status = 'retrying' GROUP BY 1, 2
)
SELECT u.id, u.status, u.queue_name, u.workflow_id, u.task_name,
       EXTRACT(EPOCH FROM now() - u.attempt_started_at)::float8 AS secs
FROM updated u;

-- name: next_due
-- A job due when it was written never waits (migration 8): only the delayed index is probed.
SELECT min(scheduled_at) AS at, now() AS now FROM queueflow.jobs
WHERE status IN ('pending', 'retrying') AND scheduled_at > created_at AND scheduled_at > now();

-- name: get_dead_letter
SELECT * FROM queueflow.dead_letters WHERE id = $1 AND tenant_id = $2;

-- name: replay_dead_letter
-- Mark the entry replayed and insert a fresh, detached copy of its job in one statement; the
-- caller rolls back when the mark succeeded but the original job is gone (purged).
WITH marked AS (
    UPDATE queueflow.dead_letters SET replayed_at = now(), replay_job_id = $3
    WHERE id = $1 AND tenant_id = $2 AND replayed_at IS NULL
    RETURNING id, job_id
), inserted AS (
    INSERT INTO queueflow.jobs (id, queue_name, task_name, payload, config, priority, metadata, tenant_id)
    SELECT $3, j.queue_name, j.task_name, j.payload, j.config, j.priority,
           j.metadata || jsonb_build_object('replayed_from_job', j.id::text,
                                            'replayed_from_dead_letter', m.id),
           j.tenant_id
    FROM marked m JOIN queueflow.jobs j ON j.id = m.job_id
    RETURNING id
)
SELECT (SELECT count(*) FROM marked) AS marked, (SELECT count(*) FROM inserted) AS inserted;

-- name: dead_letters_to_replay
SELECT id FROM queueflow.dead_letters
WHERE tenant_id = $1 AND replayed_at IS NULL
  AND ($2::text IS NULL OR queue_name = $2)
  AND ($3::text IS NULL OR task_name = $3)
  AND ($4::timestamptz IS NULL OR created_at >= $4)
  AND ($5::timestamptz IS NULL OR created_at < $5)
ORDER BY created_at, id
LIMIT $6;

-- name: tenant_stats
SELECT
    (SELECT count(*) FROM queueflow.jobs WHERE tenant_id = $1) AS jobs_created,
    (SELECT count(*) FROM queueflow.jobs WHERE tenant_id = $1 AND status = 'completed') AS jobs_completed,
    (SELECT count(*) FROM queueflow.jobs WHERE tenant_id = $1 AND status = 'failed') AS jobs_failed,
    (SELECT COALESCE(sum(retry_count), 0) FROM queueflow.jobs WHERE tenant_id = $1) AS jobs_retried,
    (SELECT count(*) FROM queueflow.dead_letters WHERE tenant_id = $1) AS jobs_dead_lettered,
    (SELECT count(*) FROM queueflow.workflows WHERE tenant_id = $1) AS workflows_created,
    (SELECT count(*) FROM queueflow.workflows WHERE tenant_id = $1 AND status = 'completed')
        AS workflows_completed,
    (SELECT count(*) FROM queueflow.workflows
     WHERE tenant_id = $1 AND status IN ('failed', 'partially_failed')) AS workflows_failed;

-- name: queue_gauges
-- Fleet-wide backlog per queue for the Prometheus gauges: waiting jobs through the claim index,
-- running ones through the expired-lease index (migration 9), never the whole table. The busiest
-- $1 queues (claimable, then running, then scheduled jobs) by name, and, when there are more, one
-- row with a NULL name summing the rest (its age is the oldest of theirs).
WITH per_status AS (
    SELECT queue_name,
           count(*) FILTER (WHERE scheduled_at <= now()) AS pending,
           count(*) FILTER (WHERE scheduled_at > now()) AS scheduled,
           0 AS running,
           EXTRACT(EPOCH FROM now() - min(scheduled_at) FILTER (WHERE scheduled_at <= now())) AS oldest_age
    FROM queueflow.jobs WHERE status IN ('pending', 'retrying')
    GROUP BY queue_name
    UNION ALL
    SELECT queue_name, 0, 0, count(*), NULL
    FROM queueflow.jobs WHERE status = 'running' AND locked_until IS NOT NULL
    GROUP BY queue_name
), ranked AS (
    SELECT queue_name, sum(pending)::bigint AS pending, sum(scheduled)::bigint AS scheduled,
           sum(running)::bigint AS running, COALESCE(max(oldest_age), 0) AS oldest_age,
           row_number() OVER (ORDER BY sum(pending) DESC, sum(running) DESC, sum(scheduled) DESC,
                                       queue_name) AS n
    FROM per_status
    GROUP BY queue_name
)
SELECT queue_name, pending, scheduled, running, oldest_age FROM ranked WHERE n <= $1
UNION ALL
SELECT NULL, sum(pending)::bigint, sum(scheduled)::bigint, sum(running)::bigint, max(oldest_age)
FROM ranked WHERE n > $1 HAVING count(*) > 0;

-- name: prune_dead_letters
DELETE FROM queueflow.dead_letters WHERE id IN (
    SELECT id FROM queueflow.dead_letters WHERE created_at < $1 LIMIT $2);

-- name: prune_jobs
-- Terminal jobs older than the cutoff, except those a dead letter still points to; their attempts,
-- log state and log lines go with them (the statement trigger jobs_deleted, migration 37). Answers
-- how many jobs went.
WITH gone AS (
    DELETE FROM queueflow.jobs WHERE id IN (
        SELECT j.id FROM queueflow.jobs j
        WHERE j.status IN ('completed', 'failed', 'cancelled') AND j.completed_at < $1
          AND NOT EXISTS (SELECT 1 FROM queueflow.dead_letters d WHERE d.job_id = j.id)
        LIMIT $2)
    RETURNING id
)
SELECT count(*) FROM gone;

-- name: remove_lingering_jobs
-- Completed jobs of removing queues kept for their watchers (job_removals, migration 37), once
-- they have been completed for $1 seconds: at most $2, oldest first (a row another janitor holds is
-- skipped). Answers how many jobs went (one deleted meanwhile, by retention, counts none).
WITH due AS (
    DELETE FROM queueflow.job_removals r
    WHERE r.ctid = ANY (ARRAY(
        SELECT x.ctid FROM queueflow.job_removals x
        WHERE x.completed_at < now() - make_interval(secs => $1)
        ORDER BY x.completed_at LIMIT $2 FOR UPDATE SKIP LOCKED))
    RETURNING r.job_id
), gone AS (
    DELETE FROM queueflow.jobs j USING due WHERE j.id = due.job_id AND j.status = 'completed'
    RETURNING j.id
)
SELECT count(*) FROM gone;

-- name: prune_workers
-- Registry rows of workers not seen since the cutoff.
DELETE FROM queueflow.workers WHERE (tenant_key, worker_id) IN (
    SELECT tenant_key, worker_id FROM queueflow.workers WHERE last_seen_at < $1 LIMIT $2);

-- name: prune_workflows
DELETE FROM queueflow.workflows WHERE id IN (
    SELECT id FROM queueflow.workflows
    WHERE status IN ('completed', 'failed', 'partially_failed', 'cancelled') AND completed_at < $1
    LIMIT $2);

-- name: prune_abandoned_outbox
-- Outbox rows the advancer set aside after OUTBOX_ATTEMPTS failures ($3): their workflow was failed
-- at the time, and the row stayed for diagnosis (last_error); retention removes the old ones.
DELETE FROM queueflow.workflow_outbox WHERE id IN (
    SELECT id FROM queueflow.workflow_outbox WHERE attempts >= $3 AND created_at < $1 LIMIT $2);

-- name: register_tasks
INSERT INTO queueflow.worker_tasks (process_id, task_name, queue_name, heartbeat_at)
SELECT $1, t, q, now() FROM unnest($2::text[]) AS t, unnest($3::text[]) AS q
ON CONFLICT (process_id, task_name, queue_name) DO UPDATE SET heartbeat_at = now();

-- name: unregister_tasks
DELETE FROM queueflow.worker_tasks WHERE process_id = $1 OR heartbeat_at < now() - interval '1 hour';

-- name: live_tasks
SELECT DISTINCT task_name FROM queueflow.worker_tasks
WHERE heartbeat_at > now() - make_interval(secs => $1) ORDER BY task_name;

-- name: wake_due_queues
-- Wake the waiters of every queue whose delayed or retrying job fell due in ($1, now()].
WITH due AS (
    SELECT DISTINCT queue_name FROM queueflow.jobs
    WHERE status IN ('pending', 'retrying') AND scheduled_at > created_at
      AND scheduled_at > $1 AND scheduled_at <= now()
)
SELECT now() AS now, (SELECT count(pg_notify('queueflow_work', queue_name)) FROM due) AS woken;

-- name: retention_lock
SELECT pg_try_advisory_xact_lock(5850492716117963892);

-- name: watch_job
-- Register a stream and flag the job, so that its status changes are announced (migration 0007).
WITH flagged AS (
    UPDATE queueflow.jobs SET watched = true WHERE id = $1 AND NOT watched
)
INSERT INTO queueflow.job_watchers (job_id, expires_at) VALUES ($1, now() + make_interval(secs => $2))
RETURNING id;

-- name: unwatch_job
DELETE FROM queueflow.job_watchers WHERE id = $1;

-- name: prune_job_watchers
DELETE FROM queueflow.job_watchers WHERE expires_at < now();

-- name: release_unanswered_claim
-- Give back the jobs of a claim of queue $1 whose answer never reached the claimer ($2 its key):
-- claimable again at once, no retry consumed. Nothing when that claim did not commit. Each attempt
-- so ended is in the history as released.
WITH released AS (
    UPDATE queueflow.jobs
    SET status = CASE WHEN retry_count > 0 THEN 'retrying' ELSE 'pending' END,
        locked_until = NULL, lease_token = NULL, scheduled_at = now()
    WHERE queue_name = $1 AND status = 'running' AND locked_until IS NOT NULL AND claim_key = $2::uuid
    RETURNING id, delivery_count, worker_id, COALESCE(attempt_started_at, started_at) AS attempt_started_at
), attempt AS (
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome)
    SELECT id, delivery_count, worker_id, attempt_started_at, 'released' FROM released
)
SELECT id FROM released;

-- name: release_jobs
-- Give jobs back unfinished (graceful shutdown, a lease nobody will hear of): each job of $1 still
-- running under its lease token in $2 is claimable again at once, no retry consumed. Each attempt
-- so ended is in the history as released.
WITH released AS (
    UPDATE queueflow.jobs j
    SET status = CASE WHEN j.retry_count > 0 THEN 'retrying' ELSE 'pending' END,
        locked_until = NULL, lease_token = NULL, scheduled_at = now()
    FROM unnest($1::uuid[], $2::uuid[]) AS u(id, token)
    WHERE j.id = u.id AND j.status = 'running' AND j.lease_token = u.token
    RETURNING j.id, j.delivery_count, j.worker_id, COALESCE(j.attempt_started_at, j.started_at) AS attempt_started_at
), attempt AS (
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome)
    SELECT id, delivery_count, worker_id, attempt_started_at, 'released' FROM released
)
SELECT count(*) FROM released;

-- name: append_job_logs
-- Log lines from the holder of the job's latest lease ($2; lines sent after that attempt ended, a
-- last batch flushed after complete, are kept too): $3 a JSON array of {ts, level, message}, $4 the
-- job's cap in bytes of message. The state row is upserted first (its lock orders two appends to one
-- job); the lines kept are the call's first ones that fit under the cap, and once a line has not
-- fitted every later one is dropped and counted. A watched job's stream is told (`<id>:log`).
WITH job AS (
    -- (Locked, as a foreign key's check would: a job being deleted, by its completion on a queue
    -- that removes completed jobs or by retention, is waited for and then found gone, so no line
    -- can outlive it. Migration 37.)
    SELECT id, delivery_count, watched FROM queueflow.jobs WHERE id = $1 AND lease_token = $2 FOR KEY SHARE
), given AS (
    SELECT u.n, u.ts, u.level, u.message, sum(octet_length(u.message)) OVER (ORDER BY u.n) AS upto
    FROM ROWS FROM (json_to_recordset($3::json) AS (ts timestamptz, level text, message text))
         WITH ORDINALITY AS u(ts, level, message, n)
), state AS (
    INSERT INTO queueflow.job_log_state AS s (job_id, last_seq, bytes, dropped)
    SELECT job.id, (SELECT count(*) FROM given WHERE upto <= $4),
           COALESCE((SELECT max(upto) FROM given WHERE upto <= $4), 0),
           (SELECT count(*) FROM given WHERE upto > $4)
    FROM job
    ON CONFLICT (job_id) DO UPDATE
    SET prev_seq = s.last_seq, prev_bytes = s.bytes, prev_dropped = s.dropped,
        last_seq = s.last_seq + (SELECT count(*) FROM given WHERE s.dropped = 0 AND upto <= $4 - s.bytes),
        bytes = s.bytes + COALESCE((SELECT max(upto) FROM given WHERE s.dropped = 0 AND upto <= $4 - s.bytes), 0),
        dropped = s.dropped + (SELECT count(*) FROM given WHERE NOT (s.dropped = 0 AND upto <= $4 - s.bytes))
    RETURNING s.prev_seq, s.prev_dropped, s.last_seq, s.dropped
), kept AS (
    INSERT INTO queueflow.job_logs (job_id, seq, attempt, ts, level, message)
    SELECT job.id, st.prev_seq + g.n, job.delivery_count, COALESCE(g.ts, now()), g.level, g.message
    FROM job CROSS JOIN state st JOIN given g ON g.n <= st.last_seq - st.prev_seq
    RETURNING seq
)
SELECT (SELECT count(*) FROM job) AS found,
       (SELECT count(*) FROM kept) AS stored,
       COALESCE((SELECT dropped - prev_dropped FROM state), 0) AS dropped,
       COALESCE((SELECT last_seq FROM state), 0) AS last_seq,
       (SELECT count(pg_notify('queueflow_job_events', id::text || ':log'))
        FROM job WHERE watched AND EXISTS (SELECT 1 FROM kept)) AS announced;

-- name: job_logs
-- A page of one job's lines after seq $2, oldest first, at most $3.
SELECT seq, attempt, ts, level, message FROM queueflow.job_logs
WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3;

-- name: job_log_totals
SELECT last_seq, bytes, dropped FROM queueflow.job_log_state WHERE job_id = $1;

-- name: job_attempts
-- The attempts that ended without completing (job_attempts), then the job row's own attempt when
-- it is running or completed (only those two leave an attempt on the row alone).
SELECT a.attempt, a.worker_id, a.started_at, a.ended_at, a.outcome, a.error_message
FROM queueflow.job_attempts a WHERE a.job_id = $1
UNION ALL
SELECT j.delivery_count, j.worker_id, COALESCE(j.attempt_started_at, j.started_at),
       CASE WHEN j.status = 'completed' THEN j.completed_at END, j.status, NULL
FROM queueflow.jobs j WHERE j.id = $1 AND j.status IN ('running', 'completed') AND j.delivery_count > 0
ORDER BY 1;
