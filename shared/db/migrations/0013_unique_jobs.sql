-- QueueFlow schema, version 13: unique jobs over a window (issue 15).
--
-- A job's config may carry {"unique": {"key": K, "window_secs": W, "on_conflict": "skip" | "replace"}}.
-- The first job accepted with key K (per tenant) holds it for W seconds from its acceptance. Within
-- that window another job with K is not inserted: `skip` answers the holder's id, as an
-- idempotency-key replay does; `replace` gives the holder the newcomer's payload and schedule if the
-- holder has not started, and otherwise inserts the newcomer, which then holds K for a window of its
-- own. After the window K is free again (unlike an idempotency key, which is kept as long as its job).
--
-- Every writer goes through one BEFORE INSERT trigger, so the API's inserts, the workflow of the SQL
-- enqueue functions and any future writer share the rule. Concurrent writers of one key serialize on
-- its row in unique_keys: exactly one of them is accepted.

CREATE TABLE queueflow.unique_keys (
    tenant_key text        NOT NULL,
    key        text        NOT NULL,
    job_id     uuid        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_key, key)
);
-- The janitor's sweep of lapsed keys.
CREATE INDEX unique_keys_expiry_idx ON queueflow.unique_keys (expires_at);

-- The trigger. Returns NEW when the row goes in (the key is free, lapsed, its holder is gone, or a
-- `replace` found the holder started) and NULL when it does not: the caller then reads the holder
-- from unique_keys in the same transaction, whose row this transaction has locked (ON CONFLICT DO
-- UPDATE locks the conflicting row even when its WHERE declines the update), so the answer cannot
-- change before it commits.
CREATE FUNCTION queueflow.take_unique_key() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    policy   jsonb := NEW.config -> 'unique';
    tk       text := COALESCE(NEW.tenant_id, '');
    k        text := policy ->> 'key';
    until    timestamptz := now() + make_interval(secs => (policy ->> 'window_secs')::int);
    holder   uuid;
    replaced uuid;
BEGIN
    INSERT INTO queueflow.unique_keys AS u (tenant_key, key, job_id, expires_at)
    VALUES (tk, k, NEW.id, until)
    ON CONFLICT (tenant_key, key) DO UPDATE SET job_id = EXCLUDED.job_id, expires_at = EXCLUDED.expires_at
        WHERE u.expires_at <= now()
    RETURNING u.job_id INTO holder;
    IF holder IS NOT NULL THEN
        RETURN NEW;  -- the key is this job's for its window
    END IF;
    SELECT u.job_id INTO holder FROM queueflow.unique_keys u WHERE u.tenant_key = tk AND u.key = k;
    -- (A statement of its own, with a snapshot of its own: a holder committed while this insert
    -- waited for the key's row is seen here, where the ON CONFLICT's snapshot would miss it.)
    IF NOT EXISTS (SELECT 1 FROM queueflow.jobs j WHERE j.id = holder) THEN
        -- Its job is gone (deleted by retention inside a long window): the key is free.
        UPDATE queueflow.unique_keys u SET job_id = NEW.id, expires_at = until
        WHERE u.tenant_key = tk AND u.key = k;
        RETURN NEW;
    END IF;
    IF COALESCE(policy ->> 'on_conflict', 'skip') = 'replace' THEN
        UPDATE queueflow.jobs j SET payload = NEW.payload, scheduled_at = NEW.scheduled_at
        WHERE j.id = holder AND j.status = 'pending' AND j.started_at IS NULL
        RETURNING j.id INTO replaced;
        IF replaced IS NULL THEN
            -- The holder has started: this job goes in, and holds the key for its own window.
            UPDATE queueflow.unique_keys u SET job_id = NEW.id, expires_at = until
            WHERE u.tenant_key = tk AND u.key = k;
            RETURN NEW;
        END IF;
        -- Its new schedule may be due sooner than the old one: wake the queue's waiters as an
        -- insert would.
        PERFORM pg_notify(CASE WHEN NEW.scheduled_at <= now() THEN 'queueflow_work' ELSE 'queueflow_delayed' END,
                          NEW.queue_name);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_take_unique_key BEFORE INSERT ON queueflow.jobs
    FOR EACH ROW WHEN (NEW.config ? 'unique') EXECUTE FUNCTION queueflow.take_unique_key();

-- The SQL enqueue functions take `unique` as the API does.
CREATE FUNCTION queueflow.check_unique_policy(config jsonb, context text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    policy  jsonb := config -> 'unique';
    unknown text;
    k       jsonb;
    mode    jsonb;
BEGIN
    IF policy IS NULL OR jsonb_typeof(policy) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(policy) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.unique must be an object {key, window_secs, on_conflict}, not %s',
                             context, policy);
    END IF;
    SELECT string_agg(format('%L', f), ', ' ORDER BY f) INTO unknown
    FROM jsonb_object_keys(policy) AS f WHERE f NOT IN ('key', 'window_secs', 'on_conflict');
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: unknown config.unique field %s', context, unknown);
    END IF;
    k := policy -> 'key';
    IF k IS NULL OR jsonb_typeof(k) <> 'string' OR octet_length(k #>> '{}') NOT BETWEEN 1 AND 255
       OR (k #>> '{}') ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.unique.key must be a string of 1 to 255 bytes with no control '
                             'characters, not %s', context, COALESCE(k::text, 'nothing'));
    END IF;
    IF NOT policy ? 'window_secs' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.unique.window_secs is required', context);
    END IF;
    mode := COALESCE(NULLIF(policy -> 'on_conflict', 'null'::jsonb), '"skip"'::jsonb);
    IF jsonb_typeof(mode) <> 'string' OR mode #>> '{}' NOT IN ('skip', 'replace') THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.unique.on_conflict must be "skip" or "replace", not %s', context, mode);
    END IF;
    RETURN jsonb_build_object(
        'key', k,
        'window_secs', queueflow.config_integer(policy, 'window_secs', 1, 31536000, 0, context || ': config.unique'),
        'on_conflict', mode);
END $$;

ALTER FUNCTION queueflow.resolve_job_config(jsonb, text) RENAME TO resolve_job_config_v12;

CREATE FUNCTION queueflow.resolve_job_config(config jsonb, context text DEFAULT 'queueflow')
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    given    jsonb := CASE WHEN config IS NULL OR jsonb_typeof(config) <> 'object' THEN config
                           ELSE config - 'unique' END;
    policy   jsonb := CASE WHEN jsonb_typeof(config) = 'object' THEN queueflow.check_unique_policy(config, context) END;
    resolved jsonb := queueflow.resolve_job_config_v12(given, context);
BEGIN
    RETURN CASE WHEN policy IS NULL THEN resolved ELSE resolved || jsonb_build_object('unique', policy) END;
END $$;

-- enqueue_job as in version 4, answering a job that a unique key kept out with the key's holder.
CREATE OR REPLACE FUNCTION queueflow.enqueue_job(tenant text, task_name text, payload jsonb, queue text, config jsonb,
                                                 run_at timestamptz, idempotency_key text, metadata jsonb, context text)
RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    body     jsonb := COALESCE(NULLIF(enqueue_job.payload, 'null'::jsonb), '{}'::jsonb);
    meta     jsonb := COALESCE(NULLIF(enqueue_job.metadata, 'null'::jsonb), '{}'::jsonb);
    q        text  := COALESCE(enqueue_job.queue, 'default');
    key      text  := NULLIF(btrim(enqueue_job.idempotency_key), '');
    resolved jsonb;
    job_id   uuid;
BEGIN
    IF enqueue_job.tenant IS NULL OR btrim(enqueue_job.tenant) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: tenant is required', context);
    END IF;
    IF enqueue_job.task_name IS NULL OR btrim(enqueue_job.task_name) = '' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: task_name is required', context);
    END IF;
    IF jsonb_typeof(body) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: payload must be a JSON object, not %s', context, jsonb_typeof(body));
    END IF;
    IF jsonb_typeof(meta) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: metadata must be a JSON object, not %s', context, jsonb_typeof(meta));
    END IF;
    IF btrim(q) = '' OR length(q) > 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: queue must be 1 to 255 characters, not %L', context, q);
    END IF;
    IF length(key) > 255 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: idempotency_key is longer than 255 characters', context);
    END IF;
    resolved := queueflow.resolve_job_config(enqueue_job.config, context);

    INSERT INTO queueflow.jobs AS j
        (id, queue_name, task_name, payload, config, priority, scheduled_at, metadata, tenant_id, idempotency_key)
    VALUES (gen_random_uuid(), q, enqueue_job.task_name, body, resolved, (resolved ->> 'priority')::integer,
            COALESCE(enqueue_job.run_at, now()), meta, enqueue_job.tenant, key)
    ON CONFLICT (COALESCE(tenant_id, ''), idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING j.id INTO job_id;
    IF job_id IS NOT NULL THEN
        RETURN job_id;
    END IF;
    -- The tenant used this idempotency key before: the original job's id, and nothing inserted.
    IF key IS NOT NULL THEN
        SELECT j.id INTO job_id FROM queueflow.jobs AS j
        WHERE COALESCE(j.tenant_id, '') = enqueue_job.tenant AND j.idempotency_key = key;
    END IF;
    -- A live unique key kept it out (skip, or a replace of a holder that had not started).
    IF job_id IS NULL AND resolved ? 'unique' THEN
        SELECT u.job_id INTO job_id FROM queueflow.unique_keys AS u
        WHERE u.tenant_key = enqueue_job.tenant AND u.key = resolved -> 'unique' ->> 'key';
    END IF;
    IF job_id IS NULL THEN
        -- Committed by a concurrent transaction this snapshot cannot see (REPEATABLE READ or above).
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = format('%s: idempotency key %L was just used by a concurrent transaction; retry', context, key);
    END IF;
    RETURN job_id;
END $$;
