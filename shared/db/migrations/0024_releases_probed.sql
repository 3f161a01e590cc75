-- QueueFlow schema, version 24: a limited claim reads the release rows (version 12) of its own keys
-- only, through their index, however many other keys have releases waiting to be folded.
--
-- The limited claim (queueflow.claim_limited) read them twice. It counted every key's waiting
-- releases, grouped, to judge its window, and its fold deleted its locked keys' releases through a
-- hash join. Both read the whole table. The function's plans are generic and made once per
-- session. A session that first claimed while the table was small (every server at start) keeps
-- those sequential scans for good. A claim of 80 limited jobs took 11 ms with no release waiting,
-- 18 ms with 1,000 (the 1,000-key benchmark's level), 52 ms with 10,000 and 62 ms with 50,000 of
-- other keys (docs/benchmarks.md, "Speed work, ninth round"). A slower claim folds less often,
-- so releases pile up faster.
--
-- Both reads now go through two small PL/pgSQL functions that plan with sequential scans off and
-- probe the index key by key, whatever the table's size when they are planned. queueflow.limit_room (the key-by-key visit, version 22) counts through the
-- same function. claim_limited is patched, not restated, as version 20 patched it; the patch fails
-- loudly should the text it replaces not be there.

CREATE FUNCTION queueflow.pending_releases(tenant_key text, key text) RETURNS integer
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
BEGIN
    RETURN (SELECT count(*)::integer FROM queueflow.limit_releases r
            WHERE r.tenant_key = pending_releases.tenant_key AND r.key = pending_releases.key);
END
$$;

-- The releases of the given keys (pairs of the two arrays), deleted: one row per release. Each key
-- is one probe of the releases' index (OFFSET 0 keeps the probe a per-key subquery, which no plan
-- can turn into a walk of the whole index), and the rows found are deleted by their place.
CREATE FUNCTION queueflow.take_releases(tenant_keys text[], keys text[])
RETURNS TABLE (released_tenant_key text, released_key text)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off AS $$
BEGIN
    RETURN QUERY
    DELETE FROM queueflow.limit_releases r
    WHERE r.ctid = ANY (ARRAY(
        SELECT p.ctid FROM unnest(tenant_keys, keys) AS k(tenant_key, key)
        CROSS JOIN LATERAL (SELECT x.ctid FROM queueflow.limit_releases x
                            WHERE x.tenant_key = k.tenant_key AND x.key = k.key OFFSET 0) AS p))
    RETURNING r.tenant_key, r.key;
END
$$;

CREATE OR REPLACE FUNCTION queueflow.limit_room(s queueflow.limit_state, big integer) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN LEAST(
        CASE WHEN s.concurrency IS NULL THEN big
             ELSE s.concurrency - s.running + queueflow.pending_releases(s.tenant_key, s.key) END,
        CASE WHEN s.rate_count IS NULL THEN big
             ELSE (SELECT w.room FROM queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start,
                                                            s.rate_prev, s.rate_cur, now()) w) END);
END
$$;

DO $migration$
DECLARE
    fn      regprocedure := 'queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)';
    def     text := pg_get_functiondef(fn);
    counted text := E'LEFT JOIN (SELECT r.tenant_key, r.key, count(*)::int AS n FROM queueflow.limit_releases r\n'
                    '                   GROUP BY r.tenant_key, r.key) AS r ON r.tenant_key = s.tenant_key AND r.key = s.key';
    probed  text := 'CROSS JOIN LATERAL (SELECT queueflow.pending_releases(s.tenant_key, s.key) AS n) AS r';
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
