-- QueueFlow schema, version 12: flow control. A job's config may name up to 4 limit keys
-- (`limits`); a tenant's policies cap how many jobs of a key run at once (concurrency) and how many
-- start per window (rate). The claim enforces both in the statement that leases (claim_jobs).
--
-- * jobs.limit_keys: the config's keys as an array. The server's insert sets it; a trigger fills
--   it for any other writer (the SQL enqueue functions, a replay), so no insert can leave it out.
--   NULL for a job without limits: such jobs never touch the tables below. A plain column, not a
--   generated one: adding it rewrites nothing (a generated column would rewrite the whole table,
--   under an exclusive lock, and be recomputed at every update of every job).
-- * limit_policies: what a tenant PUT. A key ending in `*` is a wildcard for every key with its
--   prefix that has no exact policy (the longest wildcard prefix wins).
-- * limit_state: one row per (tenant, key) ever named by a job, created by the insert trigger: the
--   policy in effect (copied from limit_policies, refreshed when a policy changes), the running
--   count, the rate window and the wake-up time of a key whose rate ran out. Only claims write
--   `running` upwards, holding the row with FOR UPDATE SKIP LOCKED: a claim never waits for a row
--   another holds (it leaves that key's jobs for the next claim), so claims cannot deadlock.
-- * limit_releases: a job leaving `running` (complete, fail, retry, cancel, reclaim, give-back,
--   delete) appends one row per key instead of decrementing the count, so completions, which
--   finish jobs of many keys in one transaction, lock nothing another writer holds. The next claim
--   of the key (or the janitor's sweep) folds them into `running` under the row's lock.
--
-- The rate is a sliding window of two fixed windows (the previous one weighted by how much of it
-- still overlaps): at most about `rate_count` starts in any `rate_per_secs`, without the burst of
-- a full token bucket at every window edge. queueflow.rate_window says how.

CREATE FUNCTION queueflow.job_limit_keys(config jsonb) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN config ? 'limits' AND jsonb_typeof(config -> 'limits') = 'array'
                THEN ARRAY(SELECT jsonb_array_elements_text(config -> 'limits')) END
$$;

ALTER TABLE queueflow.jobs ADD COLUMN limit_keys text[];

CREATE FUNCTION queueflow.fill_limit_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.limit_keys := queueflow.job_limit_keys(NEW.config);
    RETURN NEW;
END $$;
-- Only for a row that names limits and was written without them: other rows pay the WHEN only.
CREATE TRIGGER jobs_fill_limit_keys BEFORE INSERT ON queueflow.jobs
    FOR EACH ROW WHEN (NEW.limit_keys IS NULL AND NEW.config ? 'limits')
    EXECUTE FUNCTION queueflow.fill_limit_keys();

-- The claim leases jobs without limits through jobs_claim_idx and jobs with limits through their
-- own index, led by their first key, so a saturated key's backlog is never walked to reach other
-- work: the claim visits each waiting key once (a loose scan) and takes only what it may start.
CREATE INDEX jobs_claim_free_idx ON queueflow.jobs
    (queue_name, (COALESCE(tenant_id, '')), priority DESC, scheduled_at, created_at)
    WHERE status IN ('pending', 'retrying') AND limit_keys IS NULL;
DROP INDEX queueflow.jobs_claim_idx;
ALTER INDEX queueflow.jobs_claim_free_idx RENAME TO jobs_claim_idx;
CREATE INDEX jobs_claim_limited_idx ON queueflow.jobs
    (queue_name, (COALESCE(tenant_id, '')), (limit_keys[1]), priority DESC, scheduled_at, created_at)
    WHERE status IN ('pending', 'retrying') AND limit_keys IS NOT NULL;
-- ... and first, in claim order, a bounded window of them: when that window holds enough jobs
-- whose keys have room (the usual case: many keys, few saturated), no key is visited one by one.
CREATE INDEX jobs_claim_limited_order_idx ON queueflow.jobs
    (queue_name, (COALESCE(tenant_id, '')), priority DESC, scheduled_at, created_at)
    WHERE status IN ('pending', 'retrying') AND limit_keys IS NOT NULL;

CREATE TABLE queueflow.limit_policies (
    tenant_key    text             NOT NULL,
    key           text             NOT NULL,
    concurrency   integer,
    rate_count    integer,
    rate_per_secs double precision,
    created_at    timestamptz      NOT NULL DEFAULT now(),
    updated_at    timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_key, key)
);

CREATE TABLE queueflow.limit_state (
    tenant_key    text             NOT NULL,
    key           text             NOT NULL,
    concurrency   integer,
    rate_count    integer,
    rate_per_secs double precision,
    running       integer          NOT NULL DEFAULT 0,
    rate_start    timestamptz,
    rate_prev     integer          NOT NULL DEFAULT 0,
    rate_cur      integer          NOT NULL DEFAULT 0,
    throttled     bigint           NOT NULL DEFAULT 0,
    wake_at       timestamptz,
    wake_queue    text,
    PRIMARY KEY (tenant_key, key)
) WITH (fillfactor = 50);  -- room on each page: a claim's updates of a row stay HOT (no index write)
CREATE INDEX limit_state_wake_idx ON queueflow.limit_state (wake_at) WHERE wake_at IS NOT NULL;

CREATE TABLE queueflow.limit_releases (
    tenant_key text NOT NULL,
    key        text NOT NULL
);
CREATE INDEX limit_releases_key_idx ON queueflow.limit_releases (tenant_key, key);

-- The policy in effect for one key: its own, else the longest wildcard whose prefix it has.
CREATE FUNCTION queueflow.limit_policy_of(tenant text, k text)
RETURNS TABLE (concurrency integer, rate_count integer, rate_per_secs double precision)
LANGUAGE sql STABLE AS $$
    SELECT p.concurrency, p.rate_count, p.rate_per_secs FROM queueflow.limit_policies p
    WHERE p.tenant_key = tenant
      AND (p.key = k OR (right(p.key, 1) = '*' AND starts_with(k, left(p.key, -1))))
    ORDER BY p.key = k DESC, length(p.key) DESC
    LIMIT 1
$$;

-- Copy the policies in effect onto the state rows a policy write under `pattern` may change.
CREATE FUNCTION queueflow.refresh_limit_state(tenant text, pattern text) RETURNS void LANGUAGE sql AS $$
    UPDATE queueflow.limit_state s
    SET (concurrency, rate_count, rate_per_secs) =
        (SELECT p.concurrency, p.rate_count, p.rate_per_secs FROM queueflow.limit_policy_of(s.tenant_key, s.key) p)
    WHERE s.tenant_key = tenant
      AND CASE WHEN right(pattern, 1) = '*' THEN starts_with(s.key, left(pattern, -1)) ELSE s.key = pattern END
$$;

-- The rate window at time `at`: rolled forward (the current window becomes the previous one after
-- `per_secs`; both empty after two), and `room`, how many may start now: a start is allowed while
-- the estimate of the last `per_secs` seconds' starts (the current window's, plus the share of the
-- previous window's that still overlaps) is below rate_count, so a key under constant pressure
-- starts rate_count per window and one at 1 per window starts once per window. `next_at`: when one
-- more may start, should `taken` more start now (a microsecond late, so that it has).
CREATE FUNCTION queueflow.rate_window(rate_count integer, per_secs double precision, start timestamptz,
                                      prev integer, cur integer, at timestamptz, taken integer DEFAULT 0)
RETURNS TABLE (start timestamptz, prev integer, cur integer, room integer, next_at timestamptz)
LANGUAGE sql IMMUTABLE AS $$
    WITH w AS (
        SELECT CASE WHEN r.start IS NULL OR r.elapsed >= 2 * per_secs THEN at
                    WHEN r.elapsed >= per_secs THEN r.start + make_interval(secs => per_secs)
                    ELSE r.start END AS start,
               CASE WHEN r.start IS NULL OR r.elapsed >= 2 * per_secs THEN 0
                    WHEN r.elapsed >= per_secs THEN r.cur ELSE r.prev END AS prev,
               CASE WHEN r.start IS NULL OR r.elapsed >= per_secs THEN 0 ELSE r.cur END AS cur
        FROM (SELECT rate_window.start AS start, prev, cur,
                     EXTRACT(EPOCH FROM at - rate_window.start)::double precision AS elapsed) AS r
    ), f AS (
        SELECT w.*, EXTRACT(EPOCH FROM at - w.start)::double precision / per_secs AS frac FROM w
    )
    SELECT f.start, f.prev, f.cur,
           -- (less a hair, so that rounding never lets one more through)
           GREATEST(0, ceil(rate_count - f.prev * (1 - f.frac) - f.cur - 1e-9))::integer,
           make_interval(secs => 1e-6) + CASE
               -- one more fits in this window once enough of the previous window has slid out
               WHEN f.cur + taken < rate_count
                   THEN f.start + make_interval(secs => per_secs * GREATEST(f.frac,
                            1 - (rate_count - f.cur - taken)::double precision / GREATEST(f.prev, 1)))
               -- else in the next window, once enough of this one has slid out
               ELSE f.start + make_interval(secs => per_secs * (1 + GREATEST(0,
                            1 - rate_count::double precision / (f.cur + taken))))
           END
    FROM f
$$;

-- How many more jobs of a key may start now, read without its lock: the concurrency left (less the
-- releases not yet folded in) and the rate's room; `big` for a key with neither.
CREATE FUNCTION queueflow.limit_room(s queueflow.limit_state, big integer) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT LEAST(
        CASE WHEN s.concurrency IS NULL THEN big
             ELSE s.concurrency - s.running + (SELECT count(*)::integer FROM queueflow.limit_releases r
                                               WHERE r.tenant_key = s.tenant_key AND r.key = s.key) END,
        CASE WHEN s.rate_count IS NULL THEN big
             ELSE (SELECT w.room FROM queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start,
                                                            s.rate_prev, s.rate_cur, now()) w) END)
$$;

-- Fold the releases of the given keys into `running`: used by the janitor for keys no claim
-- visits. Rows another transaction holds are left for later.
CREATE FUNCTION queueflow.fold_limit_releases(max_keys integer) RETURNS integer LANGUAGE sql AS $$
    WITH pending AS (
        SELECT DISTINCT tenant_key, key FROM queueflow.limit_releases LIMIT max_keys
    ), locked AS MATERIALIZED (
        SELECT s.tenant_key, s.key FROM queueflow.limit_state s JOIN pending USING (tenant_key, key)
        FOR UPDATE OF s SKIP LOCKED
    ), folded AS (
        DELETE FROM queueflow.limit_releases r USING locked l
        WHERE r.tenant_key = l.tenant_key AND r.key = l.key
        RETURNING r.tenant_key, r.key
    ), counted AS (
        SELECT tenant_key, key, count(*)::integer AS n FROM folded GROUP BY tenant_key, key
    ), applied AS (
        UPDATE queueflow.limit_state s SET running = GREATEST(0, s.running - c.n)
        FROM counted c WHERE s.tenant_key = c.tenant_key AND s.key = c.key
        RETURNING 1
    )
    SELECT count(*)::integer FROM applied
$$;

-- A job leaving `running` gives its slots back, and wakes the queue's waiters.
CREATE FUNCTION queueflow.release_limit_slots() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queueflow.limit_releases (tenant_key, key)
    SELECT COALESCE(OLD.tenant_id, ''), k FROM unnest(OLD.limit_keys) AS k;
    PERFORM pg_notify('queueflow_work', OLD.queue_name);
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_release_limit_slots AFTER UPDATE OF status ON queueflow.jobs
    FOR EACH ROW WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.limit_keys IS NOT NULL)
    EXECUTE FUNCTION queueflow.release_limit_slots();
CREATE TRIGGER jobs_release_limit_slots_deleted AFTER DELETE ON queueflow.jobs
    FOR EACH ROW WHEN (OLD.status = 'running' AND OLD.limit_keys IS NOT NULL)
    EXECUTE FUNCTION queueflow.release_limit_slots();

-- The insert trigger also creates the state rows of keys it has not seen, in key order (two
-- concurrent inserts of the same new keys wait for each other in one order, never in a cycle).
CREATE OR REPLACE FUNCTION queueflow.notify_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    SELECT q.queue_name INTO bad
    FROM (SELECT DISTINCT queue_name FROM inserted) AS q
    WHERE octet_length(q.queue_name) NOT BETWEEN 1 AND 128 OR q.queue_name ~ '[[:space:][:cntrl:]]'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('queue name must be 1 to 128 bytes with no whitespace or control characters, not %L', bad);
    END IF;
    INSERT INTO queueflow.tenant_queues (queue_name, tenant_key)
    SELECT DISTINCT queue_name, COALESCE(tenant_id, '') FROM inserted
    ON CONFLICT DO NOTHING;
    INSERT INTO queueflow.limit_state (tenant_key, key, concurrency, rate_count, rate_per_secs)
    SELECT n.tenant_key, n.key, p.concurrency, p.rate_count, p.rate_per_secs
    FROM (SELECT DISTINCT COALESCE(i.tenant_id, '') AS tenant_key, k AS key
          FROM inserted i CROSS JOIN LATERAL unnest(i.limit_keys) AS k
          WHERE i.limit_keys IS NOT NULL) AS n
    LEFT JOIN LATERAL queueflow.limit_policy_of(n.tenant_key, n.key) p ON true
    -- (a key seen before costs one probe: its policy is looked up only for a new row)
    WHERE NOT EXISTS (SELECT 1 FROM queueflow.limit_state s WHERE s.tenant_key = n.tenant_key AND s.key = n.key)
    ORDER BY n.tenant_key, n.key
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify(CASE WHEN due THEN 'queueflow_work' ELSE 'queueflow_delayed' END, queue_name)
    FROM (SELECT DISTINCT queue_name, scheduled_at <= now() AS due
          FROM inserted WHERE status = 'pending') AS q;
    RETURN NULL;
END $$;

-- The SQL enqueue functions take `limits` as the API does: up to 4 keys of 1 to 128 bytes, no
-- whitespace or control characters.
CREATE FUNCTION queueflow.check_limit_keys(config jsonb, context text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    keys jsonb := config -> 'limits';
BEGIN
    IF keys IS NULL OR jsonb_typeof(keys) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(keys) <> 'array' OR jsonb_array_length(keys) > 4
       OR EXISTS (SELECT 1 FROM jsonb_array_elements(keys) AS e
                  WHERE jsonb_typeof(e) <> 'string' OR octet_length(e #>> '{}') NOT BETWEEN 1 AND 128
                     OR (e #>> '{}') ~ '[[:space:][:cntrl:]]') THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.limits must be an array of up to 4 keys of 1 to 128 bytes with no '
                             'whitespace or control characters, not %s', context, keys);
    END IF;
    RETURN CASE WHEN jsonb_array_length(keys) = 0 THEN NULL ELSE keys END;
END $$;

ALTER FUNCTION queueflow.resolve_job_config(jsonb, text) RENAME TO resolve_job_config_v4;

CREATE FUNCTION queueflow.resolve_job_config(config jsonb, context text DEFAULT 'queueflow')
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    given jsonb := CASE WHEN config IS NULL OR jsonb_typeof(config) <> 'object' THEN config
                        ELSE config - 'limits' END;
    keys  jsonb := CASE WHEN jsonb_typeof(config) = 'object' THEN queueflow.check_limit_keys(config, context) END;
    resolved jsonb := queueflow.resolve_job_config_v4(given, context);
BEGIN
    RETURN CASE WHEN keys IS NULL THEN resolved ELSE resolved || jsonb_build_object('limits', keys) END;
END $$;

-- The claim of a queue that has jobs with limits (claim_jobs calls it only then, so the claims of
-- every other queue keep their short statement, planned in under a millisecond where this one
-- takes several). Parameters as claim_jobs's: $1 queue, $2 batch, $3 lease seconds, $4 timeout
-- grace, $5 rotation, $6 the claim's key, $7 the only tenant (a worker key's) or null.
--
-- Both kinds of job are claimed here, in one fair-share batch. Jobs without limits come through
-- jobs_claim_idx as elsewhere. Jobs with limits: first a bounded window of them in claim order,
-- read without locks, keeping those whose keys have room; when that window saw every waiting
-- limited job or found half a batch, that is the answer. Otherwise (a saturated key's backlog
-- fills the window) a loose scan of jobs_claim_limited_idx finds each tenant's waiting first keys,
-- and each key gives at most the jobs it may start, so a saturated key's backlog is never read.
-- Only the batch's best candidates are locked. Their state rows are then held (FOR UPDATE SKIP
-- LOCKED: a row another transaction holds leaves its jobs for the next claim, and the queue's
-- waiters are woken again), released slots folded in, and each job kept only if every one of its
-- keys has room for it, in priority order per key; the kept ones take their slots and rate here.
CREATE FUNCTION queueflow.claim_limited(queue text, max_jobs integer, lease_secs integer, grace integer,
                                        rotation bigint, claim uuid, only_tenant text)
RETURNS TABLE (id uuid, queue_name text, task_name text, payload jsonb, config text, status text,
               retry_count integer, delivery_count integer, created_at timestamptz, scheduled_at timestamptz,
               metadata jsonb, started_at timestamptz, completed_at timestamptz, next_retry_at timestamptz,
               error_message text, result jsonb, idempotency_key text, tenant_id text, workflow_id text,
               workflow_step_id text, lease_token uuid, priority integer)
-- Planning this statement takes several milliseconds, and PostgreSQL may judge a custom plan worth
-- it on every call: one generic plan per session, always.
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH RECURSIVE tenants AS (
        SELECT t.tenant_key, row_number() OVER (ORDER BY t.tenant_key) AS pos
        FROM queueflow.tenant_queues t
        WHERE t.queue_name = $1 AND NOT t.paused AND ($7::text IS NULL OR t.tenant_key = $7)
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
    ), walk_pairs AS (
        SELECT w.id, w.tenant_key, k.key,
               row_number() OVER (PARTITION BY w.tenant_key, k.key
                                  ORDER BY w.priority DESC, w.scheduled_at, w.created_at) AS rank
        FROM walk w CROSS JOIN LATERAL unnest(w.limit_keys) AS k(key)
    ), walk_room AS MATERIALIZED (
        SELECT s.tenant_key, s.key,
               LEAST(CASE WHEN s.concurrency IS NULL THEN $2
                          ELSE s.concurrency - s.running + COALESCE(r.n, 0) END,
                     CASE WHEN s.rate_count IS NULL THEN $2
                          ELSE (SELECT w.room FROM queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start,
                                                                         s.rate_prev, s.rate_cur, now()) w) END) AS room
        FROM (SELECT DISTINCT tenant_key, key FROM walk_pairs) AS k
        JOIN queueflow.limit_state s ON s.tenant_key = k.tenant_key AND s.key = k.key
        LEFT JOIN (SELECT r.tenant_key, r.key, count(*)::int AS n FROM queueflow.limit_releases r
                   GROUP BY r.tenant_key, r.key) AS r ON r.tenant_key = s.tenant_key AND r.key = s.key
    ), walk_pick AS MATERIALIZED (
        -- The walked jobs whose every key has room for them (in the key's order), read without locks.
        SELECT w.id, w.tenant_key, w.priority, w.scheduled_at, w.created_at FROM walk w
        WHERE w.id NOT IN (
            SELECT p.id FROM walk_pairs p LEFT JOIN walk_room r USING (tenant_key, key)
            WHERE r.key IS NULL OR p.rank > r.room)
    ), held AS (
        -- For /metrics: the walked jobs of keys with no room now, counted on the rows no one else
        -- holds. (A key with no room gives this claim no job, so the grant below never updates its
        -- row: no row is updated twice.)
        UPDATE queueflow.limit_state s SET throttled = s.throttled + h.n
        FROM (SELECT r.tenant_key, r.key, count(*) AS n
              FROM walk_room r JOIN walk_pairs p USING (tenant_key, key)
              WHERE r.room <= 0 GROUP BY r.tenant_key, r.key) AS h
        WHERE s.tenant_key = h.tenant_key AND s.key = h.key
          AND NOT EXISTS (SELECT 1 FROM pairs x WHERE x.tenant_key = h.tenant_key AND x.key = h.key)
          AND (s.tenant_key, s.key) IN (
              SELECT t.tenant_key, t.key FROM queueflow.limit_state t
              WHERE (t.tenant_key, t.key) IN (SELECT tenant_key, key FROM walk_room WHERE room <= 0)
              FOR UPDATE OF t SKIP LOCKED)
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
        SELECT w.tenant_key, w.key,
               LEAST(share.n, GREATEST(2, CEIL(2.0 * $2 / GREATEST(1, count(*) OVER ())))::int,
                     queueflow.limit_room(s, share.n)) AS room
        FROM waiting_keys w CROSS JOIN share
        JOIN queueflow.limit_state s ON s.tenant_key = w.tenant_key AND s.key = w.key
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
    ), locked AS MATERIALIZED (
        SELECT s.* FROM (SELECT DISTINCT tenant_key, key FROM pairs) AS p
        CROSS JOIN LATERAL (
            SELECT * FROM queueflow.limit_state s WHERE s.tenant_key = p.tenant_key AND s.key = p.key
            FOR UPDATE SKIP LOCKED
        ) s
    ), folded AS (
        DELETE FROM queueflow.limit_releases r USING locked l
        WHERE r.tenant_key = l.tenant_key AND r.key = l.key
        RETURNING r.tenant_key, r.key
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
    ), ranked AS (
        SELECT p.id, p.tenant_key, p.key,
               row_number() OVER (PARTITION BY p.tenant_key, p.key
                                  ORDER BY p.priority DESC, p.scheduled_at, p.created_at) AS rank
        FROM pairs p
    ), judged AS MATERIALIZED (
        SELECT r.id, r.tenant_key, r.key, (m.key IS NULL OR r.rank > m.free) AS refused
        FROM ranked r LEFT JOIN room m USING (tenant_key, key)
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
        SET running = m.running + k.taken_n,
            rate_start = COALESCE(m.start, s.rate_start),
            rate_prev = COALESCE(m.prev, s.rate_prev),
            rate_cur = COALESCE(m.cur + k.taken_n, s.rate_cur),
            throttled = s.throttled + k.refused_n,
            -- A key whose rate this claim used up: the janitor wakes the queue when one more may start.
            wake_at = CASE WHEN m.rate_count IS NOT NULL AND m.free - k.taken_n < 1
                           THEN (SELECT rw.next_at FROM queueflow.rate_window(m.rate_count, m.rate_per_secs,
                                     m.rate_start, m.rate_prev, m.rate_cur, now(), k.taken_n::int) rw)
                           ELSE s.wake_at END,
            wake_queue = CASE WHEN m.rate_count IS NOT NULL AND m.free - k.taken_n < 1 THEN $1
                              ELSE s.wake_queue END
        FROM room m JOIN key_counts k USING (tenant_key, key)
        WHERE s.tenant_key = m.tenant_key AND s.key = m.key
        RETURNING s.wake_at IS NOT NULL AND s.wake_queue = $1 AS waking
    ), announced AS (
        -- The janitor owns the timers: tell it a key's rate ran out (it sleeps until the wake-up). And
        -- a key whose state row another transaction held was left for later: wake this queue's
        -- waiters again, or its jobs would wait for the next release or poll.
        SELECT (SELECT count(pg_notify('queueflow_delayed', $1)) FROM (SELECT 1 FROM bumped WHERE waking LIMIT 1) AS b)
             + (SELECT count(pg_notify('queueflow_work', $1))
                FROM (SELECT 1 FROM pairs p
                      WHERE NOT EXISTS (SELECT 1 FROM locked l WHERE l.tenant_key = p.tenant_key AND l.key = p.key)
                      LIMIT 1) AS k) AS n
    )
    UPDATE queueflow.jobs j
    SET status = 'running',
        lease_token = gen_random_uuid(),
        -- $6, a random key of this claim: should the answer be lost (the connection dropped after the
        -- commit), the claimer can still give its jobs back (release_unanswered_claim).
        claim_key = $6::uuid,
        locked_until = now() + make_interval(secs => GREATEST($3::int,
            COALESCE((j.config->>'timeout_secs')::int + $4::int, 0))),
        delivery_count = j.delivery_count + 1,
        started_at = COALESCE(j.started_at, now()),
        next_retry_at = NULL
    FROM chosen WHERE j.id = chosen.id AND (SELECT n FROM announced) >= 0
    -- A job's fields (jobs.to_lease), with its config as text: most jobs share one, decoded once.
    RETURNING j.id, j.queue_name, j.task_name, j.payload, j.config::text AS config, j.status, j.retry_count,
        j.delivery_count, j.created_at, j.scheduled_at, j.metadata, j.started_at, j.completed_at,
        j.next_retry_at, j.error_message, j.result, j.idempotency_key, j.tenant_id, j.workflow_id,
        j.workflow_step_id, j.lease_token, j.priority;
END $fn$;
