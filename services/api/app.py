"""The API service's app factory and its route table, the one place routes are declared.

The same table drives routing, the auth guard on each route and the generated /openapi.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from services.api import cron, dlq, jobs, protocol, queues, system, workflows
from services.api.console import add_console_routes
from services.api.context import AUTH, Handler, guard
from services.api.openapi import openapi_handler
from shared import wire
from shared.auth import Authenticator
from shared.http import add_ops_routes, error_middleware
from shared.runtime import RESOURCES, Resources


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
        None,
        "sse",
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
        None,
        "sse",
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
        wire.QueueControlResponse,
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
        wire.QueueControlResponse,
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


def create_app(res: Resources) -> web.Application:
    """The API app. The caller adds the resources cleanup context (shared by every service the
    process runs) before any service's own contexts."""
    app = web.Application(middlewares=[error_middleware], client_max_size=res.settings.max_body_bytes)
    app[RESOURCES] = res
    app[AUTH] = Authenticator(res.settings)
    for route in ROUTES:
        app.router.add_route(route.method, route.path, guard(route.handler, route.auth))
    add_ops_routes(app, with_metrics=False)
    app.router.add_get("/openapi.json", openapi_handler)
    add_console_routes(app)
    return app
