-- QueueFlow schema, version 15: durable time in workflows (issue 15). A sleep step and a
-- wait-for-event step run no job: while one is `running`, its wake-up (`wake_at`: the sleep's end,
-- or the wait's time-out) and the event key it waits for (`event_key`) are columns of its row, so
-- they survive any process's death and a PostgreSQL restart like everything else.

ALTER TABLE queueflow.workflow_steps ADD COLUMN wake_at timestamptz, ADD COLUMN event_key text;

-- The workflow processes' timers: the next wake-up is one probe of this index, and a step leaves it
-- when its wake-up is taken or it ends. No scan grows with the number of sleeping steps.
CREATE INDEX workflow_steps_wake_idx ON queueflow.workflow_steps (wake_at)
    WHERE status = 'running' AND wake_at IS NOT NULL;
-- The steps an event completes: those waiting for its key.
CREATE INDEX workflow_steps_event_idx ON queueflow.workflow_steps (event_key)
    WHERE status = 'running' AND event_key IS NOT NULL;

-- Two more things can happen to a workflow: a step's wake-up came (`timer`), an event arrived for
-- a waiting step (`event`, its payload in `result`).
ALTER TABLE queueflow.workflow_outbox DROP CONSTRAINT workflow_outbox_kind_check;
ALTER TABLE queueflow.workflow_outbox ADD CONSTRAINT workflow_outbox_kind_check
    CHECK (kind IN ('start', 'job', 'child', 'retry', 'heal', 'timer', 'event'));

-- Events (POST /api/v1/events), kept for --event-retention-secs so that a step that starts waiting
-- after its event arrived still receives it.
CREATE TABLE queueflow.events (
    id         uuid        PRIMARY KEY,
    tenant_key text        NOT NULL,
    key        text        NOT NULL,
    payload    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    delivered  integer     NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX events_key_idx ON queueflow.events (tenant_key, key, created_at);
CREATE INDEX events_tenant_created_idx ON queueflow.events (tenant_key, created_at DESC, id DESC);
CREATE INDEX events_expiry_idx ON queueflow.events (expires_at);
