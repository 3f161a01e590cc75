-- QueueFlow schema, version 17: visibility (docs/visibility.md). Progress, job logs, the attempt
-- history and the worker registry.
--
-- Attempts: the job row already describes its current attempt (delivery_count is its number); it
-- now also says when that attempt's lease began (attempt_started_at) and which worker holds it
-- (worker_id), both set by the claim. A history row is written only when an attempt ends other
-- than by completing (retry, failure, lease expiry, cancellation, release), by the statement that
-- ends it, so the drain (claim + complete) writes no row of its own. GET /jobs/{id}/attempts
-- answers the history rows and, for a running or completed job, the row's own attempt.
ALTER TABLE queueflow.jobs
    ADD COLUMN attempt_started_at timestamptz,
    ADD COLUMN worker_id text,
    ADD COLUMN progress jsonb;

CREATE TABLE queueflow.job_attempts (
    job_id        uuid        NOT NULL REFERENCES queueflow.jobs (id) ON DELETE CASCADE,
    attempt       integer     NOT NULL,
    worker_id     text,
    started_at    timestamptz,
    ended_at      timestamptz NOT NULL DEFAULT now(),
    outcome       text        NOT NULL
                  CHECK (outcome IN ('failed', 'retry', 'lease_expired', 'cancelled', 'released')),
    error_message text,
    PRIMARY KEY (job_id, attempt)
);

-- Job logs: lines a worker posts while it holds the lease, numbered per job (seq from 1). The
-- per-job state row holds the next number, the bytes kept and the lines dropped past the cap; the
-- append statement updates it with ON CONFLICT, which also serialises two appends to one job.
-- Both go with their job: the state row by its foreign key (whose check, once per append, also
-- keeps an append from outliving a job deleted under it), the lines by the retention statement
-- that deletes the job (prune_jobs; no foreign key, so an append of 100 lines makes no 100 checks).
CREATE TABLE queueflow.job_log_state (
    job_id     uuid   PRIMARY KEY REFERENCES queueflow.jobs (id) ON DELETE CASCADE,
    last_seq   bigint NOT NULL DEFAULT 0,
    bytes      bigint NOT NULL DEFAULT 0,
    dropped    bigint NOT NULL DEFAULT 0,
    -- The values before the latest append (an UPDATE's RETURNING sees only the new ones).
    prev_seq   bigint NOT NULL DEFAULT 0,
    prev_bytes bigint NOT NULL DEFAULT 0,
    prev_dropped bigint NOT NULL DEFAULT 0
);

CREATE TABLE queueflow.job_logs (
    job_id  uuid        NOT NULL,
    seq     bigint      NOT NULL,
    attempt integer     NOT NULL,
    ts      timestamptz NOT NULL,
    level   text,
    message text        NOT NULL,
    PRIMARY KEY (job_id, seq)
);

-- Workers that name themselves on lease (worker_id): one row per tenant they served. A worker key's
-- worker is its tenant's; a worker-token worker gets a row per tenant whose jobs it leased, and
-- one under tenant_key '' (seen by no tenant) that every one of its lease calls refreshes.
CREATE TABLE queueflow.workers (
    tenant_key    text        NOT NULL,
    worker_id     text        NOT NULL,
    queues        text[]      NOT NULL DEFAULT '{}',
    info          jsonb,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_key, worker_id)
);
CREATE INDEX workers_last_seen_idx ON queueflow.workers (last_seen_at);

-- The limited claim also records the attempt's start and its worker ($8): redefined with that
-- parameter (otherwise as migration 12 wrote it).
DROP FUNCTION queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text);

CREATE FUNCTION queueflow.claim_limited(queue text, max_jobs integer, lease_secs integer, grace integer,
                                        rotation bigint, claim uuid, only_tenant text, worker text)
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
END $fn$;
