-- QueueFlow schema, version 31: the state rows of limit keys left idle are deleted.
--
-- `limit_state` kept a row for every key ever named: a policy per customer ("customer:*") leaves
-- one row per customer there for good. Since version 30 the first claim that meets a job of a key
-- with no row makes it, so a row may go once nothing depends on it:
-- * no claim has granted a job of the key for a while (`used_at`, set when the row is made and by
--   every claim that grants one of its jobs);
-- * none of its jobs holds a slot: its running count is covered by its waiting releases (which go
--   with it), and no running job names the key;
-- * its rate window has run out (no claim in the last two windows) and no wake-up is due.
-- The janitor deletes such rows a page of keys at a time, in key order, locking each with SKIP
-- LOCKED (a claim that holds it is using it). A claim whose snapshot still had the row finds it
-- gone when it locks it, leaves the key's jobs for the next claim and wakes the queue's waiters;
-- that claim makes the row again, with the key's policy.
ALTER TABLE queueflow.limit_state ADD COLUMN used_at timestamptz NOT NULL DEFAULT now();

SELECT queueflow.edit_function(
    'queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)',
    ARRAY[ARRAY[
$old$            throttled = s.throttled + m.refused_n,
$old$,
$new$            throttled = s.throttled + m.refused_n,
            used_at = CASE WHEN m.taken_n > 0 THEN now() ELSE s.used_at END,
$new$]],
    '0031');

-- One page of up to `max_keys` state rows after (after_tenant, after_key) in key order: how many
-- were looked at and deleted, and the last key looked at (the next page's start; NULL at the end).
CREATE FUNCTION queueflow.prune_limit_state(after_tenant text, after_key text, max_keys integer,
                                            idle_secs double precision)
RETURNS TABLE (seen integer, pruned integer, last_tenant text, last_key text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $fn$
DECLARE
    idle record;
BEGIN
    SELECT count(*)::integer,
           (array_agg(p.tenant_key ORDER BY p.tenant_key DESC, p.key DESC))[1],
           (array_agg(p.key ORDER BY p.tenant_key DESC, p.key DESC))[1]
    INTO seen, last_tenant, last_key
    FROM (SELECT s.tenant_key, s.key FROM queueflow.limit_state s
          WHERE (s.tenant_key, s.key) > (after_tenant, after_key)
          ORDER BY s.tenant_key, s.key LIMIT max_keys) AS p;
    IF seen < max_keys THEN  -- the last page: the next starts from the first key
        last_tenant := NULL;
        last_key := NULL;
    END IF;
    pruned := 0;
    FOR idle IN
        WITH page AS (
            SELECT s.* FROM queueflow.limit_state s
            WHERE (s.tenant_key, s.key) > (after_tenant, after_key)
            ORDER BY s.tenant_key, s.key LIMIT max_keys
        ), candidates AS MATERIALIZED (
            SELECT p.tenant_key, p.key FROM page p
            WHERE p.used_at < now() - make_interval(secs => idle_secs) AND p.wake_at IS NULL
              AND (p.rate_start IS NULL OR p.rate_start < now() - make_interval(secs => 2 * p.rate_per_secs))
        ), running AS MATERIALIZED (
            -- (only when a candidate was found: the running jobs, through the expired-lease index)
            SELECT DISTINCT COALESCE(j.tenant_id, '') AS tenant_key, k.key
            FROM queueflow.jobs j CROSS JOIN LATERAL unnest(j.limit_keys) AS k(key)
            WHERE j.status = 'running' AND j.locked_until IS NOT NULL AND j.limit_keys IS NOT NULL
              AND EXISTS (SELECT 1 FROM candidates)
        )
        SELECT c.tenant_key, c.key FROM candidates c
        WHERE NOT EXISTS (SELECT 1 FROM running r WHERE r.tenant_key = c.tenant_key AND r.key = c.key)
        ORDER BY c.tenant_key, c.key
    LOOP
        -- Locked (never waited for), and judged again on the row as it is now.
        PERFORM 1 FROM queueflow.limit_state s
        WHERE s.tenant_key = idle.tenant_key AND s.key = idle.key
          AND s.used_at < now() - make_interval(secs => idle_secs) AND s.wake_at IS NULL
          AND (s.rate_start IS NULL OR s.rate_start < now() - make_interval(secs => 2 * s.rate_per_secs))
          AND s.running <= (SELECT count(*) FROM queueflow.limit_releases r
                            WHERE r.tenant_key = s.tenant_key AND r.key = s.key)
        FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        DELETE FROM queueflow.limit_releases r WHERE r.tenant_key = idle.tenant_key AND r.key = idle.key;
        DELETE FROM queueflow.limit_state s WHERE s.tenant_key = idle.tenant_key AND s.key = idle.key;
        pruned := pruned + 1;
    END LOOP;
    RETURN NEXT;
END $fn$;
