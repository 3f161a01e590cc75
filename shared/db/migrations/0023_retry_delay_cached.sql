-- QueueFlow schema, version 23: queueflow.retry_delay_secs, unchanged in what it answers (version
-- 5's arithmetic and defaults), becomes a PL/pgSQL function, for the reason version 22 gives for
-- limit_room.
--
-- As a SQL function reading FROM a VALUES list it cannot be inlined, so PostgreSQL planned its body
-- again in every statement that retries a job (a failure through the retry policy, the janitor's
-- reclaim of an expired lease): one retryable failure took 0.41-0.42 ms against 0.32-0.33 as
-- PL/pgSQL, whose plans last the session (ADR 0022).
CREATE OR REPLACE FUNCTION queueflow.retry_delay_secs(config jsonb, attempt integer) RETURNS double precision
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    base     double precision := COALESCE((config->>'retry_delay_secs')::double precision, 60);
    cap      double precision := COALESCE((config->>'retry_max_delay_secs')::double precision, 3600);
    jitter   double precision :=
        LEAST(GREATEST(COALESCE((config->>'jitter_factor')::double precision, 0.1), 0), 1);
    strategy text := COALESCE(config->>'retry_backoff', 'exponential');
BEGIN
    RETURN GREATEST(0, LEAST(cap, round(
               LEAST(cap, base * CASE strategy
                                     WHEN 'fixed' THEN 1
                                     WHEN 'linear' THEN attempt + 1
                                     ELSE power(2::double precision, LEAST(attempt, 62)) END)
               * (1 - jitter + 2 * jitter * random()))));
END
$$;
