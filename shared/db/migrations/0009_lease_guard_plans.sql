-- QueueFlow schema, version 9: a lease-guarded write always finds its job through the primary key.
--
-- Completions, heartbeats and failures look a job up by id with `status = 'running'`. That
-- condition implied the predicates of two partial indexes (the expired-lease index, WHERE status =
-- 'running', and the active-jobs index, WHERE status IN ('pending', 'retrying', 'running')), so
-- when the planner's statistics were taken while few jobs ran (an ANALYZE at a quiet moment, or
-- after a backlog was written and before it was claimed), it judged a walk over every running
-- job cheaper than the primary key, and each completion then read every running job: with 5,000
-- jobs held elsewhere, an in-process drain fell from thousands of jobs a second to about 900.
--
-- * The expired-lease index now also requires `locked_until IS NOT NULL` (a running job always
--   has a lease; the janitor's `locked_until < now()` implies it, and nothing else says it).
-- * The active-jobs index is gone: the queue figures read waiting jobs through the claim index
--   and running ones through the expired-lease index. It also cost every job two index entries
--   (at insert and at claim).
DROP INDEX queueflow.jobs_tenant_active_idx;
DROP INDEX queueflow.jobs_lease_expiry_idx;
CREATE INDEX jobs_lease_expiry_idx ON queueflow.jobs (locked_until)
    WHERE status = 'running' AND locked_until IS NOT NULL;
