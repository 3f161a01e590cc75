-- QueueFlow schema, version 36: a tenant's unfinished top-level workflows, by tenant, for the
-- running-workflows quota (--tenant-max-running-workflows). A creation counts at most the quota's
-- worth of entries of this index, however many workflows other tenants (or this one's finished
-- ones) have; sub-workflows are not counted, the workflow that started them is.
CREATE INDEX workflows_tenant_running_idx ON queueflow.workflows (tenant_id)
    WHERE status IN ('created', 'running') AND parent_workflow_id IS NULL;
