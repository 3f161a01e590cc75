-- QueueFlow schema, version 30: a limit key's state row is made by the first claim that meets one
-- of its jobs, not by every insert that names it.
--
-- The insert trigger probed the state row of every distinct key an insert named, and made the
-- missing ones: about 2.7 ms of a 1,000-job insert over 1,000 keys that all had rows already
-- (16.2 ms against 13.5 ms without it; docs/limits.md, "How it works"), paid
-- again by every batch for the same keys. It also read the key's policy in the insert's snapshot,
-- so a policy written while the insert ran could miss the new row (the policy write refreshes the
-- rows it sees): the key kept the policy it replaced.
--
-- Now:
-- * the trigger makes no state row;
-- * a limited claim lets a job whose key has no row through its window and its key-by-key visit
--   (one job a key there), and before it locks any state row it makes the missing ones
--   (`queueflow.make_limit_state`), with their policy, under the tenant's policy lock taken shared
--   and never waited for: a policy write holds it while it refreshes the rows, and a claim holds
--   job locks a write must not wait behind. A claim that cannot take it leaves the jobs waiting and
--   wakes the queue (as for a key whose row another claim holds), and the next claim makes them;
-- * such jobs cannot be granted by the statement that made their rows (it does not see them), so
--   `claim_limited` runs its statement a second time, for what is left of the batch, when the
--   first made any: a new key's first jobs are claimed by the claim that meets them. The second
--   pass makes no row (it may already hold a throttled-total row, which a maker could wait behind).
CREATE FUNCTION queueflow.make_limit_state(queue text, tenant_keys text[], keys text[]) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    tenant text;
    made   integer;
BEGIN
    FOR tenant IN SELECT DISTINCT t FROM unnest(tenant_keys) AS u(t) ORDER BY 1 LOOP
        -- (limits.sql, lock_tenant_limits: the same lock, held by policy writes)
        IF NOT pg_try_advisory_xact_lock_shared(hashtextextended('queueflow.limits:' || tenant, 0)) THEN
            RETURN 0;
        END IF;
    END LOOP;
    -- The keys asked for and those of the same tenants' next waiting jobs of the queue that have no
    -- row either: new keys rarely come alone, and each claim that makes rows runs twice. In key
    -- order, so that two claims making the same keys wait for each other in one order. (A new
    -- statement: it sees every policy written before the lock was taken.)
    INSERT INTO queueflow.limit_state (tenant_key, key, concurrency, rate_count, rate_per_secs)
    SELECT m.tenant_key, m.key, p.concurrency, p.rate_count, p.rate_per_secs
    FROM (SELECT u.tenant_key, u.key FROM unnest(tenant_keys, keys) AS u(tenant_key, key)
          UNION
          SELECT n.tenant_key, k.key
          FROM (SELECT COALESCE(j.tenant_id, '') AS tenant_key, j.limit_keys FROM queueflow.jobs j
                WHERE j.queue_name = queue AND COALESCE(j.tenant_id, '') = ANY (tenant_keys)
                  AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL
                ORDER BY j.queue_name, COALESCE(j.tenant_id, ''), j.priority DESC, j.scheduled_at, j.created_at
                LIMIT 1000) AS n
          CROSS JOIN LATERAL unnest(n.limit_keys) AS k(key)) AS m
    LEFT JOIN LATERAL queueflow.limit_policy_of(m.tenant_key, m.key) p ON true
    WHERE (SELECT 1 FROM queueflow.limit_state s WHERE s.tenant_key = m.tenant_key AND s.key = m.key LIMIT 1) IS NULL
    ORDER BY m.tenant_key, m.key
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS made = ROW_COUNT;
    -- A table the statistics take for (nearly) empty is planned as one: the claim's plans, made at
    -- a session's first claim and kept, would read every state row to find a few (on a young
    -- database, whose first keys are being made). While the statistics count fewer than 1,000
    -- rows, each claim that makes some refreshes them, which makes every session plan its claims
    -- again; never waiting (SKIP_LOCKED: autovacuum or another claim is at it), and never
    -- blocking a claim (the lock it takes conflicts only with vacuums and analyses).
    IF made > 0 AND (SELECT c.reltuples FROM pg_class c WHERE c.oid = 'queueflow.limit_state'::regclass) < 100 THEN
        ANALYZE (SKIP_LOCKED) queueflow.limit_state;
    END IF;
    -- Read by claim_limited after its statement: the rows exist now (made here, or by a claim that
    -- committed them meanwhile), so a second pass can grant their jobs.
    PERFORM set_config('queueflow.limit_rows_made', 'on', true);
    RETURN made;
END $fn$;

SELECT queueflow.edit_function(
    'queueflow.notify_inserted()',
    ARRAY[ARRAY[
$old$    -- The state rows of keys not seen before, created in key order (two concurrent inserts of the
    -- same new keys wait for each other in one order, never in a cycle). Each named key costs one
    -- probe (a scalar subquery, which the planner cannot turn into a join over the table); only a
    -- new key's policy is looked up.
    WITH named AS (
        SELECT DISTINCT COALESCE(i.tenant_id, '') AS tenant_key, k AS key
        FROM inserted i CROSS JOIN LATERAL unnest(i.limit_keys) AS k
        WHERE i.limit_keys IS NOT NULL
    ), missing AS MATERIALIZED (
        SELECT n.tenant_key, n.key FROM named n
        WHERE (SELECT 1 FROM queueflow.limit_state s
               WHERE s.tenant_key = n.tenant_key AND s.key = n.key LIMIT 1) IS NULL
    )
    INSERT INTO queueflow.limit_state (tenant_key, key, concurrency, rate_count, rate_per_secs)
    SELECT m.tenant_key, m.key, p.concurrency, p.rate_count, p.rate_per_secs
    FROM missing m LEFT JOIN LATERAL queueflow.limit_policy_of(m.tenant_key, m.key) p ON true
    ORDER BY m.tenant_key, m.key
    ON CONFLICT DO NOTHING;
$old$,
$new$    -- (A limit key's state row is made by the first claim that meets one of its jobs: version 30.)
$new$]],
    '0030');

SELECT queueflow.edit_function(
    'queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)',
    ARRAY[
        -- one statement ...
        ARRAY[
$old$#variable_conflict use_column
BEGIN
    RETURN QUERY
$old$,
$new$#variable_conflict use_column
DECLARE
    -- (read by the statement: only the first pass makes state rows, see `made` below)
    may_make   boolean := true;
    got        integer;
BEGIN
  LOOP
    RETURN QUERY
$new$],
        -- the window's rooms: each walked key's row probed (in a plan made while the table was
        -- empty, as on a young database, the join read every key's row)
        ARRAY[
$old$        FROM (SELECT tenant_key, key, max(rank) AS walked FROM walk_pairs GROUP BY tenant_key, key) AS k
        JOIN queueflow.limit_state s ON s.tenant_key = k.tenant_key AND s.key = k.key
    ), walk_pick AS MATERIALIZED (
$old$,
$new$        FROM (SELECT tenant_key, key, max(rank) AS walked FROM walk_pairs GROUP BY tenant_key, key) AS k
        -- (One probe per key: OFFSET 0 keeps it a subquery, never a join over every key's row.)
        CROSS JOIN LATERAL (SELECT x.* FROM queueflow.limit_state x
                            WHERE x.tenant_key = k.tenant_key AND x.key = k.key OFFSET 0) AS s
    ), walk_pick AS MATERIALIZED (
$new$],
        -- the rows of keys with no room, locked (the same), and counted by the one update of state rows
        ARRAY[
$old$        SELECT t.tenant_key, t.key FROM queueflow.limit_state t
        WHERE (t.tenant_key, t.key) IN (SELECT tenant_key, key FROM walk_room WHERE room <= 0)
        FOR UPDATE OF t SKIP LOCKED
    ), held AS (
        -- For /metrics: the walked jobs of keys with no room now, counted on those rows. (A key with
        -- no room gives this claim no job, so the grant below never updates its row: no row is
        -- updated twice.)
        UPDATE queueflow.limit_state s SET throttled = s.throttled + h.n
        FROM (SELECT r.tenant_key, r.key, count(*) AS n
              FROM walk_room r JOIN walk_pairs p USING (tenant_key, key)
              JOIN unheld u USING (tenant_key, key)
              WHERE r.room <= 0 GROUP BY r.tenant_key, r.key) AS h
        WHERE s.tenant_key = h.tenant_key AND s.key = h.key
          AND NOT EXISTS (SELECT 1 FROM pairs x WHERE x.tenant_key = h.tenant_key AND x.key = h.key)
        RETURNING h.n
$old$,
$new$        -- (With their walked jobs: counted as throttled on their rows, by `bumped`.)
        SELECT t.tenant_key, t.key, n.n
        FROM (SELECT r.tenant_key, r.key, count(*) AS n
              FROM walk_room r JOIN walk_pairs p USING (tenant_key, key)
              WHERE r.room <= 0 GROUP BY r.tenant_key, r.key) AS n
        CROSS JOIN LATERAL (SELECT x.tenant_key, x.key FROM queueflow.limit_state x
                            WHERE x.tenant_key = n.tenant_key AND x.key = n.key
                            FOR UPDATE SKIP LOCKED) AS t
$new$],
        -- the window refused a job of a key with no state row
        ARRAY[
$old$        -- The walked jobs whose every key has room for them (in the key's order), read without locks.
        SELECT w.id, w.tenant_key, w.priority, w.scheduled_at, w.created_at FROM walk w
        WHERE w.id NOT IN (
            SELECT p.id FROM walk_pairs p LEFT JOIN walk_room r USING (tenant_key, key)
            WHERE r.key IS NULL OR p.rank > r.room)
$old$,
$new$        -- The walked jobs whose every key has room for them (in the key's order), read without locks.
        -- A key with no state row yet is let through: its row is made below (`made`).
        SELECT w.id, w.tenant_key, w.priority, w.scheduled_at, w.created_at FROM walk w
        WHERE w.id NOT IN (
            SELECT p.id FROM walk_pairs p JOIN walk_room r USING (tenant_key, key)
            WHERE p.rank > r.room)
$new$],
        -- the key-by-key visit skipped a waiting key with no state row
        ARRAY[
$old$        SELECT w.tenant_key, w.key,
               LEAST(share.n, GREATEST(2, CEIL(2.0 * $2 / GREATEST(1, count(*) OVER ())))::int,
                     queueflow.limit_room(s, share.n)) AS room
        FROM waiting_keys w CROSS JOIN share
        JOIN queueflow.limit_state s ON s.tenant_key = w.tenant_key AND s.key = w.key
$old$,
$new$        -- A key with no state row yet: one job, whose claim makes the row (`made`).
        SELECT w.tenant_key, w.key,
               CASE WHEN s.state IS NULL THEN 1
                    ELSE LEAST(share.n, GREATEST(2, CEIL(2.0 * $2 / GREATEST(1, count(*) OVER ())))::int,
                               queueflow.limit_room(s.state, share.n)) END AS room
        FROM waiting_keys w CROSS JOIN share
        LEFT JOIN LATERAL (SELECT x AS state FROM queueflow.limit_state x
                           WHERE x.tenant_key = w.tenant_key AND x.key = w.key OFFSET 0) AS s ON true
        WHERE w.key IS NOT NULL
$new$],
        -- the state rows locked ...
        ARRAY[
$old$    ), locked AS MATERIALIZED (
        SELECT s.* FROM (SELECT DISTINCT tenant_key, key FROM pairs) AS p
$old$,
$new$    ), missing AS (
        -- The chosen jobs' keys with no state row: not in the window's rows (which has every walked
        -- key's), then probed (a scalar subquery: never a join over every key's row).
        SELECT DISTINCT p.tenant_key, p.key FROM pairs p LEFT JOIN walk_room r USING (tenant_key, key)
        WHERE CASE WHEN r.key IS NULL
                   THEN (SELECT 1 FROM queueflow.limit_state s
                         WHERE s.tenant_key = p.tenant_key AND s.key = p.key LIMIT 1) IS NULL END
    ), made AS MATERIALIZED (
        -- ... made, in the first pass only, before any state row is locked (`locked` waits for it);
        -- their jobs are refused here (this statement cannot see the new rows) and granted by the
        -- second pass.
        SELECT CASE WHEN may_make AND EXISTS (SELECT 1 FROM missing)
                    THEN queueflow.make_limit_state($1, ARRAY(SELECT m.tenant_key FROM missing m ORDER BY m.tenant_key, m.key),
                                                        ARRAY(SELECT m.key FROM missing m ORDER BY m.tenant_key, m.key))
                    ELSE 0 END AS n
    ), locked AS MATERIALIZED (
        SELECT s.* FROM (SELECT DISTINCT tenant_key, key FROM pairs WHERE (SELECT n FROM made) IS NOT NULL) AS p
$new$],
        -- the one update of the state rows: the granted keys' and, for /metrics, the keys with no room
        -- (it was a second update, whose plan read every key's row when made while the table was
        -- empty; this one probes each key's row, as the grant's did)
        ARRAY[
$old$            throttled = s.throttled + k.refused_n,
$old$,
$new$            throttled = s.throttled + m.refused_n,
$new$],
        ARRAY[
$old$            wake_at = CASE WHEN m.rate_count IS NOT NULL AND m.free - k.taken_n < 1
                           THEN (SELECT rw.next_at FROM queueflow.rate_window(m.rate_count, m.rate_per_secs,
                                     m.rate_start, m.rate_prev, m.rate_cur, now(), k.taken_n::int) rw)
                           ELSE s.wake_at END,
            wake_queue = CASE WHEN m.rate_count IS NOT NULL AND m.free - k.taken_n < 1 THEN $1
                              ELSE s.wake_queue END
        FROM room m JOIN key_counts k USING (tenant_key, key)
        WHERE s.tenant_key = m.tenant_key AND s.key = m.key
        RETURNING s.wake_at IS NOT NULL AND s.wake_queue = $1 AS waking, k.refused_n AS refused
$old$,
$new$            wake_at = CASE WHEN m.rate_count IS NOT NULL AND m.free - m.taken_n < 1
                           THEN (SELECT rw.next_at FROM queueflow.rate_window(m.rate_count, m.rate_per_secs,
                                     m.rate_start, m.rate_prev, m.rate_cur, now(), m.taken_n::int) rw)
                           ELSE s.wake_at END,
            wake_queue = CASE WHEN m.rate_count IS NOT NULL AND m.free - m.taken_n < 1 THEN $1
                              ELSE s.wake_queue END
        FROM (SELECT m.tenant_key, m.key, m.running, m.start, m.prev, m.cur, m.rate_count, m.rate_per_secs,
                     m.rate_start, m.rate_prev, m.rate_cur, m.free, k.taken_n, k.refused_n, false AS held
              FROM room m JOIN key_counts k USING (tenant_key, key)
              UNION ALL
              -- For /metrics: the walked jobs of keys with no room now, counted on their rows. (A key
              -- with no room gives this claim no job, so the grant never updates its row: no row is
              -- updated twice.) Only `throttled` changes: every other column keeps its value.
              SELECT h.tenant_key, h.key, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, h.n, true
              FROM unheld h
              WHERE NOT EXISTS (SELECT 1 FROM pairs x WHERE x.tenant_key = h.tenant_key AND x.key = h.key)) AS m
        WHERE s.tenant_key = m.tenant_key AND s.key = m.key
        RETURNING NOT m.held AND s.wake_at IS NOT NULL AND s.wake_queue = $1 AS waking, m.refused_n AS refused
$new$],
        ARRAY[
$old$        SET running = m.running + k.taken_n,
            rate_start = COALESCE(m.start, s.rate_start),
            rate_prev = COALESCE(m.prev, s.rate_prev),
            rate_cur = COALESCE(m.cur + k.taken_n, s.rate_cur),
$old$,
$new$        SET running = COALESCE(m.running + m.taken_n, s.running),
            rate_start = COALESCE(m.start, s.rate_start),
            rate_prev = COALESCE(m.prev, s.rate_prev),
            rate_cur = COALESCE(m.cur + m.taken_n, s.rate_cur),
$new$],
        ARRAY[
$old$        FROM (SELECT (SELECT COALESCE(sum(n), 0) FROM held)
                     + (SELECT COALESCE(sum(refused), 0) FROM bumped) AS n) AS x
$old$,
$new$        FROM (SELECT (SELECT COALESCE(sum(refused), 0) FROM bumped) AS n) AS x
$new$],
        -- ... and a second pass when the first made state rows
        ARRAY[
$old$        j.workflow_step_id, j.lease_token, j.priority;
END $old$,
$new$        j.workflow_step_id, j.lease_token, j.priority;
    GET DIAGNOSTICS got = ROW_COUNT;
    EXIT WHEN NOT may_make OR current_setting('queueflow.limit_rows_made', true) IS DISTINCT FROM 'on';
    PERFORM set_config('queueflow.limit_rows_made', '', true);
    max_jobs := max_jobs - got;
    EXIT WHEN max_jobs <= 0;
    may_make := false;
  END LOOP;
END $new$]],
    '0030');
