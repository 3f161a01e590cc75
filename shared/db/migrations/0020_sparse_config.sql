-- QueueFlow schema, version 20: a job row may store only the config fields that differ from the
-- defaults (ADR 0016; the server's insert now writes `{}` for a job that gives no policy).
--
-- Every reader of the column falls back to the defaults but one: the claim's lease length,
-- `COALESCE((j.config->>'timeout_secs')::int + $4::int, 0)`, fell back to no timeout at all, which
-- a stored config without `timeout_secs` would turn into a lease that has already run out. The
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
