-- QueueFlow schema, version 22: queueflow.limit_room, unchanged in what it answers, becomes a
-- PL/pgSQL function.
--
-- As a SQL function with subqueries it cannot be inlined, so PostgreSQL planned its body afresh in
-- every claim that called it (the claim of a queue whose window of limited jobs found too few with
-- room: a saturated key's backlog at its head): about 0.3 ms of a 1.8 ms claim of 50 jobs. PL/pgSQL
-- keeps the plans of its statements for the session (ADR 0022).
CREATE OR REPLACE FUNCTION queueflow.limit_room(s queueflow.limit_state, big integer) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN LEAST(
        CASE WHEN s.concurrency IS NULL THEN big
             ELSE s.concurrency - s.running + (SELECT count(*)::integer FROM queueflow.limit_releases r
                                               WHERE r.tenant_key = s.tenant_key AND r.key = s.key) END,
        CASE WHEN s.rate_count IS NULL THEN big
             ELSE (SELECT w.room FROM queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start,
                                                            s.rate_prev, s.rate_cur, now()) w) END);
END
$$;
