-- QueueFlow schema, version 5: one set of job-config defaults.
--
-- The function queueflow.retry_delay_secs used a jitter of 0 for a config without a
-- jitter_factor, while the API, queueflow.resolve_job_config and the domain's JobConfig default
-- it to 0.1. Stored configs are always complete, so no delay changes; the fallback now agrees.
-- tests/db/test_sql_defaults.py checks every config fallback in the schema and the named queries
-- against shared/domain/jobs.py. The arithmetic is unchanged: a base delay by strategy, capped,
-- jittered, and capped again so jitter never passes the cap.
CREATE OR REPLACE FUNCTION queueflow.retry_delay_secs(config jsonb, attempt integer) RETURNS double precision
LANGUAGE sql VOLATILE AS $$
    SELECT GREATEST(0, LEAST(c.cap, round(
               LEAST(c.cap, c.base * CASE c.strategy
                                         WHEN 'fixed' THEN 1
                                         WHEN 'linear' THEN attempt + 1
                                         ELSE power(2::double precision, LEAST(attempt, 62)) END)
               * (1 - c.jitter + 2 * c.jitter * random()))))
    FROM (VALUES (COALESCE((config->>'retry_delay_secs')::double precision, 60),
                  COALESCE((config->>'retry_max_delay_secs')::double precision, 3600),
                  LEAST(GREATEST(COALESCE((config->>'jitter_factor')::double precision, 0.1), 0), 1),
                  COALESCE(config->>'retry_backoff', 'exponential')))
         AS c(base, cap, jitter, strategy)
$$;
