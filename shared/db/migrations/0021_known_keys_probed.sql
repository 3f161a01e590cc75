-- QueueFlow schema, version 21: the insert trigger finds the limit keys it has no state row for
-- by one probe of limit_state's primary key per key the statement names.
--
-- Version 12 wrote it as `WHERE NOT EXISTS (...)` over the distinct keys, which the planner joined
-- to the whole of limit_state (read and sorted, then merged): a cost that grew with every key ever
-- named. With 100,000 known keys a 1,000-job insert over 1,000 keys took 27 ms instead of 15
-- (ADR 0022). Only that statement changes.
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
    -- The state rows of keys not seen before, created in key order (two concurrent inserts of the
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
    PERFORM pg_notify(CASE WHEN due THEN 'queueflow_work' ELSE 'queueflow_delayed' END, queue_name)
    FROM (SELECT DISTINCT queue_name, scheduled_at <= now() AS due
          FROM inserted WHERE status = 'pending') AS q;
    RETURN NULL;
END $$;
