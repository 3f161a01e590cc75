"""Wire types: request bodies and response envelopes, as msgspec Structs.

Requests forbid unknown fields and carry their bounds as `Meta` constraints, so decoding is
validation; each converts itself to the domain value it asks for. The records a response carries
(a job, a dead letter, a workflow and its steps, a cron schedule, queue figures) are the domain
types themselves: their JSON encoding is the contract's shape, so they are re-exported here rather
than declared twice. Responses omit absent optional fields, as the upstream server does. The
OpenAPI document is generated from these types (services/api/openapi.py).
"""

from __future__ import annotations

import functools
import uuid
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, Self

from msgspec import Meta, Struct

from shared.domain import paging as domain_paging
from shared.domain.audit import AuditEntry
from shared.domain.caps import check_size, check_sizes, check_workflow_sizes, truncated_error
from shared.domain.cron import MAX_CRON_EXPR, MAX_ZONE_NAME, CronSchedule
from shared.domain.errors import ValidationFailed
from shared.domain.events import Event
from shared.domain.jobs import (
    ACTIVE_JOB_STATUSES,
    DEFAULT_CONFIG,
    MAX_NAME_BYTES,
    RETRYABLE_JOB_STATUSES,
    BackoffStrategy,
    DeadLetter,
    DelaySecs,
    Int32,
    Jitter,
    Job,
    JobConfig,
    JobFilter,
    JobStatus,
    Lease,
    LimitKeys,
    MaxRetries,
    NewJob,
    Object,
    PartialJobConfig,
    Percent,
    Progress,
    ProgressMessage,
    QueueControl,
    QueueStats,
    ReplayedDeadLetter,
    Retention,
    StatsSnapshot,
    TimeoutSecs,
    UniquePolicy,
    instant,
)
from shared.domain.limits import Concurrency, LimitPolicy, Rate
from shared.domain.paging import PageRequest
from shared.domain.push import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TIMEOUT_SECS,
    MAX_CONCURRENCY,
    MAX_ENDPOINT_QUEUES,
    MAX_HEADERS,
    MAX_ROTATION_GRACE_SECS,
    MAX_TIMEOUT_SECS,
    MAX_URL_CHARS,
    Delivery,
    EndpointChange,
    Network,
    NewPushEndpoint,
    PushEndpoint,
    endpoint_change,
    new_endpoint,
)
from shared.domain.stats import FailingTask, FailingTasksResponse, Series, SeriesResponse
from shared.domain.traces import MAX_TRACESTATE_CHARS
from shared.domain.visibility import (
    MAX_LOG_LINES,
    MAX_LOG_MESSAGE,
    Attempt,
    JobLogs,
    LogLevel,
    LogsAppended,
    NewLogLine,
    Worker,
    WorkerId,
    WorkerInfo,
    check_log_lines,
)
from shared.domain.worker_keys import MAX_KEY_QUEUES, NewWorkerKey, WorkerKey, new_worker_key
from shared.domain.workflows import (
    MAX_EVENT_KEY_BYTES,
    FanOut,
    Name,
    StepCondition,
    Workflow,
    WorkflowDefinition,
    WorkflowStatus,
    WorkflowStep,
    WorkflowStepState,
    event_key_problem,
)

__all__ = [
    "Attempt",
    "CronSchedule",
    "DeadLetter",
    "Delivery",
    "FailingTask",
    "FailingTasksResponse",
    "FanOut",
    "Job",
    "JobConfig",
    "JobLogs",
    "LimitPolicy",
    "LogsAppended",
    "PartialJobConfig",
    "PushEndpoint",
    "QueueControl",
    "QueueStats",
    "ReplayedDeadLetter",
    "Series",
    "SeriesResponse",
    "StatsSnapshot",
    "StepCondition",
    "Worker",
    "WorkerInfo",
    "WorkerKey",
    "Workflow",
    "WorkflowStep",
    "WorkflowStepState",
]


class Request(Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Base for request bodies: unknown fields are a 400."""


class Response(Struct, omit_defaults=True):
    """Base for response bodies: absent optional fields are left out."""


class Page(Response, kw_only=True):
    """What every list response carries beside its items (in the field each subclass names)."""

    items_field: ClassVar[str]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None

    @classmethod
    def of(cls, asked: PageRequest, page: domain_paging.Page[Any]) -> Self:
        items = {cls.items_field: list(page.items)}
        return cls(
            limit=asked.limit,
            offset=asked.offset,
            has_more=page.has_more,
            total=page.total,
            next_cursor=page.next_cursor,
            **items,
        )


# --- jobs ----------------------------------------------------------------------------------------


class JobConfigRequest(Request):
    """Per-job execution policy on create; every field optional (defaults in API-NOTES section 6).
    The wire names `timeout` and `queue` differ from the stored ones."""

    priority: Int32 | None = None
    max_retries: MaxRetries | None = None
    timeout: TimeoutSecs | None = None
    queue: str | None = None
    retry_backoff: BackoffStrategy | None = None
    retry_delay_secs: DelaySecs | None = None
    retry_max_delay_secs: DelaySecs | None = None
    jitter_factor: Jitter | None = None
    limits: LimitKeys | None = None
    unique: UniquePolicy | None = None

    def to_config(self) -> JobConfig:
        policy = (
            self.priority,
            self.max_retries,
            self.timeout,
            self.retry_backoff,
            self.retry_delay_secs,
            self.retry_max_delay_secs,
            self.jitter_factor,
            self.limits,
            self.unique,
        )
        if policy.count(None) == len(policy):
            return DEFAULT_CONFIG  # what JobConfig.of gives for nothing, without building it
        return _config_of(policy)


# JobConfigRequest.to_config's policy fields, by their stored names (the wire says `timeout`).
_STORED_POLICY_NAMES = (
    "priority",
    "max_retries",
    "timeout_secs",
    "retry_backoff",
    "retry_delay_secs",
    "retry_max_delay_secs",
    "jitter_factor",
    "limits",
    "unique",
)


@functools.lru_cache(maxsize=4096)
def _config_of(policy: tuple[Any, ...]) -> JobConfig:
    """The config of one policy (JobConfigRequest.to_config's fields, in order), built once: a bulk
    enqueue repeats a few policies (a limit key per customer), and building one was most of what a
    limited job cost the batch route in Python. Frozen, so sharing one is safe; a policy that fails
    validation raises each time (lru_cache keeps no exception)."""
    return JobConfig.of(
        dict(zip(_STORED_POLICY_NAMES, policy, strict=True)),
        decoded=True,  # (the fields carry the domain's own annotated types)
    )


class CreateJobRequest(Request):
    task_name: str
    payload: Object | None = None
    config: JobConfigRequest | None = None
    run_at: datetime | None = None
    # Extensions beyond the upstream spec: free-form metadata, and a per-item key in batches.
    metadata: Object | None = None
    idempotency_key: Annotated[str, Meta(max_length=255)] | None = None

    def check_sizes(self, most: int, where: str = "") -> None:
        """ContentTooLarge when the payload or the metadata takes more than `most` bytes of JSON."""
        check_size(f"{where}payload", self.payload, most)
        check_size(f"{where}metadata", self.metadata, most)

    def to_new_job(self, default_queue: str, idempotency_key: str | None, lingers: bool = False) -> NewJob:
        """`lingers`: a single create's job, which its creator may read back (NewJob.lingers)."""
        config = self.config or JobConfigRequest()
        return NewJob(
            task_name=self.task_name,
            queue=default_queue if config.queue is None else config.queue,
            config=config.to_config(),
            payload=self.payload or {},
            run_at=instant("run_at", self.run_at),
            metadata=self.metadata or {},
            idempotency_key=idempotency_key,
            lingers=lingers,
        )


class CreateBatchJobsRequest(Request):
    jobs: list[CreateJobRequest]

    def check_sizes(self, most: int) -> None:
        """ContentTooLarge naming the first item whose payload or metadata is over `most` bytes."""
        parts = [part for job in self.jobs for part in (job.payload, job.metadata)]
        check_sizes(parts, most, lambda n: f"jobs[{n // 2}].{('payload', 'metadata')[n % 2]}")


class CreateJobResponse(Response):
    job_id: str


class CreateBatchJobsResponse(Response):
    job_ids: list[uuid.UUID]  # (encoded by msgspec: a str() per id cost as much as making it)
    count: int


class ListJobsResponse(Page, kw_only=True):
    items_field = "jobs"
    jobs: list[Job]


class CancelJobsRequest(Request):
    queue: str | None = None
    task_name: str | None = None
    status: Literal["pending", "retrying", "running"] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: Annotated[int, Meta(ge=1)] | None = None

    def to_filter(self, max_limit: int) -> JobFilter:
        return _filter(self, (JobStatus(self.status),) if self.status else None, max_limit)


class CancelJobsResponse(Response):
    cancelled: int


class RetryJobsRequest(Request):
    """Which failed or cancelled jobs to run again (a workflow's jobs are left to its retry)."""

    queue: str | None = None
    task_name: str | None = None
    status: Literal["failed", "cancelled"] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: Annotated[int, Meta(ge=1)] | None = None

    def to_filter(self, max_limit: int) -> JobFilter:
        return _filter(self, (JobStatus(self.status),) if self.status else RETRYABLE_JOB_STATUSES, max_limit)


class RetryJobsResponse(Response):
    retried: int


def _filter(
    body: CancelJobsRequest | RetryJobsRequest | ReplayDeadLettersRequest,
    statuses: tuple[JobStatus, ...] | None,
    max_limit: int,
) -> JobFilter:
    limit = body.limit or 100
    if limit > max_limit:
        raise ValidationFailed(f"limit cannot exceed {max_limit}")
    return JobFilter(
        queue=body.queue,
        task_name=body.task_name,
        statuses=statuses or ACTIVE_JOB_STATUSES,
        created_after=instant("created_after", body.created_after),
        created_before=instant("created_before", body.created_before),
        limit=limit,
    )


# --- worker protocol -----------------------------------------------------------------------------


class LeaseJobsRequest(Request):
    max_jobs: Annotated[int, Meta(ge=1, le=100)] | None = None
    lease_secs: Annotated[int, Meta(ge=1, le=3600)] | None = None
    wait_secs: Annotated[int, Meta(ge=0, le=30)] | None = None
    # Extensions (docs/visibility.md): the worker's name, recorded on the jobs it leases and in the
    # worker registry, and what it says of itself (kept from its last call when left out).
    worker_id: WorkerId | None = None
    worker: WorkerInfo | None = None


Traceparent = Annotated[
    str,
    Meta(
        pattern="^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        description="The W3C `traceparent` the job was created in (docs/tracing.md): its worker's span"
        " is a child of it. Absent when the job has none.",
    ),
]
Tracestate = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=MAX_TRACESTATE_CHARS,
        description="The W3C `tracestate` that came with the job's `traceparent`, when there was one.",
    ),
]


class LeasedJob(Response):
    job: Job
    lease_token: str
    # Extensions (issue 16): the W3C trace context the job was created in, left out when it has
    # none, so that the worker's span continues the enqueuer's trace.
    traceparent: Traceparent | None = None
    tracestate: Tracestate | None = None

    @classmethod
    def of(cls, lease: Lease) -> LeasedJob:
        trace = lease.trace
        if trace is None:
            return cls(job=lease.job, lease_token=str(lease.token))
        return cls(
            job=lease.job,
            lease_token=str(lease.token),
            traceparent=trace.traceparent,
            tracestate=trace.tracestate,
        )


class LeaseJobsResponse(Response):
    jobs: list[LeasedJob]


class ProgressReport(Request):
    percent: Percent
    message: ProgressMessage | None = None

    def to_progress(self) -> Progress:
        return Progress(percent=self.percent, message=self.message)


class HeartbeatRequest(Request):
    lease_token: str
    extend_secs: Annotated[int, Meta(ge=1, le=3600)]
    # An extension (docs/visibility.md): how far the job got; shown on the job until its next claim.
    progress: ProgressReport | None = None


class HeartbeatResponse(Response):
    status: JobStatus


class CompleteJobRequest(Request):
    lease_token: str
    result: Object | None = None


class CompletionItem(Request):
    """One job of a batch acknowledgement. An `id` or `lease_token` that is not a UUID is answered
    per item, as the per-job route would (404, 409), rather than failing the whole batch."""

    id: str
    lease_token: str
    result: Object | None = None


MAX_COMPLETIONS = 100


class CompleteJobsRequest(Request):
    """`POST /api/v1/jobs/complete`: up to 100 completions in one call (an extension)."""

    jobs: Annotated[list[CompletionItem], Meta(min_length=1, max_length=MAX_COMPLETIONS)]

    def check_sizes(self, most: int) -> None:
        """ContentTooLarge naming the first item whose result is over `most` bytes (the whole call
        is refused, as for a malformed item)."""
        check_sizes([job.result for job in self.jobs], most, lambda n: f"jobs[{n}].result")


CompletionOutcome = Literal["completed", "conflict", "not_found"]


class CompletionAnswer(Response):
    """Per item, in request order: `status` is what `POST /api/v1/jobs/{id}/complete` would have
    answered for it (204, 409 or 404), `error` its error message."""

    id: str
    outcome: CompletionOutcome
    status: int
    error: str | None = None


class CompleteJobsResponse(Response):
    results: list[CompletionAnswer]


class FailJobRequest(Request):
    """`error` of any length is taken; past 64 KiB it is kept cut, with a marker (shared/domain/caps.py)."""

    lease_token: str
    error: str
    retryable: bool | None = None

    def kept_error(self) -> str:
        return truncated_error(self.error)


# --- visibility (docs/visibility.md) -------------------------------------------------------------


class LogLineRequest(Request):
    message: Annotated[str, Meta(max_length=MAX_LOG_MESSAGE)]
    ts: datetime | None = None
    level: LogLevel | None = None


class PostJobLogsRequest(Request):
    """`POST /api/v1/jobs/{id}/logs`: up to 100 lines, 64 KiB of message in all."""

    lease_token: str
    lines: Annotated[list[LogLineRequest], Meta(max_length=MAX_LOG_LINES)]

    def to_lines(self) -> list[NewLogLine]:
        lines = [
            NewLogLine(message=line.message, ts=instant(f"lines[{n}].ts", line.ts), level=line.level)
            for n, line in enumerate(self.lines)
        ]
        check_log_lines(lines)
        return lines


class JobAttemptsResponse(Response):
    attempts: list[Attempt]


class WorkersResponse(Response):
    workers: list[Worker]


# --- dead letters --------------------------------------------------------------------------------


class ListDeadLettersResponse(Page, kw_only=True):
    items_field = "dead_letters"
    dead_letters: list[DeadLetter]


class ReplayDeadLetterResponse(Response):
    job_id: str


class ReplayDeadLettersRequest(Request):
    queue: str | None = None
    task_name: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: Annotated[int, Meta(ge=1)] | None = None

    def to_filter(self, max_limit: int) -> JobFilter:
        return _filter(self, None, max_limit)


class ReplayDeadLettersResponse(Response):
    replayed: int
    results: list[ReplayedDeadLetter]


# --- system --------------------------------------------------------------------------------------


class TasksResponse(Response):
    tasks: list[str]


class WhoAmIResponse(Response):
    """`access` is upstream's (a viewer is read_only, the other roles read_write); `role` and
    `actor` (the id the audit log records) are extensions, `name` the display name a credential
    carries (docs/access.md)."""

    tenant: str
    access: Literal["read_write", "read_only"]
    role: Literal["viewer", "operator", "admin"] | None = None
    actor: str | None = None
    name: str | None = None


class ListAuditResponse(Page, kw_only=True):
    """GET /api/v1/audit: the tenant's audit entries (docs/access.md)."""

    items_field = "entries"
    entries: list[AuditEntry]


class HealthStatus(Response):
    status: str
    timestamp: datetime
    version: str


class PoolerStatus(Response):
    """How the process reaches PostgreSQL when a transaction pooler is on the way (an extension;
    docs/deployment.md, "PgBouncer and other poolers")."""

    # The settings whose URL goes through a transaction pooler: DATABASE_URL and/or
    # QUEUEFLOW_LISTEN_DATABASE_URL.
    pooled: list[str]
    # The pool's statement cache in effect: 0 when named prepared statements do not survive the
    # pooler (whatever QUEUEFLOW_STATEMENT_CACHE_SIZE says).
    statement_cache_size: int
    # "listen": woken by NOTIFY; "poll": no LISTEN connection could hear anything, so waiters
    # re-check for work on a timer (set QUEUEFLOW_LISTEN_DATABASE_URL).
    notifications: Literal["listen", "poll"]
    # What the process had to adapt and what to configure instead; absent when nothing was.
    warning: str | None = None


class ReadyStatus(Response):
    status: str
    # An extension: present only when a transaction pooler is on the way.
    pooler: PoolerStatus | None = None


class ErrorBody(Response):
    error: str
    timestamp: datetime


# --- workflows -----------------------------------------------------------------------------------


class CreateWorkflowRequest(
    WorkflowDefinition, frozen=True, forbid_unknown_fields=True, omit_defaults=True, kw_only=True
):
    """The body of POST /api/v1/workflows: a workflow definition. One run of it may create at
    most the server's --workflow-max-jobs jobs (default 100,000), counting one per task step, a
    fan-out's `max_items` (the server's --workflow-max-fan-out when absent) and the jobs of its
    sub-workflows; a definition that could create more is refused with 400."""

    def check_sizes(self, most: int) -> None:
        """ContentTooLarge when its context or metadata, or a step's payload or metadata, takes
        more than `most` bytes of JSON."""
        check_workflow_sizes(self, most)


class CreateWorkflowResponse(Response):
    workflow_id: str
    # An extension: the workflow's status when the answer was written (its root steps are scheduled).
    status: WorkflowStatus | None = None


class ListWorkflowsResponse(Page, kw_only=True):
    items_field = "workflows"
    workflows: list[Workflow]


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


class QueuesResponse(Response):
    queues: list[QueueStats]


class UpdateQueueRequest(Request):
    """A queue's settings for the caller's jobs (an extension); a field left out stays as it is.
    `retention`: what becomes of a job that completes from now on: `keep` (until --retention-hours
    deletes it, the default) or `remove_completed` (deleted by the statement that completes it)."""

    retention: Retention | None = None


# --- cron ----------------------------------------------------------------------------------------


class CreateCronRequest(Request):
    """A schedule of a task (`task_name`, as upstream) or, an extension, of a workflow
    (`workflow`: a definition as POST /api/v1/workflows takes): exactly one of the two."""

    name: Name
    cron_expr: Annotated[str, Meta(max_length=MAX_CRON_EXPR)]
    task_name: Annotated[str, Meta(max_length=MAX_NAME_BYTES)] | None = None
    workflow: WorkflowDefinition | None = None
    payload: Object | None = None
    queue: str | None = None
    config: PartialJobConfig | None = None
    # An extension: the IANA time zone the expression is read in (UTC when absent).
    timezone: Annotated[str, Meta(min_length=1, max_length=MAX_ZONE_NAME)] | None = None

    def check_sizes(self, most: int) -> None:
        """ContentTooLarge when the payload, or a part of the workflow, is over `most` bytes."""
        check_size("payload", self.payload, most)
        if self.workflow is not None:
            check_workflow_sizes(self.workflow, most, "workflow.")


class CreateCronResponse(Response):
    cron_id: str


class ListCronsResponse(Page, kw_only=True):
    items_field = "crons"
    crons: list[CronSchedule]


# --- events (issue 15) ---------------------------------------------------------------------------


class PostEventRequest(Request):
    """An event for the caller's waiting workflow steps: `key` 1 to 256 bytes (no NUL)."""

    key: Annotated[str, Meta(min_length=1, max_length=MAX_EVENT_KEY_BYTES)]
    payload: Object | None = None

    def checked_key(self) -> str:
        problem = event_key_problem(self.key, template=False)
        if problem:
            raise ValidationFailed(problem)
        return self.key


class PostEventResponse(Response):
    event_id: str
    delivered: int


class ListEventsResponse(Response):
    events: list[Event]


# --- flow control --------------------------------------------------------------------------------


class PutLimitRequest(Request):
    """A key's whole policy: at least one of the two (a PUT replaces what was there)."""

    concurrency: Concurrency | None = None
    rate: Rate | None = None


class LimitsResponse(Response):
    limits: list[LimitPolicy]


# --- worker keys ---------------------------------------------------------------------------------


class CreateWorkerKeyRequest(Request):
    """`queues` null (or absent) lets the key lease from every queue; `expires_at` null never
    expires."""

    name: Name
    queues: Annotated[list[str], Meta(min_length=1, max_length=MAX_KEY_QUEUES)] | None = None
    expires_at: datetime | None = None

    def to_new_key(self, now: datetime) -> NewWorkerKey:
        return new_worker_key(self.name, self.queues, self.expires_at, now)


class CreateWorkerKeyResponse(WorkerKey, frozen=True, kw_only=True):
    """The key and its token: the one answer that ever shows the token."""

    token: str


class ListWorkerKeysResponse(Response):
    worker_keys: list[WorkerKey]


# --- push delivery (docs/push.md) ----------------------------------------------------------------

PushUrl = Annotated[str, Meta(min_length=1, max_length=MAX_URL_CHARS)]
PushQueues = Annotated[list[str], Meta(min_length=1, max_length=MAX_ENDPOINT_QUEUES)]
PushConcurrency = Annotated[int, Meta(ge=1, le=MAX_CONCURRENCY)]
PushTimeout = Annotated[int, Meta(ge=1, le=MAX_TIMEOUT_SECS)]
PushHeaders = Annotated[dict[str, str], Meta(max_length=MAX_HEADERS)]


class CreatePushEndpointRequest(Request):
    """`headers`: static headers sent with every delivery (not one a delivery sets itself)."""

    name: Name
    url: PushUrl
    queues: PushQueues
    concurrency: PushConcurrency = DEFAULT_CONCURRENCY
    timeout_secs: PushTimeout = DEFAULT_TIMEOUT_SECS
    headers: PushHeaders | None = None

    def to_new_endpoint(self, allowed: tuple[Network, ...]) -> NewPushEndpoint:
        return new_endpoint(
            self.name, self.url, self.queues, self.concurrency, self.timeout_secs, self.headers, allowed
        )


class UpdatePushEndpointRequest(Request):
    """Fields left out stay as they are; `headers` {} removes them; `paused` true stops deliveries
    (the bound queues keep their jobs), false resumes them."""

    name: Name | None = None
    url: PushUrl | None = None
    queues: PushQueues | None = None
    concurrency: PushConcurrency | None = None
    timeout_secs: PushTimeout | None = None
    headers: PushHeaders | None = None
    paused: bool | None = None

    def to_change(self, allowed: tuple[Network, ...]) -> EndpointChange:
        return endpoint_change(
            name=self.name,
            url=self.url,
            queues=self.queues,
            concurrency=self.concurrency,
            timeout_secs=self.timeout_secs,
            headers=self.headers,
            paused=self.paused,
            allowed=allowed,
        )


class RotatePushSecretRequest(Request):
    """`grace_secs`: how long the old secret keeps signing beside the new one (default a day; 0
    stops it at once)."""

    grace_secs: Annotated[int, Meta(ge=0, le=MAX_ROTATION_GRACE_SECS)] | None = None


class PushEndpointWithSecret(PushEndpoint, frozen=True, kw_only=True):
    """The endpoint and its signing secret: only the answers that create or rotate it show it."""

    secret: str


class ListPushEndpointsResponse(Response):
    push_endpoints: list[PushEndpoint]


class PushDeliveriesResponse(Response):
    deliveries: list[Delivery]


class PushDeliveryBody(Response):
    """What a delivery POSTs: the job exactly as a lease answer carries it, its lease token and
    the attempt (the job's delivery_count)."""

    job: Job
    lease_token: str
    attempt: int
