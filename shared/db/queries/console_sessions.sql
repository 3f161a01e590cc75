-- The console's sign-in sessions (migration 0043), keyed by the SHA-256 of the cookie's token.

-- name: insert_console_session
INSERT INTO queueflow.console_sessions
    (id_digest, csrf_token, subject, name, tenant_id, role, access_token, renew_at,
     refresh_token, id_token, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11);

-- name: prune_console_sessions
-- Sessions past their end, a round of at most $1 at a time, oldest end first (the janitor's
-- housekeeping repeats while a round is full; console_sessions_expiry finds them).
DELETE FROM queueflow.console_sessions
WHERE id_digest IN (
    SELECT id_digest FROM queueflow.console_sessions
    WHERE expires_at < now()
    ORDER BY expires_at
    LIMIT $1
);

-- name: find_console_session
SELECT id_digest, csrf_token, subject, name, tenant_id, role, access_token, renew_at,
       refresh_token, id_token, expires_at
FROM queueflow.console_sessions
WHERE id_digest = $1 AND expires_at > now();

-- name: lock_console_session
-- A renewal's first step: the row, locked until the renewal's transaction ends.
SELECT id_digest, csrf_token, subject, name, tenant_id, role, access_token, renew_at,
       refresh_token, id_token, expires_at
FROM queueflow.console_sessions
WHERE id_digest = $1 AND expires_at > now()
FOR UPDATE;

-- name: renew_console_session
UPDATE queueflow.console_sessions
SET access_token = $2, renew_at = $3, refresh_token = $4, id_token = $5, name = $6,
    tenant_id = $7, role = $8
WHERE id_digest = $1;

-- name: delete_console_session
DELETE FROM queueflow.console_sessions WHERE id_digest = $1
RETURNING id_token;
