-- QueueFlow schema, version 35: a cap on the distinct queues of each tenant (issue 37).
--
-- A write key enqueueing on a new queue name each time grew tenant_queues, and every process's
-- per-queue state with it, without end. Now:
--
-- * queueflow.queue_cap holds the cap, one row: how many tenant_queues rows a tenant key may have
--   (0: no cap). Every api process records its --max-queues-per-tenant there at start; until one
--   does, 1,000.
-- * queueflow.tenant_queue_totals counts each tenant key's rows, kept by a row trigger on
--   tenant_queues. An insert whose queues its tenant has used before adds no row, so it fires
--   nothing and costs nothing more; only a queue new to its tenant pays one upsert of the total.
--   A row past the cap fails the statement with SQLSTATE QFQ01 (the api answers 409), whatever
--   wrote it: a job of any path (REST, batch COPY, workflow steps, cron firings, the SQL enqueue
--   functions) or a pause. A tenant already past the cap (it was lowered) keeps its queues.
-- * The total's row lock orders the writers that grow one tenant at once: the second waits for
--   the first to commit and then counts its rows too, so the cap is exact under READ COMMITTED
--   (and a REPEATABLE READ writer racing another gets a serialization failure, not an overshoot).
-- * queueflow.check_queue_room(tenant, names) raises the same error when the names new to the
--   tenant would take it past the cap: a cron schedule or a workflow is refused when it is made,
--   not when it first runs.
CREATE TABLE queueflow.queue_cap (
    only_row              boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    max_queues_per_tenant integer NOT NULL DEFAULT 1000 CHECK (max_queues_per_tenant >= 0)
);
INSERT INTO queueflow.queue_cap DEFAULT VALUES;

CREATE TABLE queueflow.tenant_queue_totals (
    tenant_key text    PRIMARY KEY,
    queues     integer NOT NULL
);

-- No row may come or go between the count and the trigger (a server of the previous version may
-- be writing during a rolling upgrade).
LOCK TABLE queueflow.tenant_queues IN SHARE ROW EXCLUSIVE MODE;
INSERT INTO queueflow.tenant_queue_totals (tenant_key, queues)
SELECT tenant_key, count(*) FROM queueflow.tenant_queues GROUP BY tenant_key;

CREATE FUNCTION queueflow.refuse_queue(cap integer, queue text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'QFQ01',
        MESSAGE = format('too many queues: a tenant may have %s (--max-queues-per-tenant), and %L would be'
                         ' one more; its existing queues still take jobs', cap, queue);
END $$;

CREATE FUNCTION queueflow.count_tenant_queue() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    total integer;
    cap integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE queueflow.tenant_queue_totals SET queues = queues - 1 WHERE tenant_key = OLD.tenant_key;
        RETURN NULL;
    END IF;
    INSERT INTO queueflow.tenant_queue_totals AS t (tenant_key, queues) VALUES (NEW.tenant_key, 1)
    ON CONFLICT (tenant_key) DO UPDATE SET queues = t.queues + 1
    RETURNING t.queues INTO total;
    SELECT c.max_queues_per_tenant INTO cap FROM queueflow.queue_cap c;
    IF cap > 0 AND total > cap THEN
        PERFORM queueflow.refuse_queue(cap, NEW.queue_name);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER tenant_queues_counted AFTER INSERT OR DELETE ON queueflow.tenant_queues
    FOR EACH ROW EXECUTE FUNCTION queueflow.count_tenant_queue();

CREATE FUNCTION queueflow.check_queue_room(tenant text, names text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    total integer;
    fresh text[];
BEGIN
    SELECT c.max_queues_per_tenant INTO cap FROM queueflow.queue_cap c;
    IF cap = 0 THEN
        RETURN;
    END IF;
    SELECT array_agg(n ORDER BY n) INTO fresh
    FROM (SELECT DISTINCT n FROM unnest(names) AS n) AS given
    WHERE NOT EXISTS (SELECT 1 FROM queueflow.tenant_queues q WHERE q.queue_name = given.n AND q.tenant_key = tenant);
    IF fresh IS NULL THEN
        RETURN;
    END IF;
    total := COALESCE((SELECT t.queues FROM queueflow.tenant_queue_totals t WHERE t.tenant_key = tenant), 0);
    IF total + cardinality(fresh) > cap THEN
        PERFORM queueflow.refuse_queue(cap, fresh[1]);
    END IF;
END $$;
