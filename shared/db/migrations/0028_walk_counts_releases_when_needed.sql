-- QueueFlow schema, version 28: a limited claim's window counts a key's waiting releases only when
-- the key's recorded running count leaves it too little room.
--
-- The window (`walk_room`, version 24) added every walked key's waiting releases to its room, and
-- read them through `pending_releases`: below 1,000 waiting, all of them, grouped by key. In a
-- drain over many keys that read was about 0.9 ms of a 3.9 ms claim of 50 (`auto_explain`,
-- ADR 0022), and it was almost always unneeded: a release
-- only adds room, so a key whose recorded room already covers every walked job of it gets the same
-- verdict without them. The releases of the other keys are now counted one key at a time, by their
-- index. The room is only compared with the walked jobs' ranks and with zero, and both comparisons
-- come out as before. Nothing else called `pending_releases` (or its `few_releases_waiting`): both
-- are dropped.
-- Migrations from this one on change a function by editing its definition: each edit must match
-- its text exactly once, or the migration stops (a definition that is not what the edit was
-- written against is never changed half-way).
CREATE FUNCTION queueflow.edit_function(fn regprocedure, edits text[], migration text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    def text := pg_get_functiondef(fn);
    i   int;
BEGIN
    FOR i IN 1 .. array_length(edits, 1) LOOP
        IF (length(def) - length(replace(def, edits[i][1], ''))) / length(edits[i][1]) <> 1 THEN
            RAISE EXCEPTION '%: % does not read as expected (edit %)', migration, fn, i;
        END IF;
        def := replace(def, edits[i][1], edits[i][2]);
    END LOOP;
    EXECUTE def;
END $fn$;

SELECT queueflow.edit_function(
    'queueflow.claim_limited(text, integer, integer, integer, bigint, uuid, text, text)',
    ARRAY[ARRAY[
        -- the window's rooms, with every walked key's releases
        E'    ), walk_room AS MATERIALIZED (\n'
        '        SELECT s.tenant_key, s.key,\n'
        '               LEAST(CASE WHEN s.concurrency IS NULL THEN $2\n'
        '                          ELSE s.concurrency - s.running + COALESCE(r.n, 0) END,\n'
        '                     CASE WHEN s.rate_count IS NULL THEN $2\n'
        '                          ELSE (SELECT w.room FROM queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start,\n'
        '                                                                         s.rate_prev, s.rate_cur, now()) w) END) AS room\n'
        '        FROM (SELECT DISTINCT tenant_key, key FROM walk_pairs) AS k\n'
        '        JOIN queueflow.limit_state s ON s.tenant_key = k.tenant_key AND s.key = k.key\n'
        '        LEFT JOIN queueflow.pending_releases(\n'
        '            ARRAY(SELECT p.tenant_key FROM walk_pairs p ORDER BY p.tenant_key, p.key),\n'
        '            ARRAY(SELECT p.key FROM walk_pairs p ORDER BY p.tenant_key, p.key)) AS r (tenant_key, key, n)\n'
        '            ON r.tenant_key = s.tenant_key AND r.key = s.key\n',
        -- ... with a key's releases only when its recorded room is short
        E'    ), walk_room AS MATERIALIZED (\n'
        '        -- Each walked key\'s room, compared below only with its walked jobs\' ranks and with zero: its\n'
        '        -- waiting releases (which only add room) are counted when its recorded room is short of them.\n'
        '        SELECT s.tenant_key, s.key,\n'
        '               LEAST(CASE WHEN s.concurrency IS NULL THEN $2\n'
        '                          WHEN s.concurrency - s.running >= k.walked THEN s.concurrency - s.running\n'
        '                          ELSE s.concurrency - s.running\n'
        '                               + (SELECT count(*)::integer FROM queueflow.limit_releases r\n'
        '                                  WHERE r.tenant_key = s.tenant_key AND r.key = s.key) END,\n'
        '                     CASE WHEN s.rate_count IS NULL THEN $2\n'
        '                          ELSE (SELECT w.room FROM queueflow.rate_window(s.rate_count, s.rate_per_secs, s.rate_start,\n'
        '                                                                         s.rate_prev, s.rate_cur, now()) w) END) AS room\n'
        '        FROM (SELECT tenant_key, key, max(rank) AS walked FROM walk_pairs GROUP BY tenant_key, key) AS k\n'
        '        JOIN queueflow.limit_state s ON s.tenant_key = k.tenant_key AND s.key = k.key\n']],
    'migration 28');

DROP FUNCTION queueflow.pending_releases(text[], text[]);
DROP FUNCTION queueflow.few_releases_waiting();
