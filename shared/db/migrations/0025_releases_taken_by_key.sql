-- QueueFlow schema, version 25: a limited claim takes its keys' releases key by key, however few
-- wait.
--
-- Version 24's queueflow.take_releases deleted them at once when fewer than a thousand waited:
-- `DELETE ... USING unnest(tenant_keys, keys)`. Its plan is generic, made when the table is small
-- (every server's first claim), where a nested loop that reads every waiting release and the key
-- list again for each of them costs nothing. With a few hundred waiting, the usual state under a
-- many-key drain, that loop was most of the claim: 10.4 of a 16 ms claim of 80 jobs with 600
-- releases waiting, against 5 ms for the same claim with over a thousand waiting, when the
-- key-by-key probe ran (ADR 0022). The probe is now the only
-- way: one index probe a key of the claim, its rows deleted by their place. Counting the waiting
-- releases stays with queueflow.pending_releases, which reads them all at once when few wait (a
-- window names up to a batch and 32 more keys per tenant, so that read is worth it there).
CREATE OR REPLACE FUNCTION queueflow.take_releases(tenant_keys text[], keys text[])
RETURNS TABLE (released_tenant_key text, released_key text)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
BEGIN
    -- (OFFSET 0 keeps each probe a per-key subquery, which no plan can turn into a read of the
    -- whole table.)
    RETURN QUERY
    DELETE FROM queueflow.limit_releases r
    WHERE r.ctid = ANY (ARRAY(
        SELECT p.ctid FROM unnest(tenant_keys, keys) AS k(tenant_key, key)
        CROSS JOIN LATERAL (SELECT x.ctid FROM queueflow.limit_releases x
                            WHERE x.tenant_key = k.tenant_key AND x.key = k.key OFFSET 0) AS p))
    RETURNING r.tenant_key, r.key;
END
$$;
