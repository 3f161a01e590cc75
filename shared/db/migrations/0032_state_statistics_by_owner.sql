-- QueueFlow schema, version 32: a claim refreshes the state table's statistics (version 30) only
-- when its role may: servers that run as a role which does not own the tables (the migrations run
-- as another, docs/deployment.md) got a warning from every claim that made a row while the
-- statistics counted fewer than 100, and no refresh. There autovacuum's analyses (which run as
-- the owner) replace the plans of a young database, as they did before version 30.
SELECT queueflow.edit_function(
    'queueflow.make_limit_state(text, text[], text[])',
    ARRAY[ARRAY[
$old$    IF made > 0 AND (SELECT c.reltuples FROM pg_class c WHERE c.oid = 'queueflow.limit_state'::regclass) < 100 THEN
$old$,
$new$    IF made > 0 AND (SELECT c.reltuples < 100 AND pg_has_role(c.relowner, 'USAGE') FROM pg_class c
                     WHERE c.oid = 'queueflow.limit_state'::regclass) THEN
$new$]],
    '0032');
