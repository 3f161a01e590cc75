-- QueueFlow schema, version 33: the janitor's pruning of idle limit keys (version 31) reads its page
-- of state rows once, and says what an idle key is in one place.
--
-- Version 31 read each page twice (its size and last key, then its candidates), and wrote the idle
-- test twice (on the page as read, and again on each candidate's row once locked). The test is now
-- `queueflow.limit_key_idle`, and one statement reads the page for its size, its last key and its
-- idle keys. What is pruned is unchanged.
CREATE FUNCTION queueflow.limit_key_idle(s queueflow.limit_state, idle_secs double precision)
RETURNS boolean LANGUAGE sql STABLE AS $fn$
    -- No claim granted one of its jobs for idle_secs, no wake-up due, and its rate window over (no
    -- claim in the last two windows). Whether a job holds a slot is the caller's to check.
    SELECT s.used_at < now() - make_interval(secs => idle_secs) AND s.wake_at IS NULL
       AND (s.rate_start IS NULL OR s.rate_start < now() - make_interval(secs => 2 * s.rate_per_secs))
$fn$;

CREATE OR REPLACE FUNCTION queueflow.prune_limit_state(after_tenant text, after_key text, max_keys integer,
                                                       idle_secs double precision)
RETURNS TABLE (seen integer, pruned integer, last_tenant text, last_key text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $fn$
DECLARE
    idle_tenants text[];
    idle_keys    text[];
    idle         record;
BEGIN
    SELECT count(*)::integer,
           (array_agg((p.st).tenant_key ORDER BY (p.st).tenant_key DESC, (p.st).key DESC))[1],
           (array_agg((p.st).key ORDER BY (p.st).tenant_key DESC, (p.st).key DESC))[1],
           array_agg((p.st).tenant_key ORDER BY (p.st).tenant_key, (p.st).key)
               FILTER (WHERE queueflow.limit_key_idle(p.st, idle_secs)),
           array_agg((p.st).key ORDER BY (p.st).tenant_key, (p.st).key)
               FILTER (WHERE queueflow.limit_key_idle(p.st, idle_secs))
    INTO seen, last_tenant, last_key, idle_tenants, idle_keys
    FROM (SELECT s AS st FROM queueflow.limit_state s
          WHERE (s.tenant_key, s.key) > (after_tenant, after_key)
          ORDER BY s.tenant_key, s.key LIMIT max_keys) AS p;
    IF seen < max_keys THEN  -- the last page: the next starts from the first key
        last_tenant := NULL;
        last_key := NULL;
    END IF;
    pruned := 0;
    IF idle_keys IS NOT NULL THEN
        FOR idle IN
            WITH running AS MATERIALIZED (
                -- the running jobs' keys, through the expired-lease index
                SELECT DISTINCT COALESCE(j.tenant_id, '') AS tenant_key, k.key
                FROM queueflow.jobs j CROSS JOIN LATERAL unnest(j.limit_keys) AS k(key)
                WHERE j.status = 'running' AND j.locked_until IS NOT NULL AND j.limit_keys IS NOT NULL
            )
            SELECT c.tenant_key, c.key FROM unnest(idle_tenants, idle_keys) AS c(tenant_key, key)
            WHERE NOT EXISTS (SELECT 1 FROM running r WHERE r.tenant_key = c.tenant_key AND r.key = c.key)
        LOOP
            -- Locked (never waited for), and judged again on the row as it is now.
            PERFORM 1 FROM queueflow.limit_state s
            WHERE s.tenant_key = idle.tenant_key AND s.key = idle.key
              AND queueflow.limit_key_idle(s, idle_secs)
              AND s.running <= (SELECT count(*) FROM queueflow.limit_releases r
                                WHERE r.tenant_key = s.tenant_key AND r.key = s.key)
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
            DELETE FROM queueflow.limit_releases r WHERE r.tenant_key = idle.tenant_key AND r.key = idle.key;
            DELETE FROM queueflow.limit_state s WHERE s.tenant_key = idle.tenant_key AND s.key = idle.key;
            pruned := pruned + 1;
        END LOOP;
    END IF;
    RETURN NEXT;
END $fn$;
