"""The API's route table, the one place routes are declared. The same table drives routing, the
auth guard on each route (services/api/app.py) and the generated /openapi.json
(services/api/openapi.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from services.api import cron, dlq, jobs, protocol, queues, system, workflows
from services.api.context import Handler
from shared import wire


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handler: Handler
    auth: str  # public | read | write | worker
    tag: str
    operation_id: str
    summary: str
    request: type | None = None
    response: Any = None
    status: int = 200
    # A text/event-stream route: the type each `status` event's data is the JSON of.
    events: type | None = None


ROUTES: list[Route] = [
    Route(
        "POST",
        "/api/v1/jobs",
        jobs.create_job,
        "write",
        "jobs",
        "createJob",
        "Enqueue a job",
        wire.CreateJobRequest,
        wire.CreateJobResponse,
        201,
    ),
    Route(
        "POST",
        "/api/v1/jobs/batch",
        jobs.create_batch,
        "write",
        "jobs",
        "createBatchJobs",
        "Enqueue many jobs",
        wire.CreateBatchJobsRequest,
        wire.CreateBatchJobsResponse,
        201,
    ),
    Route(
        "POST",
        "/api/v1/jobs/cancel",
        jobs.cancel_jobs,
        "write",
        "jobs",
        "cancelJobs",
        "Cancel this tenant's matching jobs",
        wire.CancelJobsRequest,
        wire.CancelJobsResponse,
    ),
    Route(
        "POST",
        "/api/v1/jobs/retry",
        jobs.retry_jobs,
        "write",
        "jobs",
        "retryJobs",
        "Run this tenant's matching failed or cancelled jobs again, in place",
        wire.RetryJobsRequest,
        wire.RetryJobsResponse,
    ),
    Route(
        "POST",
        "/api/v1/jobs/{id}/retry",
        jobs.retry_job,
        "write",
        "jobs",
        "retryJob",
        "Run a failed or cancelled job again, in place (same id, retry budget reset)",
        None,
        wire.Job,
    ),
    Route(
        "GET",
        "/api/v1/jobs",
        jobs.list_jobs,
        "read",
        "jobs",
        "listJobs",
        "List jobs",
        None,
        wire.ListJobsResponse,
    ),
    Route("GET", "/api/v1/jobs/{id}", jobs.get_job, "read", "jobs", "getJob", "Get a job", None, wire.Job),
    Route(
        "POST",
        "/api/v1/jobs/{id}/cancel",
        jobs.cancel_job,
        "write",
        "jobs",
        "cancelJob",
        "Cancel a job",
        None,
        None,
        204,
    ),
    Route(
        "GET",
        "/api/v1/jobs/{id}/events",
        jobs.job_events,
        "read",
        "jobs",
        "streamJobEvents",
        "Server-sent status events for a job",
        events=wire.Job,
    ),
    Route(
        "POST",
        "/api/v1/queues/{queue}/lease",
        protocol.lease,
        "worker",
        "worker",
        "leaseJobs",
        "Lease jobs from a queue (long-poll)",
        wire.LeaseJobsRequest,
        wire.LeaseJobsResponse,
    ),
    Route(
        "POST",
        "/api/v1/jobs/{id}/heartbeat",
        protocol.heartbeat,
        "worker",
        "worker",
        "heartbeatJob",
        "Extend a lease; answers the job's status",
        wire.HeartbeatRequest,
        wire.HeartbeatResponse,
    ),
    Route(
        "POST",
        "/api/v1/jobs/{id}/complete",
        protocol.complete,
        "worker",
        "worker",
        "completeJob",
        "Record success",
        wire.CompleteJobRequest,
        None,
        204,
    ),
    Route(
        "POST",
        "/api/v1/jobs/complete",
        protocol.complete_many,
        "worker",
        "worker",
        "completeJobs",
        "Record success for up to 100 leased jobs at once (an extension); answers per item",
        wire.CompleteJobsRequest,
        wire.CompleteJobsResponse,
    ),
    Route(
        "POST",
        "/api/v1/jobs/{id}/fail",
        protocol.fail,
        "worker",
        "worker",
        "failJob",
        "Record a failure",
        wire.FailJobRequest,
        None,
        204,
    ),
    Route(
        "POST",
        "/api/v1/workflows",
        workflows.create_workflow,
        "write",
        "workflows",
        "createWorkflow",
        "Create a workflow (a DAG of steps)",
        wire.CreateWorkflowRequest,
        wire.CreateWorkflowResponse,
        201,
    ),
    Route(
        "GET",
        "/api/v1/workflows",
        workflows.list_workflows,
        "read",
        "workflows",
        "listWorkflows",
        "List workflows",
        None,
        wire.ListWorkflowsResponse,
    ),
    Route(
        "GET",
        "/api/v1/workflows/{id}",
        workflows.get_workflow,
        "read",
        "workflows",
        "getWorkflow",
        "Get a workflow",
        None,
        wire.Workflow,
    ),
    Route(
        "GET",
        "/api/v1/workflows/{id}/steps",
        workflows.get_steps,
        "read",
        "workflows",
        "getWorkflowStepStates",
        "Live state of every step, in declaration order",
        None,
        wire.WorkflowStepStatesResponse,
    ),
    Route(
        "GET",
        "/api/v1/workflows/{id}/diagram",
        workflows.get_diagram,
        "read",
        "workflows",
        "getWorkflowDiagram",
        "Mermaid diagram of the DAG",
        None,
        wire.WorkflowDiagramResponse,
    ),
    Route(
        "POST",
        "/api/v1/workflows/{id}/cancel",
        workflows.cancel_workflow,
        "write",
        "workflows",
        "cancelWorkflow",
        "Cancel a workflow",
        None,
        None,
        204,
    ),
    Route(
        "POST",
        "/api/v1/workflows/{id}/retry",
        workflows.retry_workflow,
        "write",
        "workflows",
        "retryWorkflow",
        "Re-run what did not complete",
        None,
        None,
        204,
    ),
    Route(
        "GET",
        "/api/v1/workflows/{id}/events",
        workflows.workflow_events,
        "read",
        "workflows",
        "streamWorkflowEvents",
        "Server-sent events for a workflow and its steps",
        events=wire.WorkflowEvent,
    ),
    Route(
        "POST",
        "/api/v1/cron",
        cron.create_cron,
        "write",
        "cron",
        "createCron",
        "Create a cron schedule",
        wire.CreateCronRequest,
        wire.CreateCronResponse,
        201,
    ),
    Route(
        "GET",
        "/api/v1/cron",
        cron.list_crons,
        "read",
        "cron",
        "listCrons",
        "List cron schedules",
        None,
        wire.ListCronsResponse,
    ),
    Route(
        "GET",
        "/api/v1/cron/{id}",
        cron.get_cron,
        "read",
        "cron",
        "getCron",
        "Get a cron schedule",
        None,
        wire.CronSchedule,
    ),
    Route(
        "DELETE",
        "/api/v1/cron/{id}",
        cron.delete_cron,
        "write",
        "cron",
        "deleteCron",
        "Delete a cron schedule (its enqueued jobs stay)",
        None,
        None,
        204,
    ),
    Route(
        "POST",
        "/api/v1/cron/{id}/pause",
        cron.pause_cron,
        "write",
        "cron",
        "pauseCron",
        "Stop a schedule firing",
        None,
        None,
        204,
    ),
    Route(
        "POST",
        "/api/v1/cron/{id}/resume",
        cron.resume_cron,
        "write",
        "cron",
        "resumeCron",
        "Resume a schedule from its next future occurrence",
        None,
        None,
        204,
    ),
    Route(
        "GET",
        "/api/v1/dlq",
        dlq.list_dead_letters,
        "read",
        "dlq",
        "listDeadLetters",
        "List dead letters",
        None,
        wire.ListDeadLettersResponse,
    ),
    Route(
        "POST",
        "/api/v1/dlq/replay",
        dlq.replay_dead_letters,
        "write",
        "dlq",
        "replayDeadLetters",
        "Replay matching dead letters",
        wire.ReplayDeadLettersRequest,
        wire.ReplayDeadLettersResponse,
    ),
    Route(
        "GET",
        "/api/v1/dlq/{id}",
        dlq.get_dead_letter,
        "read",
        "dlq",
        "getDeadLetter",
        "Get a dead letter",
        None,
        wire.DeadLetter,
    ),
    Route(
        "POST",
        "/api/v1/dlq/{id}/replay",
        dlq.replay_dead_letter,
        "write",
        "dlq",
        "replayDeadLetter",
        "Replay a dead letter as a fresh job",
        None,
        wire.ReplayDeadLetterResponse,
        201,
    ),
    Route(
        "GET",
        "/api/v1/queues",
        queues.list_queues,
        "read",
        "system",
        "listQueues",
        "The caller's backlog per queue",
        None,
        wire.QueuesResponse,
    ),
    Route(
        "POST",
        "/api/v1/queues/{queue}/pause",
        queues.pause_queue,
        "write",
        "system",
        "pauseQueue",
        "Stop claims of the caller's jobs on a queue",
        None,
        wire.QueueControl,
    ),
    Route(
        "POST",
        "/api/v1/queues/{queue}/resume",
        queues.resume_queue,
        "write",
        "system",
        "resumeQueue",
        "Let claims of the caller's jobs on a queue resume",
        None,
        wire.QueueControl,
    ),
    Route(
        "GET",
        "/api/v1/stats",
        system.stats,
        "read",
        "system",
        "getStats",
        "Durable counts for the tenant",
        None,
        wire.StatsSnapshot,
    ),
    Route(
        "GET",
        "/api/v1/tasks",
        system.tasks,
        "read",
        "system",
        "listTasks",
        "Tasks live in-process workers handle",
        None,
        wire.TasksResponse,
    ),
    Route(
        "GET",
        "/api/v1/whoami",
        system.whoami,
        "read",
        "system",
        "whoAmI",
        "The caller's tenant and access",
        None,
        wire.WhoAmIResponse,
    ),
]

PUBLIC_DOCS = [
    ("GET", "/health", "health", "getHealth", "Liveness: the database answers", wire.HealthStatus),
    ("GET", "/ready", "health", "getReady", "Readiness", wire.ReadyStatus),
]


def fixed_siblings(path: str, param: str) -> list[str]:
    """The fixed segments other routes have where `path` has `{param}` after the same prefix: the
    values the parameter never takes (`batch` for a job id: `GET /api/v1/jobs/batch` is a 405
    naming POST, not a lookup of job "batch")."""
    parts = path.split("/")
    at = parts.index(f"{{{param}}}")
    found = {
        other[at]
        for other in (route.path.split("/") for route in ROUTES)
        if len(other) > at and other[:at] == parts[:at] and not other[at].startswith("{")
    }
    return sorted(found)


def router_path(path: str) -> str:
    """`path` for aiohttp's router, each parameter kept off its fixed siblings."""

    def constrain(match: re.Match[str]) -> str:
        siblings = fixed_siblings(path, match[1])
        if not siblings:
            return match[0]
        return f"{{{match[1]}:(?!(?:{'|'.join(map(re.escape, siblings))})(?:/|$))[^/]+}}"

    return re.sub(r"{(\w+)}", constrain, path)
