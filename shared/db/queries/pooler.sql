-- Named queries of the start-up check for a transaction pooler between a process and PostgreSQL
-- (shared/db/pooler.py).

-- name: backend_pid
-- The server process answering: one per session, so a connection whose answer changes, or two
-- open connections that give the same answer, are being handed server connections by a pooler.
SELECT pg_backend_pid();
