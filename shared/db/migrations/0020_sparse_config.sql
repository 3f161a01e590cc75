-- QueueFlow schema, version 20: a job row may store only the config fields that differ from the
-- defaults (ADR 0016; the server's insert writes `{"timeout_secs": 300}` for a job that gives no
-- policy, and a row written another way may leave even that out).
--
-- Every reader of the column falls back to the defaults but one: the claim's lease length,
-- `COALESCE((j.config->>'timeout_secs')::int + $4::int, 0)`, fell back to no timeout at all: a job
-- stored without `timeout_secs` was leased for `--lease-secs` alone, and an in-process handler
-- running longer was reclaimed while it ran (the worker relies on the claim's lease). The
-- named claim statement (claim_jobs) is fixed in shared/db/queries/jobs.sql; the limited claim's
-- function (version 17) takes the same one-expression fix here, patched into its definition rather
-- than restated in full. The patch fails loudly should the expression not be there.
DO $migration$
DECLARE
    fn     regprocedure := 'queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)';
    before text := 'COALESCE((j.config->>''timeout_secs'')::int + $4::int, 0)';
    after  text := 'COALESCE(COALESCE((j.config->>''timeout_secs'')::int, 300) + $4::int, 0)';
    def    text := pg_get_functiondef(fn);
BEGIN
    IF (length(def) - length(replace(def, before, ''))) / length(before) <> 1 THEN
        RAISE EXCEPTION 'migration 20: queueflow.claim_limited does not compute its lease as expected';
    END IF;
    EXECUTE replace(def, before, after);
END $migration$;
