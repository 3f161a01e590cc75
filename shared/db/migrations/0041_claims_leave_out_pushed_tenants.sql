-- QueueFlow schema, version 41: a claim for every tenant leaves out the tenants that push a queue.
--
-- A queue a tenant bound to a push endpoint (migration 38) is drained by the pushers only. The
-- lease route refused it for the worker token (which claims every tenant's jobs) as soon as any
-- tenant bound it, so one tenant binding `default` stopped every fleet worker's lease of
-- `default`, for every tenant. Now a claim that names no tenant (the worker token's, the
-- in-process workers') leaves the bound tenants' jobs out, the pusher and a worker key name their
-- tenant, and the lease route refuses the worker token only where the unnamed tenant bound it.
-- One probe of push_bindings' primary key per tenant with due work, in each kind of claim.
--
-- The whole function is restated here (no text edits) so that it reads as it runs; it keeps
-- migration 40's `jit = off`.
CREATE OR REPLACE FUNCTION queueflow.claim_limited(queue text, max_jobs integer, lease_secs integer, grace integer, rotation bigint, claim uuid, only_tenant text, worker text)
RETURNS TABLE(id uuid, queue_name text, task_name text, payload jsonb, config text, status text, retry_count integer, delivery_count integer, created_at timestamp with time zone, scheduled_at timestamp with time zone, metadata jsonb, started_at timestamp with time zone, completed_at timestamp with time zone, next_retry_at timestamp with time zone, error_message text, result jsonb, idempotency_key text, tenant_id text, workflow_id text, workflow_step_id text, lease_token uuid, priority integer)
LANGUAGE plpgsql
SET plan_cache_mode TO 'force_generic_plan'
SET enable_seqscan TO 'off'
SET jit TO 'off'
AS $function$
#variable_conflict use_column
DECLARE
    -- (read by the statement: only the first pass makes state rows, see `made` below)
    may_make   boolean := true;
    got        integer;
    passes     integer := 0;
    again      boolean;
BEGIN
  LOOP
    RETURN QUERY
    WITH RECURSIVE tenants AS (
        SELECT t.tenant_key, row_number() OVER (ORDER BY t.tenant_key) AS pos
        FROM queueflow.tenant_queues t
        WHERE t.queue_name = $1 AND NOT t.paused
          -- A named tenant (a pusher's, a worker key's) is claimed whatever drains it; a claim for
          -- every tenant leaves out the tenants that bound this queue to a push endpoint.
          AND CASE WHEN $7::text IS NULL
                   THEN NOT EXISTS (SELECT 1 FROM queueflow.push_bindings b
                                    WHERE b.tenant_key = t.tenant_key AND b.queue_name = $1)
                   ELSE t.tenant_key = $7 END
          -- One probe of each claim index per tenant: scalar subqueries, because two EXISTS joined by
          -- OR are planned as hashed subplans that read every due job of the queue.
          AND ((SELECT 1 FROM queueflow.jobs j
                WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = t.tenant_key
                  AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NULL AND j.scheduled_at <= now()
                ORDER BY j.queue_name, COALESCE(j.tenant_id, ''), j.priority DESC, j.scheduled_at, j.created_at
                LIMIT 1) IS NOT NULL
               OR (SELECT 1 FROM queueflow.jobs j
                   WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = t.tenant_key
                     AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL AND j.scheduled_at <= now()
                   ORDER BY j.queue_name, COALESCE(j.tenant_id, ''), j.priority DESC, j.scheduled_at, j.created_at
                   LIMIT 1) IS NOT NULL)
    ), share AS (
        SELECT CEIL($2::numeric / GREATEST(count(*), 1))::int AS n, GREATEST(count(*), 1) AS tenants FROM tenants
    ), first_pass AS (
        SELECT c.id, (t.pos + $5::bigint) % share.tenants AS lead,
               row_number() OVER (PARTITION BY t.tenant_key
                                  ORDER BY c.priority DESC, c.scheduled_at, c.created_at) AS round,
               c.priority, c.scheduled_at, c.created_at
        FROM tenants t CROSS JOIN share
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.scheduled_at, j.created_at FROM queueflow.jobs j
            WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = t.tenant_key
              AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NULL AND j.scheduled_at <= now()
            ORDER BY j.priority DESC, j.scheduled_at, j.created_at
            LIMIT share.n
            FOR UPDATE SKIP LOCKED
        ) c
    ), fill AS (
        SELECT c.id, (t.pos + $5::bigint) % share.tenants AS lead,
               share.n + row_number() OVER (PARTITION BY t.tenant_key
                                            ORDER BY c.priority DESC, c.scheduled_at, c.created_at) AS round,
               c.priority, c.scheduled_at, c.created_at
        FROM tenants t CROSS JOIN share
        CROSS JOIN LATERAL (
            SELECT j.id, j.priority, j.scheduled_at, j.created_at FROM queueflow.jobs j
            WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = t.tenant_key
              AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NULL AND j.scheduled_at <= now()
              AND j.id NOT IN (SELECT id FROM first_pass)
            ORDER BY j.priority DESC, j.scheduled_at, j.created_at
            LIMIT GREATEST(0, $2 - (SELECT count(*) FROM first_pass))
            FOR UPDATE SKIP LOCKED
        ) c
    ), walk AS MATERIALIZED (
        -- A bounded window of each tenant's waiting limited jobs, in claim order.
        SELECT c.id, t.tenant_key, c.limit_keys, c.priority, c.scheduled_at, c.created_at
        FROM tenants t CROSS JOIN share
        CROSS JOIN LATERAL (
            SELECT j.id, j.limit_keys, j.priority, j.scheduled_at, j.created_at FROM queueflow.jobs j
            WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = t.tenant_key
              AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL AND j.scheduled_at <= now()
            ORDER BY j.priority DESC, j.scheduled_at, j.created_at
            LIMIT share.n + 32
            -- (locked, so that concurrent claims walk past each other's windows instead of
            -- reading the same first rows and finding them taken)
            FOR UPDATE SKIP LOCKED
        ) c
    ), walk_keyed AS (
        SELECT w.id, w.tenant_key, k.key FROM walk w CROSS JOIN LATERAL unnest(w.limit_keys) AS k(key)
    ), walk_room AS MATERIALIZED (
        -- Each walked key's room, compared below only with its walked jobs' ranks and with zero: its
        -- waiting releases (which only add room) are counted when its recorded room is short of them.
        SELECT s.tenant_key, s.key,
               LEAST(CASE WHEN s.concurrency IS NULL THEN $2
                          WHEN s.concurrency - s.running >= k.walked THEN s.concurrency - s.running
                          ELSE s.concurrency - s.running
                               + (SELECT count(*)::integer FROM queueflow.limit_releases r
                                  WHERE r.tenant_key = s.tenant_key AND r.key = s.key) END,
                     CASE WHEN s.rate_count IS NULL THEN $2
                          ELSE (SELECT w.room FROM queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start,
                                                                         s.rate_prev, s.rate_cur, now()) w) END) AS room
        FROM (SELECT tenant_key, key, count(*) AS walked FROM walk_keyed GROUP BY tenant_key, key) AS k
        -- (One probe per key: OFFSET 0 keeps it a subquery, never a join over every key's row.)
        CROSS JOIN LATERAL (SELECT x.* FROM queueflow.limit_state x
                            WHERE x.tenant_key = k.tenant_key AND x.key = k.key OFFSET 0) AS s
    ), walk_open AS MATERIALIZED (
        -- The walked jobs none of whose keys is out of room: only they take places in their keys'
        -- order below, so a job waiting for one key never holds a place another key's job could use.
        SELECT w.* FROM walk w
        WHERE w.id NOT IN (SELECT p.id FROM walk_keyed p JOIN walk_room r USING (tenant_key, key)
                           WHERE r.room <= 0)
    ), walk_pairs AS (
        -- Each open job's place in each of its keys' order. The order is total (the id breaks ties:
        -- a batch's jobs share their timestamps), so it is the same order in every key: the first
        -- open job is first in all of its keys, and a claim never refuses every job while one fits.
        SELECT w.id, w.tenant_key, k.key,
               row_number() OVER (PARTITION BY w.tenant_key, k.key
                                  ORDER BY w.priority DESC, w.scheduled_at, w.created_at, w.id) AS rank
        FROM walk_open w CROSS JOIN LATERAL unnest(w.limit_keys) AS k(key)
    ), walk_pick AS MATERIALIZED (
        -- The open jobs whose every key has room for them (in the key's order), read without locks.
        -- A key with no state row yet is let through: its row is made below (`made`).
        SELECT w.id, w.tenant_key, w.priority, w.scheduled_at, w.created_at FROM walk_open w
        WHERE w.id NOT IN (
            SELECT p.id FROM walk_pairs p JOIN walk_room r USING (tenant_key, key)
            WHERE p.rank > r.room)
    ), unheld AS MATERIALIZED (
        -- The state rows of the walked keys with no room now that no one else holds, locked once.
        -- (With their walked jobs: counted as throttled on their rows, by `bumped`.)
        SELECT t.tenant_key, t.key, n.n
        FROM (SELECT r.tenant_key, r.key, count(*) AS n
              FROM walk_room r JOIN walk_keyed p USING (tenant_key, key)
              WHERE r.room <= 0 GROUP BY r.tenant_key, r.key) AS n
        CROSS JOIN LATERAL (SELECT x.tenant_key, x.key FROM queueflow.limit_state x
                            WHERE x.tenant_key = n.tenant_key AND x.key = n.key AND may_make
                            FOR UPDATE SKIP LOCKED) AS t
    ), walked_enough AS (
        -- The window saw every waiting limited job, or found at least half a batch: no key-by-key visit.
        SELECT (SELECT count(*) FROM walk) < (SELECT count(*) FROM tenants) * ((SELECT n FROM share) + 32)
               OR (SELECT count(*) FROM walk_pick) * 2 >= $2 AS yes
    ), waiting_keys AS (
        -- Else each tenant's waiting first keys, by a loose scan of their index, and a few jobs of each
        -- key with room: a saturated key's backlog is never read.
        SELECT t.tenant_key,
               (SELECT min(j.limit_keys[1]) FROM queueflow.jobs j
                WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = t.tenant_key
                  AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL) AS key
        FROM tenants t
        UNION ALL
        SELECT w.tenant_key,
               (SELECT min(j.limit_keys[1]) FROM queueflow.jobs j
                WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = w.tenant_key
                  AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL
                  AND j.limit_keys[1] > w.key)
        FROM waiting_keys w WHERE w.key IS NOT NULL
    ), key_room AS (
        -- What each waiting key may start (read without its lock: the grant below decides), and no
        -- more than an even share of the batch per key beyond two.
        -- A key with no state row yet: one job, whose claim makes the row (`made`).
        SELECT w.tenant_key, w.key,
               CASE WHEN s.state IS NULL THEN 1
                    ELSE LEAST(share.n, GREATEST(2, CEIL(2.0 * $2 / GREATEST(1, count(*) OVER ())))::int,
                               queueflow.limit_room(s.state, share.n)) END AS room
        FROM waiting_keys w CROSS JOIN share
        LEFT JOIN LATERAL (SELECT x AS state FROM queueflow.limit_state x
                           WHERE x.tenant_key = w.tenant_key AND x.key = w.key OFFSET 0) AS s ON true
        WHERE w.key IS NOT NULL
    ), limited_pick AS (
        -- Unlocked candidates, the batch's best of them; only those are locked below.
        SELECT * FROM (
            SELECT id, tenant_key, priority, scheduled_at, created_at FROM walk_pick
            WHERE (SELECT yes FROM walked_enough)
            UNION ALL
            SELECT c.id, k.tenant_key, c.priority, c.scheduled_at, c.created_at
            FROM key_room k
            CROSS JOIN LATERAL (
                SELECT j.id, j.priority, j.scheduled_at, j.created_at FROM queueflow.jobs j
                WHERE j.queue_name = $1 AND COALESCE(j.tenant_id, '') = k.tenant_key AND j.limit_keys[1] = k.key
                  AND j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL AND j.scheduled_at <= now()
                ORDER BY j.priority DESC, j.scheduled_at, j.created_at
                LIMIT k.room
            ) c
            WHERE k.room > 0 AND NOT (SELECT yes FROM walked_enough)
        ) AS candidates
        ORDER BY priority DESC, scheduled_at, created_at
        LIMIT $2
    ), limited AS (
        SELECT j.id, p.tenant_key, j.limit_keys, j.priority, j.scheduled_at, j.created_at
        FROM limited_pick p JOIN queueflow.jobs j ON j.id = p.id
        WHERE j.status IN ('pending', 'retrying') AND j.limit_keys IS NOT NULL AND j.scheduled_at <= now()
        FOR UPDATE OF j SKIP LOCKED
    ), pairs AS (
        SELECT l.id, l.tenant_key, k.key, l.priority, l.scheduled_at, l.created_at
        FROM limited l CROSS JOIN LATERAL unnest(l.limit_keys) AS k(key)
    ), missing AS (
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
        CROSS JOIN LATERAL (
            SELECT * FROM queueflow.limit_state s WHERE s.tenant_key = p.tenant_key AND s.key = p.key
            FOR UPDATE SKIP LOCKED
        ) s
    ), folded AS MATERIALIZED (
        SELECT f.released_tenant_key AS tenant_key, f.released_key AS key
        FROM queueflow.take_releases(ARRAY(SELECT l.tenant_key FROM locked l ORDER BY l.tenant_key, l.key),
                                     ARRAY(SELECT l.key FROM locked l ORDER BY l.tenant_key, l.key)) AS f
    ), room AS MATERIALIZED (
        SELECT l.tenant_key, l.key, l.rate_count, l.rate_per_secs, l.rate_start, l.rate_prev, l.rate_cur,
               GREATEST(0, l.running - COALESCE(f.n, 0)) AS running, w.start, w.prev, w.cur,
               LEAST(CASE WHEN l.concurrency IS NULL THEN $2
                          ELSE l.concurrency - GREATEST(0, l.running - COALESCE(f.n, 0)) END,
                     CASE WHEN l.rate_count IS NULL THEN $2 ELSE w.room END) AS free
        FROM locked l
        LEFT JOIN (SELECT tenant_key, key, count(*)::int AS n FROM folded GROUP BY tenant_key, key) f
            USING (tenant_key, key)
        LEFT JOIN LATERAL queueflow.rate_window(l.rate_count, l.rate_per_secs, l.rate_start, l.rate_prev,
                                                l.rate_cur, now()) w ON l.rate_count IS NOT NULL
    ), shut AS (
        -- The locked candidates with a key out of room (or whose state row another transaction
        -- holds): refused, and, as in the window, they take no place in their other keys' order.
        SELECT DISTINCT p.id FROM pairs p LEFT JOIN room m USING (tenant_key, key)
        WHERE m.key IS NULL OR m.free <= 0
    ), ranked AS (
        SELECT p.id, p.tenant_key, p.key,
               row_number() OVER (PARTITION BY p.tenant_key, p.key
                                  ORDER BY p.priority DESC, p.scheduled_at, p.created_at, p.id) AS rank
        FROM pairs p WHERE p.id NOT IN (SELECT id FROM shut)
    ), judged AS MATERIALIZED (
        -- `refused`: this key is why the job waits (no room at all, or none left at its place), so
        -- a job is counted as throttled on the keys that held it back, not on every key it carries.
        SELECT p.id, p.tenant_key, p.key,
               CASE WHEN m.key IS NULL OR m.free <= 0 THEN true
                    WHEN r.rank IS NULL THEN false  -- (another of its keys is out of room)
                    ELSE r.rank > m.free END AS refused
        FROM pairs p LEFT JOIN ranked r USING (id, tenant_key, key) LEFT JOIN room m USING (tenant_key, key)
    ), refused AS (
        SELECT DISTINCT id FROM judged WHERE refused
    ), granted AS (
        SELECT l.id, (t.pos + $5::bigint) % share.tenants AS lead,
               row_number() OVER (PARTITION BY l.tenant_key
                                  ORDER BY l.priority DESC, l.scheduled_at, l.created_at) AS round,
               l.priority, l.scheduled_at, l.created_at
        FROM limited l JOIN tenants t USING (tenant_key) CROSS JOIN share
        WHERE l.id NOT IN (SELECT id FROM refused)
    ), chosen AS MATERIALIZED (
        SELECT id FROM (SELECT * FROM first_pass UNION ALL SELECT * FROM fill UNION ALL SELECT * FROM granted)
            AS candidates
        ORDER BY round, lead, priority DESC, scheduled_at, created_at
        LIMIT $2
    ), key_counts AS MATERIALIZED (
        -- Per key: how many of this claim's jobs took a slot, and how many were left waiting.
        SELECT j.tenant_key, j.key, count(*) FILTER (WHERE j.refused) AS refused_n,
               count(*) FILTER (WHERE j.id IN (SELECT id FROM chosen)) AS taken_n
        FROM judged j GROUP BY j.tenant_key, j.key
    ), bumped AS (
        UPDATE queueflow.limit_state s
        SET running = COALESCE(m.running + m.taken_n, s.running),
            rate_start = COALESCE(m.start, s.rate_start),
            rate_prev = COALESCE(m.prev, s.rate_prev),
            rate_cur = COALESCE(m.cur + m.taken_n, s.rate_cur),
            throttled = s.throttled + CASE WHEN may_make THEN m.refused_n ELSE 0 END,
            used_at = CASE WHEN m.taken_n > 0 THEN now() ELSE s.used_at END,
            -- A key whose rate this claim used up: the janitor wakes the queue when one more may start.
            wake_at = CASE WHEN m.rate_count IS NOT NULL AND m.free - m.taken_n < 1
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
        RETURNING NOT m.held AND s.wake_at IS NOT NULL AND s.wake_queue = $1 AS waking,
                  CASE WHEN may_make THEN m.refused_n ELSE 0 END AS refused
    ), left_out AS (
        -- A job this claim passed over although each of its keys still has room after the claim's
        -- grants (a place in a key's order went to a job that another of its keys then refused):
        -- the function claims again (below) rather than leave the room for the next wake-up.
        SELECT 1 FROM (SELECT l.id, l.tenant_key, l.limit_keys FROM limited l
                       UNION ALL
                       SELECT w.id, w.tenant_key, w.limit_keys FROM walk_open w
                       WHERE (SELECT yes FROM walked_enough)) AS c
        WHERE c.id NOT IN (SELECT id FROM chosen)
          AND NOT EXISTS (SELECT 1 FROM unnest(c.limit_keys) AS k(key)
                          LEFT JOIN room m ON m.tenant_key = c.tenant_key AND m.key = k.key
                          LEFT JOIN walk_room r ON r.tenant_key = c.tenant_key AND r.key = k.key
                          LEFT JOIN key_counts n ON n.tenant_key = c.tenant_key AND n.key = k.key
                          -- (a key this claim tried to lock and could not has no room for it now)
                          WHERE COALESCE(m.free, CASE WHEN n.key IS NULL THEN r.room END, 0)
                                - COALESCE(n.taken_n, 0) <= 0)
        LIMIT 1
    ), announced AS (
        -- The janitor owns the timers: tell it a key's rate ran out (it sleeps until the wake-up). And
        -- a key whose state row another transaction held was left for later: wake this queue's
        -- waiters again, or its jobs would wait for the next release or poll.
        SELECT (SELECT count(pg_notify('queueflow_delayed', $1)) FROM (SELECT 1 FROM bumped WHERE waking LIMIT 1) AS b)
             + (SELECT count(pg_notify('queueflow_work', $1))
                FROM (SELECT 1 FROM pairs p
                      WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.tenant_key = p.tenant_key AND l.key = p.key)
                      LIMIT 1) AS k)
             + (SELECT count(set_config('queueflow.limit_left_out', 'on', true)) FROM left_out) AS n
    ), tallied AS (
        -- For /metrics: this claim's throttled jobs, added to one of the totals (this backend's,
        -- so that concurrent claims rarely update the same row).
        UPDATE queueflow.limit_throttle_totals t SET claims = t.claims + x.n
        FROM (SELECT (SELECT COALESCE(sum(refused), 0) FROM bumped) AS n) AS x
        WHERE t.shard = pg_backend_pid() % 16 AND x.n > 0
    )
    UPDATE queueflow.jobs j
    SET status = 'running',
        lease_token = gen_random_uuid(),
        -- $6, a random key of this claim: should the answer be lost (the connection dropped after the
        -- commit), the claimer can still give its jobs back (release_unanswered_claim).
        claim_key = $6::uuid,
        locked_until = now() + make_interval(secs => GREATEST($3::int,
            COALESCE(COALESCE((j.config->>'timeout_secs')::int, 300) + $4::int, 0))),
        delivery_count = j.delivery_count + 1,
        started_at = COALESCE(j.started_at, now()),
        next_retry_at = NULL,
        attempt_started_at = now(),
        worker_id = $8,
        progress = NULL
    FROM chosen WHERE j.id = chosen.id AND (SELECT n FROM announced) >= 0
    -- A job's fields (jobs.to_lease), with its config as text: most jobs share one, decoded once.
    RETURNING j.id, j.queue_name, j.task_name, j.payload, j.config::text AS config, j.status, j.retry_count,
        j.delivery_count, j.created_at, j.scheduled_at, j.metadata, j.started_at, j.completed_at,
        j.next_retry_at, j.error_message, j.result, j.idempotency_key, j.tenant_id, j.workflow_id,
        j.workflow_step_id, j.lease_token, j.priority;
    GET DIAGNOSTICS got = ROW_COUNT;
    passes := passes + 1;
    max_jobs := max_jobs - got;
    -- Again when this pass made state rows (their jobs are granted by the next) or passed over a
    -- job that fits (`left_out`); at most three passes. Only the first makes rows and counts
    -- throttled jobs.
    again := current_setting('queueflow.limit_rows_made', true) IS NOT DISTINCT FROM 'on'
             OR current_setting('queueflow.limit_left_out', true) IS NOT DISTINCT FROM 'on';
    IF again THEN
        PERFORM set_config('queueflow.limit_rows_made', '', true), set_config('queueflow.limit_left_out', '', true);
    END IF;
    EXIT WHEN NOT again OR max_jobs <= 0 OR passes >= 3;
    may_make := false;
  END LOOP;
END $function$;

