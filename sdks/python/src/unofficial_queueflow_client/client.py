"""The asyncio REST client: one typed method per route of the QueueFlow API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import Any, TypeVar, overload
from urllib.parse import quote

import aiohttp
import msgspec
from yarl import URL

from unofficial_queueflow_client import models as m
from unofficial_queueflow_client._version import __version__
from unofficial_queueflow_client.errors import TransportError, UnexpectedResponse, error_for_status
from unofficial_queueflow_client.sse import ServerSentEvent, parse_sse

__all__ = ["Client"]

T = TypeVar("T")
_encoder = msgspec.json.Encoder()
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}
_USER_AGENT = f"unofficial-queueflow-client-python/{__version__}"


def _decoder(typ: Any) -> msgspec.json.Decoder[Any]:
    decoder = _decoders.get(typ)
    if decoder is None:
        decoder = _decoders[typ] = msgspec.json.Decoder(typ)
    return decoder


def _seg(value: str | int) -> str:
    """A path segment, percent-encoded (a queue may be called ``a/b``)."""
    return quote(str(value), safe="")


def _time(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


def _list_params(**values: Any) -> dict[str, str]:
    """Query parameters of the list routes; ``None`` means absent."""
    params: dict[str, str] = {}
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            params[name] = "true" if value else "false"
        elif isinstance(value, datetime):
            params[name] = _time(value)
        else:
            params[name] = str(value)
    return params


class Client:
    """An asyncio client for the QueueFlow REST API.

    ``token`` is a tenant API key; ``worker_token`` is used for the worker protocol (lease,
    heartbeat, complete, fail) and defaults to ``token`` (enough against a ``--dev`` server).
    ``timeout`` bounds each request in seconds (a lease's long-poll wait is added to it).

    Use it as an async context manager, or call `close()` when done::

        async with Client("http://localhost:8000", "my-key") as qf:
            created = await qf.create_job("send-email", {"to": "a@example.com"})
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        worker_token: str | None = None,
        timeout: float = 30,
        *,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.worker_token = worker_token if worker_token is not None else token
        self.timeout = timeout
        self._session = session
        self._owns_session = session is None

    # --- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session (if the client created it)."""
        if self._session is not None and self._owns_session and not self._session.closed:
            await self._session.close()
        if self._owns_session:
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(headers={"User-Agent": _USER_AGENT})
            self._owns_session = True
        return self._session

    # --- raw plumbing ------------------------------------------------------------------------------

    def _url(self, path: str) -> URL:
        return URL(self.base_url + path, encoded=True)

    def _headers(self, token: str | None, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if extra:
            headers.update(extra)
        return headers

    @overload
    async def request(
        self,
        method: str,
        path: str,
        response_type: type[T],
        *,
        body: Any = ...,
        params: Mapping[str, str] | None = ...,
        token: str | None = ...,
        headers: Mapping[str, str] | None = ...,
        timeout: float | None = ...,
    ) -> T: ...

    @overload
    async def request(
        self,
        method: str,
        path: str,
        response_type: None = ...,
        *,
        body: Any = ...,
        params: Mapping[str, str] | None = ...,
        token: str | None = ...,
        headers: Mapping[str, str] | None = ...,
        timeout: float | None = ...,
    ) -> None: ...

    async def request(
        self,
        method: str,
        path: str,
        response_type: Any = None,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        token: str | None = "",
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Send one request and decode the answer as ``response_type`` (``None``: no body expected).

        ``token`` defaults to the tenant token; pass ``None`` for an unauthenticated call. Raises
        an `ApiError` subclass for an HTTP error status, `TransportError` when no answer came.
        """
        if token == "":
            token = self.token
        all_headers = self._headers(token, headers)
        data = None
        if body is not None:
            data = _encoder.encode(body)
            all_headers["Content-Type"] = "application/json"
        limit = aiohttp.ClientTimeout(total=timeout if timeout is not None else self.timeout)
        try:
            async with self._http().request(
                method, self._url(path), data=data, params=params, headers=all_headers, timeout=limit
            ) as resp:
                content = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise TransportError(f"{method} {path}: {type(err).__name__}: {err}") from err
        if status >= 400:
            raise error_for_status(status, content)
        if response_type is None:
            return None
        try:
            return _decoder(response_type).decode(content)
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise UnexpectedResponse(
                f"{method} {path}: HTTP {status} body is not a "
                f"{getattr(response_type, '__name__', response_type)}: {err}"
            ) from err

    async def stream(self, path: str, *, token: str | None = "") -> AsyncIterator[ServerSentEvent]:
        """The server-sent events of ``path``, until the server ends the stream."""
        if token == "":
            token = self.token
        headers = self._headers(token, {"Accept": "text/event-stream"})
        # No total timeout: a stream lasts as long as the server keeps it (keep-alives every 15 s).
        limit = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=max(self.timeout, 60))
        try:
            async with self._http().get(self._url(path), headers=headers, timeout=limit) as resp:
                if resp.status >= 400:
                    raise error_for_status(resp.status, await resp.read())
                async for event in parse_sse(resp.content):
                    yield event
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise TransportError(f"GET {path}: {type(err).__name__}: {err}") from err

    async def _events(self, path: str, typ: type[T]) -> AsyncIterator[T]:
        decoder = _decoder(typ)
        async for event in self.stream(path):
            if event.event != "status":
                continue
            try:
                yield decoder.decode(event.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as err:
                raise UnexpectedResponse(f"GET {path}: event is not a {typ.__name__}: {err}") from err

    # --- jobs ------------------------------------------------------------------------------------

    async def create_job(
        self,
        job: m.CreateJobRequest | str,
        payload: dict[str, Any] | None = None,
        *,
        config: m.JobConfigRequest | None = None,
        run_at: datetime | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> m.CreateJobResponse:
        """Enqueue a job: ``POST /api/v1/jobs``. ``job`` is a request, or the task name with the
        other fields as arguments. ``idempotency_key`` is sent as the ``Idempotency-Key`` header:
        creating again with the same key returns the existing job's id."""
        if isinstance(job, str):
            job = m.CreateJobRequest(task_name=job, payload=payload, config=config, run_at=run_at, metadata=metadata)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None
        return await self.request("POST", "/api/v1/jobs", m.CreateJobResponse, body=job, headers=headers)

    async def create_jobs(
        self,
        jobs: list[m.CreateJobRequest] | m.CreateBatchJobsRequest,
    ) -> m.CreateBatchJobsResponse:
        """Enqueue many jobs at once: ``POST /api/v1/jobs/batch`` (per-item ``idempotency_key``)."""
        body = jobs if isinstance(jobs, m.CreateBatchJobsRequest) else m.CreateBatchJobsRequest(jobs=list(jobs))
        return await self.request("POST", "/api/v1/jobs/batch", m.CreateBatchJobsResponse, body=body)

    create_batch = create_jobs

    async def list_jobs(
        self,
        *,
        status: m.JobStatus | None = None,
        queue: str | None = None,
        task_name: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        order_by: str | None = None,
        include_total: bool | None = None,
        cursor: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
    ) -> m.ListJobsResponse:
        """One page of jobs: ``GET /api/v1/jobs``. Pass a page's ``next_cursor`` as ``cursor`` for
        the next one; ``order_by`` is ``"created_at ASC"`` or ``"created_at DESC"`` (default)."""
        params = _list_params(
            status=status,
            queue=queue,
            task_name=task_name,
            limit=limit,
            offset=offset,
            order_by=order_by,
            include_total=include_total,
            cursor=cursor,
            created_after=created_after,
            created_before=created_before,
        )
        return await self.request("GET", "/api/v1/jobs", m.ListJobsResponse, params=params)

    async def iter_jobs(self, **filters: Any) -> AsyncIterator[m.Job]:
        """Every job matching the `list_jobs` filters, page after page (following the cursor)."""
        cursor = filters.pop("cursor", None)
        while True:
            page = await self.list_jobs(cursor=cursor, **filters)
            for job in page.jobs:
                yield job
            if not page.has_more or not page.next_cursor:
                return
            cursor = page.next_cursor

    async def get_job(self, job_id: str) -> m.Job:
        """``GET /api/v1/jobs/{id}``."""
        return await self.request("GET", f"/api/v1/jobs/{_seg(job_id)}", m.Job)

    async def cancel_job(self, job_id: str) -> None:
        """``POST /api/v1/jobs/{id}/cancel``; a job already finished is a `Conflict`."""
        await self.request("POST", f"/api/v1/jobs/{_seg(job_id)}/cancel")

    async def cancel_jobs(self, filter: m.CancelJobsRequest | None = None, **fields: Any) -> m.CancelJobsResponse:
        """Cancel this tenant's matching jobs: ``POST /api/v1/jobs/cancel`` (a request, or its fields
        as keyword arguments: queue, task_name, status, created_after, created_before, limit)."""
        body = filter if filter is not None else m.CancelJobsRequest(**fields)
        return await self.request("POST", "/api/v1/jobs/cancel", m.CancelJobsResponse, body=body)

    def job_events(self, job_id: str) -> AsyncIterator[m.Job]:
        """The job at each status change (``GET /api/v1/jobs/{id}/events``), until it is terminal::

        async for job in qf.job_events(job_id):
            print(job.status)
        """
        return self._events(f"/api/v1/jobs/{_seg(job_id)}/events", m.Job)

    # --- visibility (extensions: progress, job logs, attempts, workers) -----------------------------

    async def job_logs(self, job_id: str, *, after: int | None = None, limit: int | None = None) -> m.JobLogsResponse:
        """One page of the job's log lines, oldest first: ``GET /api/v1/jobs/{id}/logs``. ``after``: the
        lines after this ``seq`` (default 0: from the first); ``limit``: clamped to 1..1000 by the
        server (default 100). While ``has_more``, ask again with ``after`` = the last line's ``seq``."""
        params = _list_params(after=after, limit=limit)
        return await self.request("GET", f"/api/v1/jobs/{_seg(job_id)}/logs", m.JobLogsResponse, params=params)

    async def iter_job_logs(self, job_id: str, *, after: int = 0, limit: int | None = None) -> AsyncIterator[m.LogLine]:
        """Every log line of the job after ``after``, page after page (``limit`` lines per call)."""
        while True:
            page = await self.job_logs(job_id, after=after, limit=limit)
            for line in page.lines:
                yield line
            if not page.has_more or not page.lines:
                return
            after = page.lines[-1].seq

    async def job_attempts(self, job_id: str) -> m.JobAttemptsResponse:
        """Every attempt (lease) of the job, in order, with its worker and how it ended:
        ``GET /api/v1/jobs/{id}/attempts``."""
        return await self.request("GET", f"/api/v1/jobs/{_seg(job_id)}/attempts", m.JobAttemptsResponse)

    async def list_workers(self) -> m.WorkersResponse:
        """The workers that leased this tenant's jobs (or hold its worker keys), most recently seen
        first: ``GET /api/v1/workers``."""
        return await self.request("GET", "/api/v1/workers", m.WorkersResponse)

    # --- workflows -------------------------------------------------------------------------------

    async def create_workflow(
        self,
        workflow: m.CreateWorkflowRequest | str,
        steps: list[m.WorkflowStep] | None = None,
        *,
        context: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        timeout_secs: int | None = None,
    ) -> m.CreateWorkflowResponse:
        """``POST /api/v1/workflows``: a request, or the name and steps. A cycle is a `BadRequest`."""
        if isinstance(workflow, str):
            workflow = m.CreateWorkflowRequest(
                name=workflow, steps=list(steps or []), context=context, metadata=metadata, timeout_secs=timeout_secs
            )
        return await self.request("POST", "/api/v1/workflows", m.CreateWorkflowResponse, body=workflow)

    async def list_workflows(
        self,
        *,
        status: m.WorkflowStatus | None = None,
        limit: int | None = None,
        offset: int | None = None,
        order_by: str | None = None,
        include_total: bool | None = None,
        cursor: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
    ) -> m.ListWorkflowsResponse:
        """One page of workflows: ``GET /api/v1/workflows``."""
        params = _list_params(
            status=status,
            limit=limit,
            offset=offset,
            order_by=order_by,
            include_total=include_total,
            cursor=cursor,
            created_after=created_after,
            created_before=created_before,
        )
        return await self.request("GET", "/api/v1/workflows", m.ListWorkflowsResponse, params=params)

    async def get_workflow(self, workflow_id: str) -> m.Workflow:
        """``GET /api/v1/workflows/{id}``."""
        return await self.request("GET", f"/api/v1/workflows/{_seg(workflow_id)}", m.Workflow)

    async def workflow_steps(self, workflow_id: str) -> m.WorkflowStepStatesResponse:
        """Live state of every step, in declaration order: ``GET /api/v1/workflows/{id}/steps``."""
        return await self.request("GET", f"/api/v1/workflows/{_seg(workflow_id)}/steps", m.WorkflowStepStatesResponse)

    async def workflow_diagram(self, workflow_id: str) -> m.WorkflowDiagramResponse:
        """Mermaid diagram of the DAG: ``GET /api/v1/workflows/{id}/diagram``."""
        return await self.request("GET", f"/api/v1/workflows/{_seg(workflow_id)}/diagram", m.WorkflowDiagramResponse)

    async def cancel_workflow(self, workflow_id: str) -> None:
        """``POST /api/v1/workflows/{id}/cancel``."""
        await self.request("POST", f"/api/v1/workflows/{_seg(workflow_id)}/cancel")

    async def retry_workflow(self, workflow_id: str) -> None:
        """Re-run what did not complete: ``POST /api/v1/workflows/{id}/retry``."""
        await self.request("POST", f"/api/v1/workflows/{_seg(workflow_id)}/retry")

    def workflow_events(self, workflow_id: str) -> AsyncIterator[m.WorkflowEvent]:
        """A `WorkflowEvent` on every workflow or step change (``GET /api/v1/workflows/{id}/events``)."""
        return self._events(f"/api/v1/workflows/{_seg(workflow_id)}/events", m.WorkflowEvent)

    # --- events ----------------------------------------------------------------------------------

    async def send_event(
        self, event: m.PostEventRequest | str, payload: dict[str, Any] | None = None
    ) -> m.PostEventResponse:
        """``POST /api/v1/events``: a request, or the key and payload. Every step of the tenant
        waiting for the key completes with the payload (``delivered`` says how many); the event is
        kept for steps that start waiting later. Not idempotent: each call is a new event."""
        body = event if isinstance(event, m.PostEventRequest) else m.PostEventRequest(key=event, payload=payload)
        return await self.request("POST", "/api/v1/events", m.PostEventResponse, body=body)

    async def list_events(self, *, key: str | None = None, limit: int | None = None) -> m.ListEventsResponse:
        """The tenant's kept events, newest first: ``GET /api/v1/events`` (``key``: only that key;
        ``limit``: the server clamps it to 1..100, default 50)."""
        params = _list_params(key=key, limit=limit)
        return await self.request("GET", "/api/v1/events", m.ListEventsResponse, params=params)

    # --- cron ------------------------------------------------------------------------------------

    async def create_cron(self, cron: m.CreateCronRequest | None = None, **fields: Any) -> m.CreateCronResponse:
        """``POST /api/v1/cron``: a request, or its fields (name, cron_expr, task_name, payload, queue,
        config, timezone) as keyword arguments. A schedule that starts a workflow (an extension)
        takes ``workflow=`` (a `CreateWorkflowRequest`) in place of ``task_name`` and has no
        payload, queue or config; giving both or neither is the server's 400."""
        body = cron if cron is not None else m.CreateCronRequest(**fields)
        return await self.request("POST", "/api/v1/cron", m.CreateCronResponse, body=body)

    async def list_crons(
        self,
        *,
        limit: int | None = None,
        offset: int | None = None,
        order_by: str | None = None,
        include_total: bool | None = None,
        cursor: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
    ) -> m.ListCronsResponse:
        """One page of cron schedules: ``GET /api/v1/cron``."""
        params = _list_params(
            limit=limit,
            offset=offset,
            order_by=order_by,
            include_total=include_total,
            cursor=cursor,
            created_after=created_after,
            created_before=created_before,
        )
        return await self.request("GET", "/api/v1/cron", m.ListCronsResponse, params=params)

    async def get_cron(self, cron_id: str) -> m.CronSchedule:
        """``GET /api/v1/cron/{id}``."""
        return await self.request("GET", f"/api/v1/cron/{_seg(cron_id)}", m.CronSchedule)

    async def delete_cron(self, cron_id: str) -> None:
        """``DELETE /api/v1/cron/{id}`` (jobs it already enqueued stay)."""
        await self.request("DELETE", f"/api/v1/cron/{_seg(cron_id)}")

    async def pause_cron(self, cron_id: str) -> None:
        """``POST /api/v1/cron/{id}/pause``."""
        await self.request("POST", f"/api/v1/cron/{_seg(cron_id)}/pause")

    async def resume_cron(self, cron_id: str) -> None:
        """``POST /api/v1/cron/{id}/resume``."""
        await self.request("POST", f"/api/v1/cron/{_seg(cron_id)}/resume")

    # --- worker keys ----------------------------------------------------------------------------

    async def create_worker_key(
        self, key: m.CreateWorkerKeyRequest | None = None, **fields: Any
    ) -> m.CreateWorkerKeyResponse:
        """``POST /api/v1/worker-keys``: a request, or its fields (name, queues, expires_at). The
        answer's ``token`` is shown only here; it is a ``worker_token`` for this tenant's jobs."""
        body = key if key is not None else m.CreateWorkerKeyRequest(**fields)
        return await self.request("POST", "/api/v1/worker-keys", m.CreateWorkerKeyResponse, body=body)

    async def list_worker_keys(self) -> m.ListWorkerKeysResponse:
        """``GET /api/v1/worker-keys`` (without tokens)."""
        return await self.request("GET", "/api/v1/worker-keys", m.ListWorkerKeysResponse)

    async def delete_worker_key(self, key_id: str) -> None:
        """Revoke a key: ``DELETE /api/v1/worker-keys/{id}``."""
        await self.request("DELETE", f"/api/v1/worker-keys/{_seg(key_id)}")

    # --- limits (flow control) ------------------------------------------------------------------

    async def put_limit(
        self,
        key: str,
        policy: m.PutLimitRequest | None = None,
        *,
        concurrency: int | None = None,
        rate: m.LimitRate | None = None,
    ) -> m.LimitPolicy:
        """``PUT /api/v1/limits/{key}``: set (replace) a key's policy, a request or its fields
        (``concurrency``, ``rate``; at least one). A key ending in ``*`` is a wildcard."""
        body = policy if policy is not None else m.PutLimitRequest(concurrency=concurrency, rate=rate)
        return await self.request("PUT", f"/api/v1/limits/{_seg(key)}", m.LimitPolicy, body=body)

    async def list_limits(self) -> m.LimitsResponse:
        """``GET /api/v1/limits``: every policy of the tenant, with its live figures."""
        return await self.request("GET", "/api/v1/limits", m.LimitsResponse)

    async def get_limit(self, key: str) -> m.LimitPolicy:
        """``GET /api/v1/limits/{key}``: the key's own policy; `NotFound` when it has none."""
        return await self.request("GET", f"/api/v1/limits/{_seg(key)}", m.LimitPolicy)

    async def delete_limit(self, key: str) -> None:
        """``DELETE /api/v1/limits/{key}``; `NotFound` when there was none."""
        await self.request("DELETE", f"/api/v1/limits/{_seg(key)}")

    # --- dead letters ----------------------------------------------------------------------------

    async def list_dead_letters(
        self,
        *,
        queue: str | None = None,
        task_name: str | None = None,
        replayed: bool | None = None,
        limit: int | None = None,
        offset: int | None = None,
        order_by: str | None = None,
        include_total: bool | None = None,
        cursor: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
    ) -> m.ListDeadLettersResponse:
        """One page of dead letters: ``GET /api/v1/dlq``."""
        params = _list_params(
            queue=queue,
            task_name=task_name,
            replayed=replayed,
            limit=limit,
            offset=offset,
            order_by=order_by,
            include_total=include_total,
            cursor=cursor,
            created_after=created_after,
            created_before=created_before,
        )
        return await self.request("GET", "/api/v1/dlq", m.ListDeadLettersResponse, params=params)

    async def get_dead_letter(self, dead_letter_id: int) -> m.DeadLetter:
        """``GET /api/v1/dlq/{id}``."""
        return await self.request("GET", f"/api/v1/dlq/{_seg(dead_letter_id)}", m.DeadLetter)

    async def replay_dead_letter(self, dead_letter_id: int) -> m.ReplayDeadLetterResponse:
        """Replay one dead letter as a fresh job: ``POST /api/v1/dlq/{id}/replay``."""
        return await self.request("POST", f"/api/v1/dlq/{_seg(dead_letter_id)}/replay", m.ReplayDeadLetterResponse)

    async def replay_dead_letters(
        self, filter: m.ReplayDeadLettersRequest | None = None, **fields: Any
    ) -> m.ReplayDeadLettersResponse:
        """Replay matching dead letters: ``POST /api/v1/dlq/replay`` (a request, or its fields)."""
        body = filter if filter is not None else m.ReplayDeadLettersRequest(**fields)
        return await self.request("POST", "/api/v1/dlq/replay", m.ReplayDeadLettersResponse, body=body)

    # --- queues and system -----------------------------------------------------------------------

    async def list_queues(self) -> m.QueuesResponse:
        """The caller's backlog per queue: ``GET /api/v1/queues``."""
        return await self.request("GET", "/api/v1/queues", m.QueuesResponse)

    async def pause_queue(self, queue: str) -> m.QueueControlResponse:
        """``POST /api/v1/queues/{queue}/pause``."""
        return await self.request("POST", f"/api/v1/queues/{_seg(queue)}/pause", m.QueueControlResponse)

    async def resume_queue(self, queue: str) -> m.QueueControlResponse:
        """``POST /api/v1/queues/{queue}/resume``."""
        return await self.request("POST", f"/api/v1/queues/{_seg(queue)}/resume", m.QueueControlResponse)

    async def stats(self) -> m.StatsSnapshot:
        """``GET /api/v1/stats``."""
        return await self.request("GET", "/api/v1/stats", m.StatsSnapshot)

    async def tasks(self) -> m.TasksResponse:
        """Tasks the server's in-process workers handle: ``GET /api/v1/tasks``."""
        return await self.request("GET", "/api/v1/tasks", m.TasksResponse)

    async def whoami(self) -> m.WhoAmIResponse:
        """The caller's tenant and access: ``GET /api/v1/whoami``."""
        return await self.request("GET", "/api/v1/whoami", m.WhoAmIResponse)

    async def health(self) -> m.HealthStatus:
        """Liveness (no credential): ``GET /health``; 503 is a `ServiceUnavailable`."""
        return await self.request("GET", "/health", m.HealthStatus, token=None)

    async def ready(self) -> m.ReadyStatus:
        """Readiness (no credential): ``GET /ready``; 503 is a `ServiceUnavailable`."""
        return await self.request("GET", "/ready", m.ReadyStatus, token=None)

    async def openapi(self) -> m.OpenApiDocument:
        """The server's API description (no credential): ``GET /openapi.json``. Its ``offers(method,
        path)`` tells whether the server has a route, e.g. an extension such as the batch acknowledgement."""
        return await self.request("GET", "/openapi.json", m.OpenApiDocument, token=None)

    # --- worker protocol (worker token) ----------------------------------------------------------

    async def lease(
        self,
        queue: str,
        max_jobs: int = 1,
        lease_secs: int = 30,
        wait_secs: int = 0,
        *,
        worker_id: str | None = None,
        worker: m.WorkerInfo | None = None,
    ) -> m.LeaseJobsResponse:
        """Lease up to ``max_jobs`` jobs from ``queue``, waiting up to ``wait_secs`` (<= 30) for one:
        ``POST /api/v1/queues/{queue}/lease``. Each leased job comes with its lease token (and its
        ``traceparent``/``tracestate`` when it has a trace context). ``worker_id`` names the worker
        (recorded on the jobs as their attempts' worker, and in the worker registry) and ``worker``
        says what it is; both are extensions, left out when None."""
        body = m.LeaseJobsRequest(
            max_jobs=max_jobs, lease_secs=lease_secs, wait_secs=wait_secs, worker_id=worker_id, worker=worker
        )
        return await self.request(
            "POST",
            f"/api/v1/queues/{_seg(queue)}/lease",
            m.LeaseJobsResponse,
            body=body,
            token=self.worker_token,
            timeout=self.timeout + wait_secs,
        )

    async def heartbeat(
        self, job_id: str, lease_token: str, extend_secs: int = 30, *, progress: m.ProgressReport | None = None
    ) -> m.HeartbeatResponse:
        """Extend a lease to ``extend_secs`` from now: ``POST /api/v1/jobs/{id}/heartbeat``. A
        status other than ``running`` (or a `Conflict`) means: stop and report nothing. ``progress``
        (an extension) reports how far the job got; the job shows it until its next claim."""
        body = m.HeartbeatRequest(lease_token=lease_token, extend_secs=extend_secs, progress=progress)
        return await self.request(
            "POST", f"/api/v1/jobs/{_seg(job_id)}/heartbeat", m.HeartbeatResponse, body=body, token=self.worker_token
        )

    async def complete(self, job_id: str, lease_token: str, result: dict[str, Any] | None = None) -> None:
        """Record success: ``POST /api/v1/jobs/{id}/complete`` (idempotent)."""
        body = m.CompleteJobRequest(lease_token=lease_token, result=result if result is not None else {})
        await self.request("POST", f"/api/v1/jobs/{_seg(job_id)}/complete", body=body, token=self.worker_token)

    async def complete_many(self, jobs: list[m.CompletionItem] | m.CompleteJobsRequest) -> m.CompleteJobsResponse:
        """Record success for 1 to 100 leased jobs in one call: ``POST /api/v1/jobs/complete`` (an
        extension; `openapi` tells whether the server has it). The answer has one `CompletionAnswer`
        per item, in request order, whose ``status`` is what `complete` would have answered for that
        job (204, 409 `Conflict`, 404 `NotFound`); the call itself fails only as a whole (a server
        without the route answers 404). Idempotent, like `complete`."""
        body = jobs if isinstance(jobs, m.CompleteJobsRequest) else m.CompleteJobsRequest(jobs=list(jobs))
        if not 1 <= len(body.jobs) <= m.MAX_COMPLETIONS:
            raise ValueError(f"complete_many takes 1..={m.MAX_COMPLETIONS} jobs, not {len(body.jobs)}")
        answer = await self.request(
            "POST", "/api/v1/jobs/complete", m.CompleteJobsResponse, body=body, token=self.worker_token
        )
        if [result.id for result in answer.results] != [item.id for item in body.jobs]:
            raise UnexpectedResponse(
                f"POST /api/v1/jobs/complete: {len(answer.results)} answers for {len(body.jobs)} jobs, "
                "or not one per job in request order"
            )
        return answer

    async def post_logs(self, job_id: str, lease_token: str, lines: list[m.NewLogLine]) -> m.PostJobLogsResponse:
        """Append log lines to a job this worker holds: ``POST /api/v1/jobs/{id}/logs`` (an extension;
        a server without it answers 404). At most `MAX_LOG_LINES` lines whose messages take at most
        `MAX_LOG_CALL_BYTES` of UTF-8 in all (a `ValueError` here otherwise). Lines posted after the
        job's attempt ended are kept while the token is the job's latest lease; once the job is
        leased again it is a `Conflict`. Not idempotent: each call appends."""
        if len(lines) > m.MAX_LOG_LINES:
            raise ValueError(f"post_logs takes at most {m.MAX_LOG_LINES} lines, not {len(lines)}")
        size = sum(len(line.message.encode()) for line in lines)
        if size > m.MAX_LOG_CALL_BYTES:
            raise ValueError(f"post_logs takes at most {m.MAX_LOG_CALL_BYTES} bytes of messages, not {size}")
        body = m.PostJobLogsRequest(lease_token=lease_token, lines=list(lines))
        return await self.request(
            "POST", f"/api/v1/jobs/{_seg(job_id)}/logs", m.PostJobLogsResponse, body=body, token=self.worker_token
        )

    async def fail(self, job_id: str, lease_token: str, error: str, retryable: bool = True) -> None:
        """Record a failure: ``POST /api/v1/jobs/{id}/fail``. ``retryable=False`` dead-letters the
        job at once; otherwise it is retried while its budget lasts."""
        body = m.FailJobRequest(lease_token=lease_token, error=error, retryable=retryable)
        await self.request("POST", f"/api/v1/jobs/{_seg(job_id)}/fail", body=body, token=self.worker_token)
