-- QueueFlow schema, version 4: transactional enqueue from SQL.
--
--   SELECT queueflow.enqueue('acme', 'send-receipt', jsonb_build_object('order_id', 42));
--   SELECT * FROM queueflow.enqueue_batch('acme', '[{"task_name": "a"}, {"task_name": "b"}]');
--
-- Both insert into queueflow.jobs exactly as POST /api/v1/jobs and /jobs/batch do: a complete
-- config (defaults merged under the given partial config, stored field names), the API's bounds,
-- per-tenant idempotency. The insert trigger's NOTIFY is delivered at COMMIT, so a job exists,
-- and wakes workers, if and only if the caller's transaction commits. docs/enqueue.md has more.

-- A complete stored config from a partial one; anything out of bounds raises 22023
-- (invalid_parameter_value) with a message prefixed by `context`.
CREATE FUNCTION queueflow.resolve_job_config(config jsonb, context text DEFAULT 'queueflow')
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    given   jsonb := CASE WHEN config IS NULL OR jsonb_typeof(config) = 'null' THEN '{}'::jsonb ELSE config END;
    unknown text;
    backoff jsonb;
    jitter  jsonb;
BEGIN
    IF jsonb_typeof(given) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config must be a JSON object, not %s', context, jsonb_typeof(given));
    END IF;
    SELECT string_agg(format('%L', k), ', ' ORDER BY k) INTO unknown
    FROM jsonb_object_keys(given) AS k
    WHERE k NOT IN ('priority', 'max_retries', 'timeout_secs', 'retry_backoff', 'retry_delay_secs',
                    'retry_max_delay_secs', 'jitter_factor');
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: unknown config field %s', context, unknown),
            HINT = 'config takes the stored field names: priority, max_retries, timeout_secs, retry_backoff, '
                   'retry_delay_secs, retry_max_delay_secs, jitter_factor';
    END IF;
    backoff := given -> 'retry_backoff';
    IF backoff IS NOT NULL AND jsonb_typeof(backoff) <> 'null'
       AND (jsonb_typeof(backoff) <> 'string' OR backoff #>> '{}' NOT IN ('fixed', 'linear', 'exponential')) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.retry_backoff must be "fixed", "linear" or "exponential", not %s',
                             context, backoff);
    END IF;
    jitter := given -> 'jitter_factor';
    IF jitter IS NOT NULL AND jsonb_typeof(jitter) <> 'null'
       AND (jsonb_typeof(jitter) <> 'number' OR jitter::numeric < 0 OR jitter::numeric > 1) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.jitter_factor must be a number from 0 to 1, not %s', context, jitter);
    END IF;
    RETURN jsonb_build_object(
        'priority', queueflow.config_integer(given, 'priority', -2147483648, 2147483647, 0, context),
        'max_retries', queueflow.config_integer(given, 'max_retries', 0, 1000, 3, context),
        'timeout_secs', queueflow.config_integer(given, 'timeout_secs', 1, 86400, 300, context),
        'retry_backoff', COALESCE(NULLIF(backoff, 'null'::jsonb), '"exponential"'::jsonb),
        'retry_delay_secs', queueflow.config_integer(given, 'retry_delay_secs', 0, 2592000, 60, context),
        'retry_max_delay_secs', queueflow.config_integer(given, 'retry_max_delay_secs', 0, 2592000, 3600, context),
        'jitter_factor', COALESCE(NULLIF(jitter, 'null'::jsonb), '0.1'::jsonb));
END $$;

-- One integer field of a config: absent or null takes `fallback`; otherwise a whole number in
-- [lo, hi] (3 and 3.0 both store as 3).
CREATE FUNCTION queueflow.config_integer(config jsonb, field text, lo bigint, hi bigint, fallback integer,
                                         context text) RETURNS integer LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v jsonb := config -> field;
BEGIN
    IF v IS NULL OR jsonb_typeof(v) = 'null' THEN
        RETURN fallback;
    END IF;
    IF jsonb_typeof(v) <> 'number' OR v::numeric <> trunc(v::numeric) OR v::numeric < lo OR v::numeric > hi THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: config.%s must be an integer from %s to %s, not %s', context, field, lo, hi, v);
    END IF;
    RETURN v::numeric::integer;
END $$;

-- The insert behind both public functions; `context` prefixes every error message.
CREATE FUNCTION queueflow.enqueue_job(tenant text, task_name text, payload jsonb, queue text, config jsonb,
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
    -- The tenant used this key before: the original job's id, and nothing inserted.
    SELECT j.id INTO job_id FROM queueflow.jobs AS j
    WHERE COALESCE(j.tenant_id, '') = enqueue_job.tenant AND j.idempotency_key = key;
    IF job_id IS NULL THEN
        -- Committed by a concurrent transaction this snapshot cannot see (REPEATABLE READ or above).
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = format('%s: idempotency key %L was just used by a concurrent transaction; retry', context, key);
    END IF;
    RETURN job_id;
END $$;

-- One job. Returns its id, or the id of the tenant's job that already used `idempotency_key`.
CREATE FUNCTION queueflow.enqueue(tenant text, task_name text, payload jsonb DEFAULT '{}',
                                  queue text DEFAULT 'default', config jsonb DEFAULT NULL,
                                  run_at timestamptz DEFAULT NULL, idempotency_key text DEFAULT NULL,
                                  metadata jsonb DEFAULT '{}')
RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT queueflow.enqueue_job(tenant, task_name, payload, queue, config, run_at, idempotency_key, metadata,
                                 'queueflow.enqueue')
$$;

-- An RFC 3339 instant from a batch item; one without an offset is UTC, as in the API.
CREATE FUNCTION queueflow.parse_run_at(raw jsonb, context text) RETURNS timestamptz
LANGUAGE plpgsql STABLE AS $$
DECLARE
    txt text;
BEGIN
    IF raw IS NULL OR jsonb_typeof(raw) = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(raw) <> 'string' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: run_at must be an RFC 3339 string, not %s', context, raw);
    END IF;
    txt := raw #>> '{}';
    BEGIN
        IF txt ~* '[t ]\d\d:\d\d(:\d\d(\.\d+)?)?\s*(z|[+-]\d\d(:?\d\d)?)$' THEN
            RETURN txt::timestamptz;
        END IF;
        RETURN txt::timestamp AT TIME ZONE 'UTC';
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('%s: run_at is not an RFC 3339 instant: %L', context, txt);
    END;
END $$;

-- Many jobs, one id per element of `jobs` in order (a repeated idempotency key, even within the
-- batch, yields the first job's id). Elements: {task_name, payload, queue, config, run_at,
-- idempotency_key, metadata}; all but task_name optional. Any invalid element fails the call.
CREATE FUNCTION queueflow.enqueue_batch(tenant text, jobs jsonb) RETURNS SETOF uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    item    jsonb;
    pos     bigint;
    context text;
    unknown text;
    field   text;
BEGIN
    IF jobs IS NULL OR jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('queueflow.enqueue_batch: jobs must be a JSON array of job objects, not %s',
                             COALESCE(jsonb_typeof(jobs), 'NULL'));
    END IF;
    FOR item, pos IN SELECT e, o - 1 FROM jsonb_array_elements(jobs) WITH ORDINALITY AS t(e, o) LOOP
        context := format('queueflow.enqueue_batch: jobs[%s]', pos);
        IF jsonb_typeof(item) <> 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = format('%s: must be a JSON object, not %s', context, jsonb_typeof(item));
        END IF;
        SELECT string_agg(format('%L', k), ', ' ORDER BY k) INTO unknown
        FROM jsonb_object_keys(item) AS k
        WHERE k NOT IN ('task_name', 'payload', 'queue', 'config', 'run_at', 'idempotency_key', 'metadata');
        IF unknown IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = format('%s: unknown field %s', context, unknown);
        END IF;
        FOREACH field IN ARRAY ARRAY['task_name', 'queue', 'idempotency_key'] LOOP
            IF item ? field AND jsonb_typeof(item -> field) NOT IN ('string', 'null') THEN
                RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                    MESSAGE = format('%s: %s must be a string, not %s', context, field, item -> field);
            END IF;
        END LOOP;
        RETURN NEXT queueflow.enqueue_job(tenant, item ->> 'task_name', item -> 'payload', item ->> 'queue',
                                          item -> 'config', queueflow.parse_run_at(item -> 'run_at', context),
                                          item ->> 'idempotency_key', item -> 'metadata', context);
    END LOOP;
    RETURN;
END $$;
