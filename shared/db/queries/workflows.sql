-- Named queries for workflows, their steps and the advancer's outbox.

-- name: insert_workflow
INSERT INTO queueflow.workflows
    (id, name, status, context, metadata, tenant_id, steps, timeout_secs, deadline_at,
     parent_workflow_id, parent_step_name, depth, traceparent, tracestate)
VALUES ($1, $2, 'created', $3, $4, $5, $6, $7,
        CASE WHEN $7::int IS NULL THEN NULL ELSE now() + make_interval(secs => $7::int) END, $8, $9, $10,
        $11, $12);

-- name: insert_step
INSERT INTO queueflow.workflow_steps (workflow_id, name, idx, definition, depends_on, on_failure)
VALUES ($1, $2, $3, $4, $5, $6);

-- name: insert_outbox
INSERT INTO queueflow.workflow_outbox (workflow_id, kind, step_name, outcome, child_workflow_id)
VALUES ($1, $2, $3, $4, $5);

-- name: lock_tenant_workflow_quota
-- Creations and retries of one tenant's workflows take turns while its running-workflows quota is
-- on, so that two of them cannot both take its last place.
SELECT pg_advisory_xact_lock(hashtextextended('queueflow.workflow_quota:' || $1, 0));

-- name: count_running_workflows
-- The tenant's unfinished top-level workflows, counted up to $2 (migration 36's index).
SELECT count(*) FROM (
    SELECT 1 FROM queueflow.workflows
    WHERE tenant_id = $1 AND status IN ('created', 'running') AND parent_workflow_id IS NULL
    LIMIT $2
) AS running;

-- name: get_workflow
SELECT * FROM queueflow.workflows WHERE id = $1 AND tenant_id = $2;

-- name: lock_workflow
-- A live workflow's head (the columns of a WorkflowRun: not the definitions, which its step rows
-- carry), locked.
SELECT id, tenant_id, status, context, halted, depth, parent_workflow_id, parent_step_name, name, traceparent, tracestate
FROM queueflow.workflows WHERE id = $1 FOR UPDATE;

-- name: lock_tenant_workflow
SELECT * FROM queueflow.workflows WHERE id = $1 AND tenant_id = $2 FOR UPDATE;

-- name: workflow_steps
SELECT * FROM queueflow.workflow_steps WHERE workflow_id = $1 ORDER BY idx;

-- name: take_outbox
-- One outbox row for this advancer ($2: that row, when given; else the oldest); others skip it. A
-- row whose application keeps failing is left aside after $1 (OUTBOX_ATTEMPTS) attempts (logged,
-- visible in the table; its workflow is failed) instead of blocking the rest.
SELECT * FROM queueflow.workflow_outbox
WHERE attempts < $1 AND ($2::bigint IS NULL OR id = $2)
ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;

-- name: take_outbox_batch
-- Up to $2 outbox rows, oldest first, that no other advancer holds (`take_outbox`, many at once).
SELECT * FROM queueflow.workflow_outbox WHERE attempts < $1 ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED;

-- name: lock_workflows
-- Several workflows locked at once, in id order (two batches that share workflows lock them in the
-- same order, so they queue rather than deadlock).
SELECT id, tenant_id, status, context, halted, depth, parent_workflow_id, parent_step_name, name, traceparent, tracestate
FROM queueflow.workflows WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE;

-- name: workflows_steps
-- The step rows of several workflows, as StepRuns (shared/domain/workflows.py) take them.
SELECT workflow_id, name, definition, depends_on, on_failure, status, skip_kind, attempt, job_id, child_workflow_id, fan_total, fan_completed, fan_failed
FROM queueflow.workflow_steps WHERE workflow_id = ANY($1::text[]) ORDER BY workflow_id, idx;

-- name: outbox_failed
-- Counts the attempt that took the row at `attempts` = $3. Another consumer may have taken the row
-- between the rollback and this update with the same count; the attempt is counted once.
UPDATE queueflow.workflow_outbox SET attempts = attempts + 1, last_error = $2
WHERE id = $1 AND attempts = $3
RETURNING attempts;

-- name: lock_workflow_head
-- The columns a terminal write needs, and nothing that has to be decoded (context, steps).
SELECT id, tenant_id, status, halted, depth, parent_workflow_id, parent_step_name
FROM queueflow.workflows WHERE id = $1 FOR UPDATE;

-- name: delete_outbox
DELETE FROM queueflow.workflow_outbox WHERE id = $1;

-- name: delete_outbox_rows
DELETE FROM queueflow.workflow_outbox WHERE id = ANY($1::bigint[]);

-- name: set_workflow_running
UPDATE queueflow.workflows SET status = 'running', started_at = COALESCE(started_at, now())
WHERE id = $1 AND status = 'created';

-- name: complete_step
-- The step's result joins the context in the same statement that marks the step completed: no
-- reader can ever see the step completed without its result.
WITH merged AS (
    UPDATE queueflow.workflows SET context = context || jsonb_build_object($2::text, $3::jsonb)
    WHERE id = $1
    RETURNING context
), finished AS (
    UPDATE queueflow.workflow_steps
    SET status = 'completed', skip_kind = NULL, error = NULL, completed_at = now(),
        started_at = COALESCE(started_at, now())
    WHERE workflow_id = $1 AND name = $2
)
SELECT context FROM merged;

-- name: settle_workflow
UPDATE queueflow.workflows
SET status = $2, completed_at = now(), error_message = COALESCE($3, error_message)
WHERE id = $1 AND status IN ('created', 'running')
RETURNING id;

-- name: mark_halted
UPDATE queueflow.workflows SET halted = true, error_message = COALESCE(error_message, $2) WHERE id = $1;

-- name: step_scheduled
UPDATE queueflow.workflow_steps
SET status = 'running', attempt = $3, job_id = $4, child_workflow_id = $5, started_at = now(),
    fan_total = $6, fan_completed = 0, fan_failed = 0, error = NULL
WHERE workflow_id = $1 AND name = $2;

-- name: step_finished
UPDATE queueflow.workflow_steps
SET status = $3, skip_kind = $4, error = $5, completed_at = now(),
    started_at = COALESCE(started_at, now())
WHERE workflow_id = $1 AND name = $2;

-- name: step_fan_progress
UPDATE queueflow.workflow_steps SET fan_completed = $3, fan_failed = $4
WHERE workflow_id = $1 AND name = $2;

-- name: fan_out_results
SELECT step_index, status, result, error_message FROM queueflow.jobs
WHERE workflow_id = $1 AND workflow_step_id = $2 AND step_attempt = $3
ORDER BY step_index;

-- name: job_outcome
SELECT status, result, error_message FROM queueflow.jobs WHERE id = $1;

-- name: cancel_steps
-- Every unfinished step of a workflow: cancelled, with the reason.
UPDATE queueflow.workflow_steps SET status = 'cancelled', error = $2, completed_at = now()
WHERE workflow_id = $1 AND status IN ('pending', 'running')
RETURNING name, child_workflow_id;

-- name: cancel_workflow_jobs
-- A running job's attempt ends here: its history row (outcome cancelled) is written by this statement.
WITH target AS (
    SELECT id, status FROM queueflow.jobs
    WHERE workflow_id = $1 AND status IN ('pending', 'retrying', 'running')
    FOR UPDATE
), cancelled AS (
    UPDATE queueflow.jobs j SET status = 'cancelled', completed_at = now(), locked_until = NULL
    FROM target t WHERE j.id = t.id
    RETURNING j.id, t.status AS was, j.delivery_count, j.worker_id,
              COALESCE(j.attempt_started_at, j.started_at) AS attempt_started_at
), attempt AS (
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome)
    SELECT id, delivery_count, worker_id, attempt_started_at, 'cancelled' FROM cancelled WHERE was = 'running'
)
SELECT id FROM cancelled;

-- name: cancel_descendants
-- Every live workflow below $1 (sub-workflows of sub-workflows ...), their steps and their jobs.
WITH RECURSIVE tree AS (
    SELECT id FROM queueflow.workflows WHERE parent_workflow_id = $1
    UNION ALL
    SELECT w.id FROM queueflow.workflows w JOIN tree t ON w.parent_workflow_id = t.id
), wfs AS (
    UPDATE queueflow.workflows SET status = 'cancelled', completed_at = now(),
                                   error_message = COALESCE(error_message, $2)
    WHERE id IN (SELECT id FROM tree) AND status IN ('created', 'running')
    RETURNING id
), steps AS (
    UPDATE queueflow.workflow_steps SET status = 'cancelled', error = $2, completed_at = now()
    WHERE workflow_id IN (SELECT id FROM tree) AND status IN ('pending', 'running')
    RETURNING workflow_id
), job_targets AS (
    SELECT id, status FROM queueflow.jobs
    WHERE workflow_id IN (SELECT id FROM tree) AND status IN ('pending', 'retrying', 'running')
    FOR UPDATE
), jobs AS (
    UPDATE queueflow.jobs j SET status = 'cancelled', completed_at = now(), locked_until = NULL
    FROM job_targets t WHERE j.id = t.id
    RETURNING j.id, t.status AS was, j.delivery_count, j.worker_id,
              COALESCE(j.attempt_started_at, j.started_at) AS attempt_started_at
), attempts AS (
    -- a running job's attempt ends here: its history row (outcome cancelled)
    INSERT INTO queueflow.job_attempts (job_id, attempt, worker_id, started_at, outcome)
    SELECT id, delivery_count, worker_id, attempt_started_at, 'cancelled' FROM jobs WHERE was = 'running'
)
SELECT (SELECT count(*) FROM wfs) AS workflows, (SELECT count(*) FROM jobs) AS jobs;

-- name: reset_steps_for_retry
UPDATE queueflow.workflow_steps
SET status = 'pending', skip_kind = NULL, job_id = NULL, child_workflow_id = NULL, error = NULL,
    started_at = NULL, completed_at = NULL, fan_total = NULL, fan_completed = 0, fan_failed = 0,
    wake_at = NULL, event_key = NULL
WHERE workflow_id = $1 AND name = ANY($2::text[]);

-- name: restart_workflow
UPDATE queueflow.workflows
SET status = 'running', error_message = NULL, completed_at = NULL, halted = false,
    retry_count = retry_count + 1, context = context - $2::text[],
    deadline_at = CASE WHEN timeout_secs IS NULL THEN NULL ELSE now() + make_interval(secs => timeout_secs) END
WHERE id = $1;

-- name: expired_workflows
SELECT id, timeout_secs FROM queueflow.workflows
WHERE status IN ('created', 'running') AND deadline_at < now()
ORDER BY deadline_at
LIMIT $1
FOR UPDATE SKIP LOCKED;

-- name: no_jit
-- For the rest of the transaction: no JIT compilation (see heal_stalled). Not a connection setting,
-- so that it holds behind PgBouncer's transaction pooling too.
SET LOCAL jit = off;

-- name: stalled_workflows
-- Belt and braces: live workflows with nothing that could move them (no outbox row, no live job,
-- no live child, no sleep or wait armed). The advancer re-evaluates them. One pass looks at the
-- next $2 live workflows after the cursor ($4, $5: created_at and id; NULL from the start), in
-- creation order through workflows_active_idx, so a pass costs the same with a million sleeping
-- workflows as with none; returns how many it healed, how many it looked at, and where it ended.
WITH scanned AS (
    SELECT w.id, w.created_at FROM queueflow.workflows w
    WHERE w.status IN ('created', 'running') AND w.created_at < now() - make_interval(secs => $1)
      AND ($4::timestamptz IS NULL OR (w.created_at, w.id) > ($4::timestamptz, $5::text))
    ORDER BY w.created_at, w.id
    LIMIT $2
), healed AS (
    -- Each test a scalar subquery: probed per scanned row through an index, never planned as a
    -- join that reads the whole of workflow_steps or jobs.
    INSERT INTO queueflow.workflow_outbox (workflow_id, kind)
    SELECT w.id, 'heal' FROM scanned w
    WHERE NOT (SELECT EXISTS (SELECT 1 FROM queueflow.workflow_outbox o
                              WHERE o.workflow_id = w.id AND o.attempts < $3))
      AND NOT (SELECT EXISTS (SELECT 1 FROM queueflow.jobs j
                              WHERE j.workflow_id = w.id AND j.status IN ('pending', 'retrying', 'running')))
      AND NOT (SELECT EXISTS (SELECT 1 FROM queueflow.workflows c
                              WHERE c.parent_workflow_id = w.id AND c.status IN ('created', 'running')))
      -- a sleeping step, or one waiting for an event (migration 15), will move it
      AND NOT (SELECT EXISTS (SELECT 1 FROM queueflow.workflow_steps s
                              WHERE s.workflow_id = w.id AND s.status = 'running'
                                AND (s.wake_at IS NOT NULL OR s.event_key IS NOT NULL)))
    RETURNING workflow_id
), last AS (
    SELECT created_at, id FROM scanned ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM healed) AS healed, (SELECT count(*) FROM scanned) AS scanned,
       (SELECT created_at FROM last) AS last_at, (SELECT id FROM last) AS last_id;

-- name: flag_workflow_watched
-- A stream watches the workflow: flag it and then its steps, so that their changes are announced
-- (migration 0019). Run in one transaction, the workflow first and then its steps in name order,
-- the order in which the advancer locks them: one statement flagging both took their locks in no
-- set order and could deadlock with an advancer (a 500 to the stream's caller).
UPDATE queueflow.workflows SET watched = true WHERE id = $1 AND NOT watched;

-- name: flag_workflow_steps_watched
UPDATE queueflow.workflow_steps s SET watched = true
FROM (SELECT name FROM queueflow.workflow_steps WHERE workflow_id = $1 AND NOT watched ORDER BY name FOR UPDATE) AS o
WHERE s.workflow_id = $1 AND s.name = o.name AND NOT s.watched;

-- name: watch_workflow
-- Register a stream of the workflow (after its flags): the watcher's id.
INSERT INTO queueflow.workflow_watchers (workflow_id, expires_at) VALUES ($1, now() + make_interval(secs => $2))
RETURNING id;

-- name: unwatch_workflow
DELETE FROM queueflow.workflow_watchers WHERE id = $1;

-- name: prune_workflow_watchers
DELETE FROM queueflow.workflow_watchers WHERE expires_at < now();

-- name: arm_step
-- A sleep or a wait starts: the step is running with no job. Its wake-up (the sleep's end or the
-- wait's time-out) is $4 when given, else $6 seconds from now (NULL both: a wait without a
-- time-out); $5 the event key it waits for (NULL: a sleep). The
-- workflow processes' timer loops are told, since this wake-up may come before the one they sleep
-- towards. Returns the wake-up and the database's clock.
WITH armed AS (
    UPDATE queueflow.workflow_steps
    SET status = 'running', attempt = $3, job_id = NULL, child_workflow_id = NULL, started_at = now(),
        fan_total = NULL, fan_completed = 0, fan_failed = 0, error = NULL, event_key = $5,
        wake_at = COALESCE($4::timestamptz, now() + make_interval(secs => $6::int))
    WHERE workflow_id = $1 AND name = $2
    RETURNING wake_at
), told AS (
    SELECT pg_notify('queueflow_timers', '') FROM armed WHERE wake_at IS NOT NULL
)
SELECT (SELECT wake_at FROM armed) AS wake_at, now() AS now, (SELECT count(*) FROM told) AS told;

-- name: fire_due_timers
-- Due wake-ups become `timer` outbox rows, at most $1, each taken by exactly one process (SKIP
-- LOCKED) and cleared in the same statement with the step's event key (a timed-out wait no longer
-- takes events); the advancer completes the sleep or times the wait out. The row carries the
-- wake-up in `result`.
WITH due AS (
    SELECT workflow_id, name, attempt, wake_at FROM queueflow.workflow_steps
    WHERE status = 'running' AND wake_at <= now()
    ORDER BY wake_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), cleared AS (
    UPDATE queueflow.workflow_steps s SET wake_at = NULL, event_key = NULL
    FROM due WHERE s.workflow_id = due.workflow_id AND s.name = due.name
)
INSERT INTO queueflow.workflow_outbox (workflow_id, kind, step_name, step_attempt, result)
SELECT workflow_id, 'timer', name, attempt, jsonb_build_object('wake_at', wake_at) FROM due
RETURNING workflow_id;

-- name: take_due_wake_ups
-- Up to $1 due wake-ups whose step and workflow no other transaction holds (SKIP LOCKED on both:
-- this takes the step before the workflow, so it must not wait for either), locked, not written:
-- the caller applies them at once, as `timer` rows, under these locks, and the step's own write
-- (completed, failed) is the only write of its row; `clear_taken_wake_ups` then clears what applying
-- left in place. Each row carries its workflow's head (`lock_workflows`' columns, `w_` before the
-- ones a step row also has), so the workflows need no second read. Due wake-ups left out (their
-- workflow was busy) go through the outbox.
SELECT s.workflow_id, s.name, s.attempt, s.wake_at,
       w.tenant_id, w.status AS w_status, w.context, w.halted, w.depth, w.parent_workflow_id,
       w.parent_step_name, w.name AS w_name, w.traceparent, w.tracestate
FROM queueflow.workflow_steps s JOIN queueflow.workflows w ON w.id = s.workflow_id
WHERE s.status = 'running' AND s.wake_at <= now()
ORDER BY s.wake_at
LIMIT $1
FOR UPDATE OF s, w SKIP LOCKED;

-- name: clear_taken_wake_ups
-- The wake-ups a lane took ($1 workflows, $2 steps, $3 their wake_at) that applying them left in
-- place (a workflow that let its timer pass: it is not taken again), cleared as `fire_due_timers`
-- clears them. A step that applying completed or failed is no longer running and is left alone;
-- one applying armed again has another wake_at and keeps it.
UPDATE queueflow.workflow_steps s SET wake_at = NULL, event_key = NULL
FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS t(w, n, at)
WHERE s.workflow_id = t.w AND s.name = t.n AND s.status = 'running' AND s.wake_at = t.at;

-- name: next_wake_up
-- When the next wake-up is due (one probe of workflow_steps_wake_idx), and the database's clock.
SELECT (SELECT wake_at FROM queueflow.workflow_steps WHERE status = 'running' AND wake_at IS NOT NULL
        ORDER BY wake_at LIMIT 1) AS at, now() AS now;

-- name: write_back
-- An advancer batch's held-back writes (PendingWrites), one element of the JSON array $1 per
-- workflow: {w: id, p: step results to merge into the context keyed by step name, s: those steps
-- (marked completed), st: the status it settles in, e: its error} (p, s, st and e each optional).
-- Each workflow row is written once, with its context and its settlement together; the settlement
-- is guarded as `settle_workflow`'s is. Returns the workflows that settled.
WITH d AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb) AS d(w text, p jsonb, s text[], st text, e text)
), completed AS (
    UPDATE queueflow.workflow_steps s
    SET status = 'completed', skip_kind = NULL, error = NULL, completed_at = now(),
        started_at = COALESCE(s.started_at, now())
    FROM d WHERE s.workflow_id = d.w AND s.name = ANY(d.s)
)
UPDATE queueflow.workflows w
SET context = CASE WHEN d.p IS NULL THEN w.context ELSE w.context || d.p END,
    status = CASE WHEN settles THEN d.st ELSE w.status END,
    completed_at = CASE WHEN settles THEN now() ELSE w.completed_at END,
    error_message = CASE WHEN settles THEN COALESCE(d.e, w.error_message) ELSE w.error_message END
FROM d, queueflow.workflows old, LATERAL (
    SELECT d.st IS NOT NULL AND old.status IN ('created', 'running') AS settles
) g
WHERE w.id = d.w AND old.id = d.w
RETURNING w.id, g.settles, w.status, w.parent_workflow_id, w.parent_step_name;

-- name: insert_child_outbox
-- A `child` outbox row for each parent whose sub-workflow ended: $1 parents, $2 their steps, $3
-- the outcomes, $4 the sub-workflows.
INSERT INTO queueflow.workflow_outbox (workflow_id, kind, step_name, outcome, child_workflow_id)
SELECT p, 'child', s, o, c FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(p, s, o, c);
