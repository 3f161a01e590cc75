-- QueueFlow schema, version 6: queue names are 1 to 128 bytes with no whitespace and no control
-- characters, wherever a queue is named (shared/domain/jobs.py check_queue_name holds the same rule
-- for the API). This statement-level check covers every writer of jobs, the SQL enqueue functions
-- included; it looks at new rows only, so existing jobs keep working whatever their queue's name.
CREATE FUNCTION queueflow.check_inserted_queue_names() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad text;
BEGIN
    SELECT queue_name INTO bad FROM inserted
    WHERE octet_length(queue_name) NOT BETWEEN 1 AND 128 OR queue_name ~ '[[:space:][:cntrl:]]'
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('queue name must be 1 to 128 bytes with no whitespace or control characters, not %L', bad);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_check_queue_names AFTER INSERT ON queueflow.jobs
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION queueflow.check_inserted_queue_names();
