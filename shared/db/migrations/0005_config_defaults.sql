-- QueueFlow schema, version 5: one set of job-config defaults.
--
-- retry_delay_secs fell back to a jitter of 0 for a config without one, while every other place
-- (the API, resolve_job_config, the domain's JobConfig) defaults it to 0.1. Stored configs are
-- always complete, so no delay changes; the fallback now agrees, and tests/db/test_sql_defaults.py
-- checks every fallback in the schema and the named queries against shared/domain/jobs.py.
CREATE OR REPLACE FUNCTION queueflow.retry_delay_secs(config jsonb, attempt integer) RETURNS double precision
LANGUAGE sql VOLATILE AS $$
    WITH c AS (
        SELECT COALESCE((config->>'retry_delay_secs')::double precision, 60) AS base,
               COALESCE((config->>'retry_max_delay_secs')::double precision, 3600) AS cap,
               LEAST(GREATEST(COALESCE((config->>'jitter_factor')::double precision, 0.1), 0), 1) AS jitter,
               COALESCE(config->>'retry_backoff', 'exponential') AS strategy
    ), raw AS (
        SELECT cap, jitter,
               LEAST(cap, CASE strategy
                   WHEN 'fixed' THEN base
                   WHEN 'linear' THEN base * (attempt + 1)
                   ELSE base * power(2::double precision, LEAST(attempt, 62))
               END) AS delay
        FROM c
    )
    SELECT GREATEST(0, LEAST(cap, round(delay * (1 - jitter + 2 * jitter * random()))))
    FROM raw
$$;
