-- QueueFlow schema, version 14: cron schedules read in a time zone (issue 15).
--
-- `timezone` is an IANA name (the server checks it); NULL reads the expression in UTC, as before.
-- The durable alarm stays `next_run_at`, an instant: the zone only decides which instant comes next
-- (shared/domain/cron.py, with its daylight-saving rules), so the firing path is unchanged.

ALTER TABLE queueflow.cron_schedules ADD COLUMN timezone text;
