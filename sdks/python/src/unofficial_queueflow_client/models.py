"""Typed request and response bodies of the QueueFlow REST API, as msgspec Structs.

Requests leave out fields that are ``None`` (``omit_defaults``), so only what you set goes on the
wire. Responses ignore fields they do not know, so a newer server does not break an older SDK.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec
from msgspec import Struct

__all__ = [
    "AttemptOutcome",
    "Backoff",
    "CancelJobsRequest",
    "CancelJobsResponse",
    "CompleteJobRequest",
    "CompleteJobsRequest",
    "CompleteJobsResponse",
    "CompletionAnswer",
    "CompletionItem",
    "CompletionOutcome",
    "CreateBatchJobsRequest",
    "CreateBatchJobsResponse",
    "CreateCronRequest",
    "CreateCronResponse",
    "CreateJobRequest",
    "CreateJobResponse",
    "CreateWorkerKeyRequest",
    "CreateWorkerKeyResponse",
    "CreateWorkflowRequest",
    "CreateWorkflowResponse",
    "CronSchedule",
    "DeadLetter",
    "ErrorBody",
    "Event",
    "FailJobRequest",
    "FanOut",
    "FanOutProgress",
    "HealthStatus",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Job",
    "JobAttempt",
    "JobAttemptsResponse",
    "JobConfig",
    "JobConfigRequest",
    "JobLogsResponse",
    "JobStatus",
    "LeaseJobsRequest",
    "LeaseJobsResponse",
    "LeasedJob",
    "LimitPolicy",
    "LimitRate",
    "LimitsResponse",
    "ListCronsResponse",
    "ListDeadLettersResponse",
    "ListEventsResponse",
    "ListJobsResponse",
    "ListWorkerKeysResponse",
    "ListWorkflowsResponse",
    "LogLine",
    "MAX_COMPLETIONS",
    "MAX_EVENT_KEY_BYTES",
    "MAX_LOG_CALL_BYTES",
    "MAX_LOG_LINES",
    "MAX_PROGRESS_MESSAGE",
    "MAX_SLEEP_SECS",
    "NewLogLine",
    "OpenApiDocument",
    "PostEventRequest",
    "PostEventResponse",
    "PostJobLogsRequest",
    "PostJobLogsResponse",
    "Progress",
    "ProgressReport",
    "PutLimitRequest",
    "QueueControlResponse",
    "QueueStats",
    "QueuesResponse",
    "ReadyStatus",
    "RegisteredWorker",
    "ReplayDeadLetterResponse",
    "ReplayDeadLettersRequest",
    "ReplayDeadLettersResponse",
    "ReplayedDeadLetter",
    "StatsSnapshot",
    "StepCondition",
    "StepStatus",
    "TasksResponse",
    "UniqueConflict",
    "UniquePolicy",
    "WaitForEvent",
    "WhoAmIResponse",
    "WorkerInfo",
    "WorkerKey",
    "WorkersResponse",
    "Workflow",
    "WorkflowDiagramResponse",
    "WorkflowEvent",
    "WorkflowStatus",
    "WorkflowStep",
    "WorkflowStepState",
    "WorkflowStepStatesResponse",
    "sleep_step",
    "sleep_until_step",
    "to_builtins",
    "wait_for_event_step",
]

Object = dict[str, Any]
Backoff = Literal["fixed", "linear", "exponential"]
JobStatus = Literal["pending", "running", "completed", "failed", "retrying", "cancelled"]
StepStatus = Literal["pending", "running", "completed", "failed", "cancelled", "skipped"]
WorkflowStatus = Literal["created", "running", "completed", "failed", "partially_failed", "cancelled"]
ConditionOp = Literal["eq", "ne", "gt", "gte", "lt", "lte", "exists", "contains", "in"]
UniqueConflict = Literal["skip", "replace"]
AttemptOutcome = Literal["running", "completed", "retry", "failed", "lease_expired", "cancelled", "released"]
OnFailure = Literal["halt", "skip", "continue"]


class _Body(Struct, omit_defaults=True, kw_only=True):
    """Base of every body: optional fields left at their default are not sent."""


def to_builtins(value: Any) -> Any:
    """A Struct (or anything msgspec can encode) as plain dicts, lists and strings."""
    return msgspec.to_builtins(value)


# --- configuration -------------------------------------------------------------------------------


class UniquePolicy(_Body):
    """A job's ``config.unique`` (an extension): within ``window_secs`` (1 to 31536000) of the job
    accepted with ``key`` (1 to 255 bytes, no control characters; per tenant), another create with
    the key inserts nothing. ``on_conflict="skip"`` (the server's default when left out) answers the
    holder's id; ``"replace"`` gives a holder that has not started the newcomer's payload and
    schedule (answering its id), and enqueues the newcomer when the holder has started."""

    key: str
    window_secs: int
    on_conflict: UniqueConflict | None = None


class JobConfigRequest(_Body):
    """Per-job execution policy when enqueueing (the request spelling: ``timeout``, ``queue``)."""

    priority: int | None = None
    max_retries: int | None = None
    timeout: int | None = None
    queue: str | None = None
    retry_backoff: Backoff | None = None
    retry_delay_secs: int | None = None
    retry_max_delay_secs: int | None = None
    jitter_factor: float | None = None
    limits: list[str] | None = None
    """Flow-control keys (up to 4): the job starts only when each key's policy has room."""
    unique: UniquePolicy | None = None
    """Unique over a window (jobs created directly only: a workflow step or a cron schedule does
    not take one)."""


class JobConfig(_Body):
    """The stored execution policy (workflow steps and cron schedules use these names)."""

    priority: int | None = None
    max_retries: int | None = None
    timeout_secs: int | None = None
    retry_backoff: Backoff | None = None
    retry_delay_secs: int | None = None
    retry_max_delay_secs: int | None = None
    jitter_factor: float | None = None
    limits: list[str] | None = None
    """Flow-control keys (up to 4); absent when the job has none."""


# --- jobs ----------------------------------------------------------------------------------------


class CreateJobRequest(_Body):
    task_name: str
    payload: Object | None = None
    config: JobConfigRequest | None = None
    run_at: datetime | None = None
    metadata: Object | None = None
    idempotency_key: str | None = None


class CreateBatchJobsRequest(_Body):
    jobs: list[CreateJobRequest]


class CreateJobResponse(_Body):
    job_id: str


class CreateBatchJobsResponse(_Body):
    job_ids: list[str]
    count: int


class Job(_Body):
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
    metadata: Object = msgspec.field(default_factory=dict)
    started_at: datetime | None = None
    completed_at: datetime | None = None
    next_retry_at: datetime | None = None
    error_message: str | None = None
    result: Object | None = None
    idempotency_key: str | None = None
    tenant_id: str | None = None
    workflow_id: str | None = None
    workflow_step_id: str | None = None
    progress: Progress | None = None
    """How far the job got, as its worker last reported it (an extension); None when it never did.
    A retry's claim clears it."""

    @property
    def unique(self) -> UniquePolicy | None:
        """``config["unique"]`` decoded (the server sends all three fields), or None when the job
        has no unique policy. Raises ``msgspec.ValidationError`` when the server sent something
        else under that name."""
        raw = self.config.get("unique")
        return None if raw is None else msgspec.convert(raw, UniquePolicy)


class ListJobsResponse(_Body):
    jobs: list[Job]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None


class CancelJobsRequest(_Body):
    queue: str | None = None
    task_name: str | None = None
    status: Literal["pending", "retrying", "running"] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int | None = None


class CancelJobsResponse(_Body):
    cancelled: int


# --- worker protocol -----------------------------------------------------------------------------


class WorkerInfo(_Body):
    """What a worker says of itself on lease (an extension; every field optional): its host, its SDK
    and that SDK's version (each at most 255 characters), and the task names it handles (at most 256)."""

    hostname: str | None = None
    sdk: str | None = None
    version: str | None = None
    tasks: list[str] | None = None


class LeaseJobsRequest(_Body):
    max_jobs: int | None = None
    lease_secs: int | None = None
    wait_secs: int | None = None
    worker_id: str | None = None
    """An extension: the worker's name (1 to 128 visible ASCII characters, no space), recorded on the
    jobs it leases (their attempts' worker) and in the worker registry."""
    worker: WorkerInfo | None = None
    """An extension: what the worker is; the server keeps the last one sent, so once is enough."""


class LeasedJob(_Body):
    job: Job
    lease_token: str
    traceparent: str | None = None
    """The W3C ``traceparent`` the job was created in (an extension): the worker's span is its child.
    None when the job has no trace context."""
    tracestate: str | None = None
    """The W3C ``tracestate`` that came with ``traceparent``, when there was one."""


class LeaseJobsResponse(_Body):
    jobs: list[LeasedJob]


MAX_PROGRESS_MESSAGE = 1024
"""The longest progress message, in characters."""


class ProgressReport(_Body):
    """A heartbeat's ``progress`` (an extension): ``percent`` from 0 to 100, an optional ``message``
    of at most `MAX_PROGRESS_MESSAGE` characters."""

    percent: float
    message: str | None = None


class Progress(_Body):
    """A job's progress as the server shows it: the last report and when the server received it."""

    percent: float
    message: str | None = None
    updated_at: datetime | None = None


class HeartbeatRequest(_Body):
    lease_token: str
    extend_secs: int
    progress: ProgressReport | None = None


class HeartbeatResponse(_Body):
    status: JobStatus


class CompleteJobRequest(_Body):
    lease_token: str
    result: Object | None = None


MAX_COMPLETIONS = 100
"""The most completions one `CompleteJobsRequest` may carry."""

CompletionOutcome = Literal["completed", "conflict", "not_found"]


class CompletionItem(_Body):
    """One job of a batch acknowledgement: its id, its lease token and its result."""

    id: str
    lease_token: str
    result: Object | None = None


class CompleteJobsRequest(_Body):
    """``POST /api/v1/jobs/complete``: 1 to `MAX_COMPLETIONS` completions in one call."""

    jobs: list[CompletionItem]


class CompletionAnswer(_Body):
    """The answer for one item, in request order: ``status`` is what ``POST /api/v1/jobs/{id}/complete``
    would have answered for that job (204 completed, 409 lease lost, 404 gone), ``error`` its message."""

    id: str
    outcome: CompletionOutcome
    status: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the job was completed (or already was, with this token)."""
        return 200 <= self.status < 300


class CompleteJobsResponse(_Body):
    results: list[CompletionAnswer]


class FailJobRequest(_Body):
    lease_token: str
    error: str
    retryable: bool | None = None


# --- visibility: job logs, attempts, workers (extensions) -------------------------------------------

MAX_LOG_LINES = 100
"""The most lines one `PostJobLogsRequest` may carry."""

MAX_LOG_CALL_BYTES = 64 * 1024
"""The most bytes (UTF-8) the messages of one `PostJobLogsRequest` may take in all."""


class NewLogLine(_Body):
    """A line a worker posts: ``level`` 1 to 16 letters (``info``, ``warn``, ``error`` ...; the server
    stores none when left out), ``ts`` when it was written (default: when the server stores it)."""

    message: str
    level: str | None = None
    ts: datetime | None = None


class PostJobLogsRequest(_Body):
    """``POST /api/v1/jobs/{id}/logs``: at most `MAX_LOG_LINES` lines whose messages take at most
    `MAX_LOG_CALL_BYTES` in all, from the holder of the job's latest lease."""

    lease_token: str
    lines: list[NewLogLine]


class PostJobLogsResponse(_Body):
    """``stored``: lines kept; ``dropped``: this call's lines refused past the job's cap (that line
    and every later one are dropped); ``last_seq``: the job's newest line."""

    stored: int
    dropped: int
    last_seq: int


class LogLine(_Body):
    """A stored line: ``seq`` counts from 1 per job across its attempts, ``attempt`` is the attempt
    that was running."""

    seq: int
    attempt: int
    ts: datetime
    message: str
    level: str | None = None


class JobLogsResponse(_Body):
    """A page of a job's lines, oldest first. While ``has_more``, ask again with ``after`` set to the
    last line's ``seq``. ``dropped`` counts the job's lines refused past its cap."""

    lines: list[LogLine]
    last_seq: int
    dropped: int
    has_more: bool


class JobAttempt(_Body):
    """One lease of a job: ``attempt`` is the job's delivery count when it began; ``worker_id`` the
    lease request's (None when it named none); ``outcome`` how it ended (``running`` while it runs:
    no ``ended_at`` nor ``duration_secs`` then)."""

    attempt: int
    outcome: AttemptOutcome
    worker_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    duration_secs: float | None = None
    error_message: str | None = None


class JobAttemptsResponse(_Body):
    attempts: list[JobAttempt]


class RegisteredWorker(_Body):
    """A worker of the registry as a tenant sees it: the queues it leased the tenant's jobs from,
    how many of them it holds now, when it was first and last seen, whether it is live (seen within
    the last 2 minutes) and what it said of itself."""

    worker_id: str
    queues: list[str]
    in_flight: int
    first_seen_at: datetime
    last_seen_at: datetime
    live: bool
    info: WorkerInfo | None = None


class WorkersResponse(_Body):
    workers: list[RegisteredWorker]


# --- dead letters --------------------------------------------------------------------------------


class DeadLetter(_Body):
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


class ListDeadLettersResponse(_Body):
    dead_letters: list[DeadLetter]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None


class ReplayDeadLetterResponse(_Body):
    job_id: str


class ReplayDeadLettersRequest(_Body):
    queue: str | None = None
    task_name: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    limit: int | None = None


class ReplayedDeadLetter(_Body):
    dead_letter_id: int
    job_id: str | None = None
    error: str | None = None


class ReplayDeadLettersResponse(_Body):
    replayed: int
    results: list[ReplayedDeadLetter]


# --- system --------------------------------------------------------------------------------------


class StatsSnapshot(_Body):
    jobs_created: int
    jobs_completed: int
    jobs_failed: int
    jobs_retried: int
    jobs_dead_lettered: int
    workflows_created: int
    workflows_completed: int
    workflows_failed: int


class TasksResponse(_Body):
    tasks: list[str]


class WhoAmIResponse(_Body):
    tenant: str
    access: Literal["read_write", "read_only"]


class OpenApiDocument(_Body):
    """The server's API description (``GET /openapi.json``), reduced to what the SDK reads: its paths."""

    paths: dict[str, Any] = msgspec.field(default_factory=dict)
    openapi: str | None = None

    def offers(self, method: str, path: str) -> bool:
        """Whether the document lists ``method`` (e.g. ``"POST"``) on the route template ``path``."""
        operations = self.paths.get(path)
        return isinstance(operations, dict) and operations.get(method.lower()) is not None


class HealthStatus(_Body):
    status: str
    timestamp: datetime
    version: str


class ReadyStatus(_Body):
    status: str


class ErrorBody(_Body):
    """The body of every error response."""

    error: str
    timestamp: datetime


# --- workflows -----------------------------------------------------------------------------------


class StepCondition(_Body):
    """A leaf (``path`` compared with ``value`` by ``op``) or a combination (``all``, ``any``, ``not_``)."""

    op: ConditionOp | None = None
    path: str | None = None
    value: Any | msgspec.UnsetType = msgspec.UNSET
    all: list[StepCondition] | None = None
    any: list[StepCondition] | None = None
    not_: StepCondition | None = msgspec.field(default=None, name="not")


class FanOut(_Body):
    path: str
    item_key: str | None = None
    max_items: int | None = None


MAX_SLEEP_SECS = 31_536_000
"""The longest ``sleep_secs`` and ``timeout_secs`` (a year)."""

MAX_EVENT_KEY_BYTES = 256
"""The longest event key, in UTF-8 bytes (a wait step's key template too)."""


class WaitForEvent(_Body):
    """A wait-for-event step's event: ``key`` (1 to 256 bytes) may hold ``{{context.path}}``
    placeholders, which the server resolves from the workflow context when the step starts."""

    key: str


class WorkflowStep(_Body):
    """One step: a task (``task_name``), a sub-workflow (``workflow``), or, as extensions, a sleep
    (``sleep_secs`` or ``sleep_until``) or a wait for an event (``wait_for_event``, with an optional
    ``timeout_secs``); `sleep_step`, `sleep_until_step` and `wait_for_event_step` build the last two."""

    name: str
    task_name: str | None = None
    depends_on: list[str] | None = None
    payload: Object | None = None
    config: JobConfig | None = None
    on_failure: Literal["halt", "skip", "continue"] | None = None
    on_success: Literal["continue"] | None = None
    metadata: Object | None = None
    queue: str | None = None
    when: StepCondition | None = None
    fan_out: FanOut | None = None
    workflow: CreateWorkflowRequest | None = None
    sleep_secs: int | None = None
    sleep_until: datetime | None = None
    wait_for_event: WaitForEvent | None = None
    timeout_secs: int | None = None
    """A wait-for-event step's time-out: the step fails with ``event_timeout`` when it passes."""


def _check_secs(what: str, secs: int) -> None:
    if isinstance(secs, bool) or not isinstance(secs, int) or not 1 <= secs <= MAX_SLEEP_SECS:
        raise ValueError(f"{what} must be an integer from 1 to {MAX_SLEEP_SECS}, not {secs!r}")


def sleep_step(
    name: str,
    secs: int,
    *,
    depends_on: list[str] | None = None,
    on_failure: OnFailure | None = None,
    when: StepCondition | None = None,
    metadata: Object | None = None,
) -> WorkflowStep:
    """A step that runs no job and completes ``secs`` seconds (1 to `MAX_SLEEP_SECS`) after it
    starts, with the result ``{"slept_until": <instant>}``."""
    _check_secs("sleep_secs", secs)
    return WorkflowStep(
        name=name, sleep_secs=secs, depends_on=depends_on, on_failure=on_failure, when=when, metadata=metadata
    )


def sleep_until_step(
    name: str,
    until: datetime,
    *,
    depends_on: list[str] | None = None,
    on_failure: OnFailure | None = None,
    when: StepCondition | None = None,
    metadata: Object | None = None,
) -> WorkflowStep:
    """A step that runs no job and completes at ``until`` (at once when that has passed when it
    starts), with the result ``{"slept_until": <instant>}``. ``until`` must carry a time zone."""
    if until.tzinfo is None or until.utcoffset() is None:
        raise ValueError("sleep_until needs a datetime with a time zone (e.g. tzinfo=UTC)")
    return WorkflowStep(
        name=name, sleep_until=until, depends_on=depends_on, on_failure=on_failure, when=when, metadata=metadata
    )


def wait_for_event_step(
    name: str,
    key: str,
    *,
    timeout_secs: int | None = None,
    depends_on: list[str] | None = None,
    on_failure: OnFailure | None = None,
    when: StepCondition | None = None,
    metadata: Object | None = None,
) -> WorkflowStep:
    """A step that runs no job and waits for an event with ``key`` (``Client.send_event``); it
    completes with the event's payload as its result, also when the event was sent (and is still
    kept) before the step started. ``key`` may hold ``{{context.path}}`` placeholders. With
    ``timeout_secs`` (1 to `MAX_SLEEP_SECS`) the step fails with ``event_timeout`` when no event
    came in time."""
    if not 1 <= len(key.encode()) <= MAX_EVENT_KEY_BYTES:
        raise ValueError(f"an event key must be 1 to {MAX_EVENT_KEY_BYTES} bytes")
    if timeout_secs is not None:
        _check_secs("timeout_secs", timeout_secs)
    return WorkflowStep(
        name=name,
        wait_for_event=WaitForEvent(key=key),
        timeout_secs=timeout_secs,
        depends_on=depends_on,
        on_failure=on_failure,
        when=when,
        metadata=metadata,
    )


class CreateWorkflowRequest(_Body):
    name: str
    steps: list[WorkflowStep]
    context: Object | None = None
    metadata: Object | None = None
    timeout_secs: int | None = None


class CreateWorkflowResponse(_Body):
    workflow_id: str


class Workflow(_Body):
    id: str
    name: str
    status: WorkflowStatus
    steps: list[WorkflowStep]
    created_at: datetime
    context: Object = msgspec.field(default_factory=dict)
    metadata: Object = msgspec.field(default_factory=dict)
    retry_count: int = 0
    started_at: datetime | None = None
    completed_at: datetime | None = None
    tenant_id: str | None = None
    timeout_secs: int | None = None
    deadline_at: datetime | None = None
    error_message: str | None = None
    parent_workflow_id: str | None = None
    parent_step_name: str | None = None


class ListWorkflowsResponse(_Body):
    workflows: list[Workflow]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None


class FanOutProgress(_Body):
    total: int
    completed: int
    failed: int


class WorkflowStepState(_Body):
    name: str
    status: StepStatus
    job_id: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    child_workflow_id: str | None = None
    fan_out: FanOutProgress | None = None
    wake_at: datetime | None = None
    """While a sleep or a wait with a time-out runs: when it wakes (the sleep's end, the time-out)."""
    event_key: str | None = None
    """While a wait-for-event step waits: the key it waits for, its placeholders resolved."""


class WorkflowStepStatesResponse(_Body):
    steps: list[WorkflowStepState]


class WorkflowDiagramResponse(_Body):
    format: str
    diagram: str


class WorkflowEvent(_Body):
    workflow_id: str
    status: WorkflowStatus
    steps: list[WorkflowStepState]
    error_message: str | None = None


# --- events (what wait-for-event steps wait for) -------------------------------------------------


class PostEventRequest(_Body):
    """``POST /api/v1/events``: ``key`` 1 to 256 bytes; ``payload`` None is sent as absent ({})."""

    key: str
    payload: Object | None = None


class PostEventResponse(_Body):
    """``delivered``: how many waiting steps the event completed when it arrived."""

    event_id: str
    delivered: int


class Event(_Body):
    """A kept event (``GET /api/v1/events``); ``delivered`` is how many waiting steps it completed
    when it arrived. It is kept until ``expires_at`` for steps that start waiting later."""

    event_id: str
    key: str
    payload: Object
    delivered: int
    created_at: datetime
    expires_at: datetime


class ListEventsResponse(_Body):
    events: list[Event]


# --- queues --------------------------------------------------------------------------------------


class QueueStats(_Body):
    queue: str
    pending: int
    scheduled: int
    running: int
    paused: bool
    oldest_pending_age_secs: int | None = None


class QueuesResponse(_Body):
    queues: list[QueueStats]


class QueueControlResponse(_Body):
    queue: str
    paused: bool
    pending: int
    running: int


# --- cron ----------------------------------------------------------------------------------------


class CreateCronRequest(_Body):
    """A schedule of a task (``task_name``, with optional ``payload``, ``queue`` and ``config``) or,
    an extension, of a workflow (``workflow``: a definition as `Client.create_workflow` takes it,
    started as ``<name>@<occurrence>`` each time the schedule fires; its steps carry their own
    payload, queue and config). Exactly one of the two: the server answers 400 otherwise."""

    name: str
    cron_expr: str
    task_name: str | None = None
    workflow: CreateWorkflowRequest | None = None
    payload: Object | None = None
    queue: str | None = None
    config: JobConfig | None = None
    timezone: str | None = None
    """An extension: the IANA time zone (e.g. ``"Europe/Berlin"``, 1 to 64 characters) whose wall
    clock the expression is read on; left out, it is read in UTC. An unknown name is a 400."""


class CreateCronResponse(_Body):
    cron_id: str


class CronSchedule(_Body):
    """A schedule as the server shows it: ``task_name`` for a task schedule, ``workflow`` (the
    definition as stored, its defaults filled in) for one that starts a workflow; the other is
    None."""

    id: str
    name: str
    cron_expr: str
    enabled: bool
    next_run_at: datetime
    created_at: datetime
    payload: Object | None = None
    queue_name: str | None = None
    config: JobConfig | None = None
    last_enqueued_at: datetime | None = None
    tenant_id: str | None = None
    timezone: str | None = None
    """The IANA time zone the expression is read in (an extension); None for a schedule without one
    (read in UTC)."""
    next_run_local: datetime | None = None
    """``next_run_at`` on the schedule's zone's clock: an aware datetime carrying the zone's UTC
    offset at that instant (e.g. 09:00+02:00). None when the schedule has no time zone."""
    task_name: str | None = None
    """The task each occurrence enqueues; None for a schedule that starts a workflow."""
    workflow: CreateWorkflowRequest | None = None
    """The workflow each occurrence starts (an extension); None for a task schedule."""


class ListCronsResponse(_Body):
    crons: list[CronSchedule]
    limit: int
    offset: int
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None


# --- worker keys ---------------------------------------------------------------------------------


class CreateWorkerKeyRequest(_Body):
    """``queues`` None: every queue; ``expires_at`` None: never expires."""

    name: str
    queues: list[str] | None = None
    expires_at: datetime | None = None


class WorkerKey(_Body):
    id: str
    name: str
    queues: list[str] | None
    created_at: datetime
    expires_at: datetime | None


class CreateWorkerKeyResponse(WorkerKey):
    """The key and its token, which no other answer shows: use it as a client's ``worker_token``."""

    token: str


class ListWorkerKeysResponse(_Body):
    worker_keys: list[WorkerKey]


# --- limits (flow control) -----------------------------------------------------------------------


class LimitRate(_Body):
    """At most ``count`` starts in any ``per_secs`` seconds."""

    count: int
    per_secs: float


class PutLimitRequest(_Body):
    """A key's whole policy (a PUT replaces it): at least one of the two."""

    concurrency: int | None = None
    rate: LimitRate | None = None


class LimitPolicy(_Body):
    """A key's policy with its live figures: ``running``, the jobs holding a slot now (for a
    wildcard key ``prefix*``, summed over the keys it governs); ``rate_available``, how many more may
    start now (an exact key with a rate only)."""

    key: str
    concurrency: int | None
    rate: LimitRate | None
    running: int
    created_at: datetime
    updated_at: datetime
    rate_available: int | None = None


class LimitsResponse(_Body):
    limits: list[LimitPolicy]
