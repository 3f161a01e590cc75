-- QueueFlow schema, version 24: what a limited claim spends reading the release rows (version 12)
-- no longer grows with the releases other keys have waiting to be folded.
--
-- The limited claim (queueflow.claim_limited) read them twice. It counted every key's waiting
-- releases, grouped, to judge its window, and its fold deleted its locked keys' releases through a
-- hash join. Both read the whole table. The function's plans are generic and made once per
-- session. A session that first claimed while the table was small (every server at start) keeps
-- those sequential scans for good. A claim of 80 limited jobs took 11 ms with no release waiting,
-- 18 ms with 1,000, 52 ms with 10,000 and 62 ms with 50,000 of other keys (ADR 0022). A slower
-- claim folds less often, so releases pile up faster.
--
-- Both reads now go through two small PL/pgSQL functions, each called once a claim with the
-- claim's keys. They look at how many releases wait each time: up to a thousand are read at once,
-- more are probed key by key through the index, whatever the table's size was when the plans were
-- made (sequential scans are off in them). queueflow.limit_room (the key-by-key visit, version 22)
-- plans with sequential scans off too. claim_limited is patched, not restated, as version 20
-- patched it; the patch fails loudly should the text it replaces not be there.

-- Whether fewer than a thousand releases wait: then the functions below read them all at once
-- (a claim's window may name hundreds of keys, and a probe a key would cost more than that read);
-- otherwise they probe the index key by key.
CREATE FUNCTION queueflow.few_releases_waiting() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT count(*) < 1000 FROM (SELECT 1 FROM queueflow.limit_releases LIMIT 1000) AS waiting
$$;

-- The releases waiting for each of the given keys (pairs of the two arrays; a pair may repeat).
-- With many waiting, one index probe a key (OFFSET 0 keeps each probe a per-key subquery, which
-- no plan can turn into a read of the whole table).
CREATE FUNCTION queueflow.pending_releases(tenant_keys text[], keys text[])
RETURNS TABLE (pending_tenant_key text, pending_key text, pending integer)
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
BEGIN
    IF queueflow.few_releases_waiting() THEN
        RETURN QUERY
        SELECT r.tenant_key, r.key, count(*)::integer FROM queueflow.limit_releases r
        GROUP BY r.tenant_key, r.key;
    ELSE
        RETURN QUERY
        SELECT k.tenant_key, k.key, p.n
        FROM (SELECT DISTINCT u.tenant_key, u.key FROM unnest(tenant_keys, keys) AS u(tenant_key, key)) AS k
        CROSS JOIN LATERAL (SELECT count(*)::integer AS n FROM queueflow.limit_releases x
                            WHERE x.tenant_key = k.tenant_key AND x.key = k.key OFFSET 0) AS p;
    END IF;
END
$$;

-- The releases of the given keys (pairs of the two arrays), deleted: one row per release. With
-- many waiting, each key is one probe of the index and the rows found are deleted by their place.
CREATE FUNCTION queueflow.take_releases(tenant_keys text[], keys text[])
RETURNS TABLE (released_tenant_key text, released_key text)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
BEGIN
    IF queueflow.few_releases_waiting() THEN
        RETURN QUERY
        DELETE FROM queueflow.limit_releases r USING unnest(tenant_keys, keys) AS k(tenant_key, key)
        WHERE r.tenant_key = k.tenant_key AND r.key = k.key
        RETURNING r.tenant_key, r.key;
    ELSE
        RETURN QUERY
        DELETE FROM queueflow.limit_releases r
        WHERE r.ctid = ANY (ARRAY(
            SELECT p.ctid FROM unnest(tenant_keys, keys) AS k(tenant_key, key)
            CROSS JOIN LATERAL (SELECT x.ctid FROM queueflow.limit_releases x
                                WHERE x.tenant_key = k.tenant_key AND x.key = k.key OFFSET 0) AS p))
        RETURNING r.tenant_key, r.key;
    END IF;
END
$$;

-- The key-by-key visit's count (version 22's limit_room) plans with sequential scans off too.
ALTER FUNCTION queueflow.limit_room(queueflow.limit_state, integer) SET enable_seqscan = off;

DO $migration$
DECLARE
    fn      regprocedure := 'queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)';
    def     text := pg_get_functiondef(fn);
    counted text := E'LEFT JOIN (SELECT r.tenant_key, r.key, count(*)::int AS n FROM queueflow.limit_releases r\n'
                    '                   GROUP BY r.tenant_key, r.key) AS r ON r.tenant_key = s.tenant_key AND r.key = s.key';
    probed  text := E'LEFT JOIN queueflow.pending_releases(\n'
                    '            ARRAY(SELECT p.tenant_key FROM walk_pairs p ORDER BY p.tenant_key, p.key),\n'
                    '            ARRAY(SELECT p.key FROM walk_pairs p ORDER BY p.tenant_key, p.key)) AS r (tenant_key, key, n)\n'
                    '            ON r.tenant_key = s.tenant_key AND r.key = s.key';
    deleted text := E'folded AS (\n'
                    '        DELETE FROM queueflow.limit_releases r USING locked l\n'
                    '        WHERE r.tenant_key = l.tenant_key AND r.key = l.key\n'
                    '        RETURNING r.tenant_key, r.key';
    taken   text := E'folded AS MATERIALIZED (\n'
                    '        SELECT f.released_tenant_key AS tenant_key, f.released_key AS key\n'
                    '        FROM queueflow.take_releases(ARRAY(SELECT l.tenant_key FROM locked l ORDER BY l.tenant_key, l.key),\n'
                    '                                     ARRAY(SELECT l.key FROM locked l ORDER BY l.tenant_key, l.key)) AS f';
BEGIN
    IF (length(def) - length(replace(def, counted, ''))) / length(counted) <> 1
       OR (length(def) - length(replace(def, deleted, ''))) / length(deleted) <> 1 THEN
        RAISE EXCEPTION 'migration 24: queueflow.claim_limited does not read its releases as expected';
    END IF;
    EXECUTE replace(replace(def, counted, probed), deleted, taken);
END $migration$;
