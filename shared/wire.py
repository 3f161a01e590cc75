"""Wire types: every request and response body, as msgspec Structs.

Requests forbid unknown fields and carry their bounds as `Meta` constraints, so decoding is
validation. Responses omit absent optional fields (`omit_defaults`), as the upstream server does.
The OpenAPI document is generated from these types (services/api/openapi.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from shared import domain

Int32 = Annotated[int, Meta(ge=domain.INT32_MIN, le=domain.INT32_MAX)]
Name = Annotated[str, Meta(min_length=1, max_length=255)]
Object = dict[str, Any]
Backoff = Literal["fixed", "linear", "exponential"]
JobStatus = Literal["pending", "running", "completed", "failed", "retrying", "cancelled"]
MaxRetries = Annotated[int, Meta(ge=0, le=domain.MAX_RETRIES)]
TimeoutSecs = Annotated[int, Meta(ge=1, le=domain.MAX_TIMEOUT_SECS)]
DelaySecs = Annotated[int, Meta(ge=0, le=domain.MAX_DELAY_SECS)]
Jitter = Annotated[float, Meta(ge=0.0, le=1.0)]


class Request(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base for request bodies: unknown fields are a 400."""


class Response(Struct, omit_defaults=True):
    """Base for response bodies: absent optional fields are left out."""


# --- configuration -------------------------------------------------------------------------------


class JobConfigRequest(Request):
    """Per-job execution policy on create; every field optional (defaults in API-NOTES section 6)."""

    priority: Int32 | None = None
    max_retries: MaxRetries | None = None
    timeout: TimeoutSecs | None = None
    queue: Name | None = None
    retry_backoff: Backoff | None = None
    retry_delay_secs: DelaySecs | None = None
    retry_max_delay_secs: DelaySecs | None = None
    jitter_factor: Jitter | None = None

    def resolve(self) -> dict[str, Any]:
        return domain.resolve_config(
            priority=self.priority,
            max_retries=self.max_retries,
            timeout_secs=self.timeout,
            retry_backoff=self.retry_backoff,
            retry_delay_secs=self.retry_delay_secs,
            retry_max_delay_secs=self.retry_max_delay_secs,
            jitter_factor=self.jitter_factor,
        )


class JobConfig(Response, forbid_unknown_fields=True):
    """The stored execution policy (stored field names). Partial on input, complete on output."""

    priority: Int32 | None = None
    max_retries: MaxRetries | None = None
    timeout_secs: TimeoutSecs | None = None
    retry_backoff: Backoff | None = None
    retry_delay_secs: DelaySecs | None = None
    retry_max_delay_secs: DelaySecs | None = None
    jitter_factor: Jitter | None = None

    def resolve(self) -> dict[str, Any]:
        return domain.resolve_config(**msgspec.structs.asdict(self))


# --- jobs ----------------------------------------------------------------------------------------


class CreateJobRequest(Request):
    task_name: str
    payload: Object | None = None
    config: JobConfigRequest | None = None
    run_at: datetime | None = None
    # Extensions beyond the upstream spec: free-form metadata, and a per-item key in batches.
    metadata: Object | None = None
    idempotency_key: Annotated[str, Meta(max_length=255)] | None = None


class CreateBatchJobsRequest(Request):
    jobs: list[CreateJobRequest]


class CreateJobResponse(Response):
    job_id: str


class CreateBatchJobsResponse(Response):
    job_ids: list[str]
    count: int


class Job(Response):
    id: str
    queue_name: str
    task_name: str
    payload: Object
    config: Object
    status: JobStatus
    retry_count: int
    delivery_count: int
    created_at: datetime
    scheduled_at: datetime
    metadata: Object
    started_at: datetime | None = None
    completed_at: datetime | None = None
    next_retry_at: datetime | None = None
    error_message: str | None = None
    result: Object | None = None
    idempotency_key: str | None = None
    tenant_id: str | None = None
    workflow_id: str | None = None
    workflow_step_id: str | None = None


class ListJobsResponse(Response):
    jobs: list[Job]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None


class CancelJobsRequest(Request):
    queue: str | None = None
    task_name: str | None = None
    status: Literal["pending", "retrying", "running"] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: Annotated[int, Meta(ge=1)] | None = None


class CancelJobsResponse(Response):
    cancelled: int


# --- worker protocol -----------------------------------------------------------------------------


class LeaseJobsRequest(Request):
    max_jobs: Annotated[int, Meta(ge=1, le=100)] | None = None
    lease_secs: Annotated[int, Meta(ge=1, le=3600)] | None = None
    wait_secs: Annotated[int, Meta(ge=0, le=30)] | None = None


class LeasedJob(Response):
    job: Job
    lease_token: str


class LeaseJobsResponse(Response):
    jobs: list[LeasedJob]


class HeartbeatRequest(Request):
    lease_token: str
    extend_secs: Annotated[int, Meta(ge=1, le=3600)]


class HeartbeatResponse(Response):
    status: JobStatus


class CompleteJobRequest(Request):
    lease_token: str
    result: Object | None = None


class FailJobRequest(Request):
    lease_token: str
    error: str
    retryable: bool | None = None


# --- dead letters --------------------------------------------------------------------------------


class DeadLetter(Response):
    id: int
    job_id: str
    reason: str
    created_at: datetime
    error_message: str | None = None
    queue_name: str | None = None
    task_name: str | None = None
    replayed_at: datetime | None = None
    replay_job_id: str | None = None
    tenant_id: str | None = None


class ListDeadLettersResponse(Response):
    dead_letters: list[DeadLetter]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None


class ReplayDeadLetterResponse(Response):
    job_id: str


class ReplayDeadLettersRequest(Request):
    queue: str | None = None
    task_name: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: Annotated[int, Meta(ge=1)] | None = None


class ReplayedDeadLetter(Response):
    dead_letter_id: int
    job_id: str | None = None
    error: str | None = None


class ReplayDeadLettersResponse(Response):
    replayed: int
    results: list[ReplayedDeadLetter]


# --- system --------------------------------------------------------------------------------------


class StatsSnapshot(Response):
    jobs_created: int
    jobs_completed: int
    jobs_failed: int
    jobs_retried: int
    jobs_dead_lettered: int
    workflows_created: int
    workflows_completed: int
    workflows_failed: int


class TasksResponse(Response):
    tasks: list[str]


class WhoAmIResponse(Response):
    tenant: str
    access: Literal["read_write", "read_only"]


class HealthStatus(Response):
    status: str
    timestamp: datetime
    version: str


class ReadyStatus(Response):
    status: str


class ErrorBody(Response):
    error: str
    timestamp: datetime


# --- workflows -----------------------------------------------------------------------------------

StepStatus = Literal["pending", "running", "completed", "failed", "cancelled", "skipped"]
WorkflowStatus = Literal["created", "running", "completed", "failed", "partially_failed", "cancelled"]
ConditionOp = Literal["eq", "ne", "gt", "gte", "lt", "lte", "exists", "contains", "in"]


class StepCondition(Request):
    """A leaf (`path` compared with `value` by `op`) or a combination (`all`, `any`, `not`)."""

    op: ConditionOp | None = None
    path: str | None = None
    value: Any | msgspec.UnsetType = msgspec.UNSET
    all: list[StepCondition] | None = None
    any: list[StepCondition] | None = None
    not_: StepCondition | None = msgspec.field(default=None, name="not")


class FanOut(Request):
    path: Annotated[str, Meta(min_length=1)]
    item_key: Annotated[str, Meta(min_length=1)] | None = None
    max_items: Annotated[int, Meta(ge=0, le=domain.MAX_FAN_OUT)] | None = None


class WorkflowStep(Request):
    name: Name
    task_name: str | None = None
    depends_on: list[str] | None = None
    payload: Object | None = None
    config: JobConfig | None = None
    on_failure: Literal["halt", "skip", "continue"] | None = None
    on_success: Literal["continue"] | None = None
    metadata: Object | None = None
    queue: Name | None = None
    when: StepCondition | None = None
    fan_out: FanOut | None = None
    workflow: CreateWorkflowRequest | None = None


class CreateWorkflowRequest(Request):
    name: Name
    steps: list[WorkflowStep]
    context: Object | None = None
    metadata: Object | None = None
    timeout_secs: Annotated[int, Meta(ge=1, le=domain.MAX_DELAY_SECS)] | None = None


class CreateWorkflowResponse(Response):
    workflow_id: str


class Workflow(Response):
    id: str
    name: str
    status: WorkflowStatus
    steps: list[WorkflowStep]
    created_at: datetime
    context: Object
    metadata: Object
    retry_count: int
    started_at: datetime | None = None
    completed_at: datetime | None = None
    tenant_id: str | None = None
    timeout_secs: int | None = None
    deadline_at: datetime | None = None
    error_message: str | None = None
    parent_workflow_id: str | None = None
    parent_step_name: str | None = None


class ListWorkflowsResponse(Response):
    workflows: list[Workflow]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None


class FanOutProgress(Response):
    total: int
    completed: int
    failed: int


class WorkflowStepState(Response):
    name: str
    status: StepStatus
    job_id: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    child_workflow_id: str | None = None
    fan_out: FanOutProgress | None = None


class WorkflowStepStatesResponse(Response):
    steps: list[WorkflowStepState]


class WorkflowDiagramResponse(Response):
    format: str
    diagram: str


class WorkflowEvent(Response):
    workflow_id: str
    status: WorkflowStatus
    steps: list[WorkflowStepState]
    error_message: str | None = None


# --- queues --------------------------------------------------------------------------------------


class QueueStats(Response):
    queue: str
    pending: int
    scheduled: int
    running: int
    paused: bool
    oldest_pending_age_secs: int | None = None


class QueuesResponse(Response):
    queues: list[QueueStats]


class QueueControlResponse(Response):
    queue: str
    paused: bool
    pending: int
    running: int


# --- cron ----------------------------------------------------------------------------------------


class CreateCronRequest(Request):
    name: Name
    cron_expr: str
    task_name: str
    payload: Object | None = None
    queue: Name | None = None
    config: JobConfig | None = None


class CreateCronResponse(Response):
    cron_id: str


class CronSchedule(Response):
    id: str
    name: str
    cron_expr: str
    task_name: str
    enabled: bool
    next_run_at: datetime
    created_at: datetime
    payload: Object | None = None
    queue_name: str | None = None
    config: JobConfig | None = None
    last_enqueued_at: datetime | None = None
    tenant_id: str | None = None


class ListCronsResponse(Response):
    crons: list[CronSchedule]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None
