-- QueueFlow schema, version 16: cron schedules that start workflows (issue 15). A schedule has
-- either a task (`task_name`, as before) or a workflow definition (`workflow`, stored normalised);
-- each occurrence starts one workflow named `<schedule name>@<occurrence>`, in the transaction that
-- moves the schedule's alarm, so exactly once however many janitors run.

ALTER TABLE queueflow.cron_schedules ALTER COLUMN task_name DROP NOT NULL;
ALTER TABLE queueflow.cron_schedules ADD COLUMN workflow jsonb;
ALTER TABLE queueflow.cron_schedules ADD CONSTRAINT cron_schedules_task_or_workflow
    CHECK ((task_name IS NULL) <> (workflow IS NULL));
