-- Migration 40: no JIT compilation inside the functions that turn sequential scans off.
--
-- `SET enable_seqscan = off` (ADR 0022) does not forbid a sequential scan, it prices one at
-- 10^10. Where no index serves a step (`limit_state` filtered on `running > 0`, a table of a few
-- rows), the plan keeps its sequential scan at that price, far above `jit_above_cost` (100,000),
-- and PostgreSQL's default `jit = on` then compiles the statement with LLVM on every call: the
-- janitor's slot repair (migration 34) spent 475 ms of a core on it for a statement that runs in
-- 1 ms, once a housekeeping pass, in the middle of every drain. The same holds for every function
-- below whatever its plan is today: the setting is theirs, so that a plan that changes with the
-- statistics cannot bring the compilation back. (Not a connection setting: PgBouncer refuses
-- startup parameters it does not track, and a function's own settings hold behind any pooler.)

ALTER FUNCTION queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text) SET jit = off;
ALTER FUNCTION queueflow.jobs_deleted() SET jit = off;
ALTER FUNCTION queueflow.limit_room(queueflow.limit_state, integer) SET jit = off;
ALTER FUNCTION queueflow.prune_limit_state(text, text, integer, double precision) SET jit = off;
ALTER FUNCTION queueflow.repair_limit_state(integer) SET jit = off;
ALTER FUNCTION queueflow.take_releases(text[], text[]) SET jit = off;
