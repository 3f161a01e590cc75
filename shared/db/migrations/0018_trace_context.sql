-- QueueFlow schema, version 18: W3C trace context (issue 16, "Traces"). A job or workflow created
-- with a valid `traceparent` header keeps it (and its `tracestate`), so that the worker that
-- leases the job can continue the enqueuer's trace: the lease answer carries them. A workflow's
-- step jobs and sub-workflows inherit their workflow's. Both columns are NULL for a job created
-- without trace context (no default: adding them rewrites no row).

ALTER TABLE queueflow.jobs ADD COLUMN traceparent text, ADD COLUMN tracestate text;
ALTER TABLE queueflow.workflows ADD COLUMN traceparent text, ADD COLUMN tracestate text;
