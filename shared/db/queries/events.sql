-- Named queries for events (POST /api/v1/events) and the steps that wait for them (migration 15).

-- name: lock_event_key
-- One tenant's key, serialised: an event and a step that starts waiting for its key take this lock
-- first, so whichever commits second sees the other (no lost wake-up between signal and wait).
SELECT pg_advisory_xact_lock(hashtextextended($1 || E'\x1f' || $2, 1515));

-- name: insert_event
INSERT INTO queueflow.events (id, tenant_key, key, payload, expires_at)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
RETURNING created_at, expires_at;

-- name: deliver_event
-- Every step of the tenant waiting for the key takes the event: it stops waiting (its key and
-- time-out cleared in this statement, so no other event or time-out can also end it) and an `event`
-- outbox row carries the payload to the advancer, which completes the step with it.
WITH waiting AS (
    UPDATE queueflow.workflow_steps s SET event_key = NULL, wake_at = NULL
    FROM queueflow.workflows w
    WHERE s.event_key = $2 AND s.status = 'running'
      AND w.id = s.workflow_id AND COALESCE(w.tenant_id, '') = $1
    RETURNING s.workflow_id, s.name, s.attempt
), sent AS (
    INSERT INTO queueflow.workflow_outbox (workflow_id, kind, step_name, step_attempt, result)
    SELECT workflow_id, 'event', name, attempt, $3::jsonb FROM waiting
    RETURNING 1
)
UPDATE queueflow.events SET delivered = (SELECT count(*) FROM sent) WHERE id = $4
RETURNING delivered;

-- name: kept_event
-- The newest event of the key still kept: what a step that starts waiting receives at once (events
-- are signals, not a queue: none is used up, and the latest says the most).
SELECT id, payload FROM queueflow.events
WHERE tenant_key = $1 AND key = $2 AND expires_at > now()
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: list_events
-- A tenant's kept events, newest first; $2 a key or NULL for all; at most $3.
SELECT id AS event_id, key, payload, delivered, created_at, expires_at FROM queueflow.events
WHERE tenant_key = $1 AND ($2::text IS NULL OR key = $2) AND expires_at > now()
ORDER BY created_at DESC, id DESC
LIMIT $3;

-- name: prune_expired_events
DELETE FROM queueflow.events
WHERE id IN (SELECT id FROM queueflow.events WHERE expires_at <= now() ORDER BY expires_at LIMIT $1);
