"""The worker loop: lease jobs from a queue, run handlers, heartbeat, and report outcomes.

It implements the remote-worker protocol's rules: heartbeat every held job (those waiting their
turn included) at half the lease; a heartbeat answering anything but ``running``, or a 409, cancels
the handler and nothing is reported; handler errors become retryable failures unless permanent;
401/403 stop the loop; transport errors and 5xx back off with jitter and the loop recovers.

Successes are acknowledged through the batch route (``POST /api/v1/jobs/complete``) when the
server's ``/openapi.json`` lists it, one call per job otherwise (sdks/conformance/README.md, "Batch
acknowledgement"): they wait in a buffer that one flush at a time sends, up to 100 per call, while
the next batch builds up; each job stays held and heartbeated until its acknowledgement is answered.

A handler's concurrency slot frees as soon as the handler returns (or raises), not when its report
is answered: the job stays held (and heartbeated) meanwhile, but no longer stops the loop from
leasing the next batch. What bounds those finished jobs is that the loop leases only while fewer
than ``max(batch_size, concurrency)`` of them still wait for their report's answer.

Visibility (sdks/conformance/README.md, "Visibility"): every lease names the worker (``worker_id``,
and until a lease succeeded what it is); a handler's ``ctx.progress`` and ``ctx.log`` are buffered
per job (``_reports``) and sent by one task for all jobs, each job at most once a second, and what is
left when the handler ends is sent before its outcome; each handler runs inside an OpenTelemetry
span (the API only: without an SDK installed by the application it is a no-op), a child of the
trace context the lease handed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import re
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from unofficial_queueflow_client._reports import (
    DEFAULT_LEVEL,
    MAX_BUFFERED_LINES,
    JobReports,
    check_level,
    check_progress,
)
from unofficial_queueflow_client._version import __version__
from unofficial_queueflow_client.backoff import Backoff
from unofficial_queueflow_client.client import Client
from unofficial_queueflow_client.errors import (
    ApiError,
    BadRequest,
    Conflict,
    MethodNotAllowed,
    NotFound,
    TransportError,
    UnexpectedResponse,
    error_for_item,
)
from unofficial_queueflow_client.models import (
    MAX_COMPLETIONS,
    CompletionItem,
    Job,
    LeasedJob,
    NewLogLine,
    WorkerInfo,
)

__all__ = ["Handler", "JobContext", "Worker"]

log = logging.getLogger("unofficial_queueflow_client.worker")

_BATCH_ROUTE = "/api/v1/jobs/complete"
_WORKER_ID = re.compile(r"[!-~]{1,128}")  # what the server takes: 1 to 128 visible ASCII characters
_MAX_INFO_TEXT = 255  # a WorkerInfo's hostname, sdk, version
_MAX_INFO_TASKS = 256
_MAX_TASK_NAME_BYTES = 255
_PROPAGATOR = TraceContextTextMapPropagator()


def default_worker_id() -> str:
    """``<hostname>:<process id>``, the hostname's characters the server would refuse (anything but
    visible ASCII) replaced by ``-`` and the hostname cut so that the whole is at most 128."""
    suffix = f":{os.getpid()}"
    host = re.sub(r"[^!-~]", "-", socket.gethostname()) or "localhost"
    return host[: 128 - len(suffix)] + suffix


@dataclass(eq=False)
class JobContext:
    """What a handler gets: the job, its lease token, its cancellation signal, and where it reports
    how far it got (`progress`) and what it did (`log`).

    ``cancelled`` is set when the server takes the job back (cancelled, finished elsewhere, or the
    lease was lost) or the worker shuts down past its drain timeout. A cooperative handler awaits
    it (or checks ``is_cancelled``) and returns; one that does not is cancelled with
    `asyncio.CancelledError` after the worker's ``cancel_grace`` seconds. Nothing is reported for a
    cancelled job either way: the server owns its outcome.

    ``traceparent`` and ``tracestate`` are the W3C trace context the job was created in, when it has
    one; the worker already runs the handler in a span that continues it.
    """

    job: Job
    lease_token: str
    client: Client
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_reason: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    _task: asyncio.Task[Any] | None = field(default=None, repr=False)
    _beat_at: float = field(default=0.0, repr=False)  # when its next heartbeat is due (monotonic)
    _beating: asyncio.Task[None] | None = field(default=None, repr=False)
    _started_at: float = field(default=0.0, repr=False)  # when its handler started (monotonic)
    _reports: JobReports | None = field(default=None, repr=False)  # made at the first progress or log
    _posting: asyncio.Task[bool] | None = field(default=None, repr=False)  # its logs call in flight
    _lease_lost: bool = field(default=False, repr=False)  # a heartbeat answered 409 or 404
    _on_report: Callable[[JobContext], None] | None = field(default=None, repr=False)  # wakes the sender

    def progress(self, percent: float, message: str | None = None) -> None:
        """Report how far the job got: ``percent`` from 0 to 100, an optional ``message`` of at most
        1,024 characters (else `ValueError`, and nothing is recorded). Nothing is sent from here: the
        latest report travels on the job's next heartbeat, which a new report brings forward (at
        most one early heartbeat a second); a report still unsent when the handler ends is sent
        before its outcome. The server shows it as the job's ``progress``."""
        report = check_progress(percent, message)
        reports = self._writable_reports()
        reports.progress(report)
        self._signal(reports)

    def log(self, message: str, level: str = DEFAULT_LEVEL) -> None:
        """Append a line to the job's log (``level``: 1 to 16 letters, such as ``info``, ``warn`` or
        ``error``; else `ValueError`). Nothing is sent from here: the worker posts the job's lines at
        most once a second, up to 100 lines (64 KiB) a call, and the rest when the handler ends,
        before its outcome; a message longer than 64 KiB is cut. Lines past 10,000 waiting in the
        buffer are dropped (and counted in this SDK's log). Failures to store them are logged and
        never change the job's outcome. Read them back with `Client.job_logs`."""
        reports = self._writable_reports()
        reports.log(message, check_level(level), datetime.now(UTC))
        self._signal(reports)

    def _writable_reports(self) -> JobReports:
        reports = self._reports
        if reports is None:
            reports = self._reports = JobReports(self._started_at)
        return reports

    def _signal(self, reports: JobReports) -> None:
        if not reports.queued and self._on_report is not None:
            reports.queued = True
            self._on_report(self)

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload

    @property
    def is_cancelled(self) -> bool:
        return self.cancelled.is_set()

    async def wait_cancelled(self) -> str | None:
        """Wait for the cancellation signal; returns the reason."""
        await self.cancelled.wait()
        return self.cancel_reason


Handler = Callable[[JobContext], Awaitable[Any] | Any]


@dataclass(frozen=True, slots=True)
class _Outcome:
    ok: bool
    result: dict[str, Any] | None = None
    error: str = ""
    retryable: bool = True


@dataclass(eq=False, slots=True)
class _Ack:
    """A success waiting in the acknowledgement buffer. Its holder awaits ``answered``: True once the
    batch route answered for it (or it was given up), False when it is to be sent one call per job."""

    ctx: JobContext
    result: dict[str, Any]
    deadline: float
    answered: asyncio.Future[bool]

    def settle(self, answered: bool) -> None:
        if not self.answered.done():  # done: its holder was cancelled meanwhile
            self.answered.set_result(answered)


def _result_of(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value)
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"a handler must return a dict (or None), not {type(value).__name__}")


def _failure_of(exc: BaseException) -> _Outcome:
    message = str(exc) or type(exc).__name__
    retryable = getattr(exc, "retryable", True) is not False
    return _Outcome(ok=False, error=message, retryable=retryable)


class Worker:
    """Runs ``handlers`` (task name -> handler) for the jobs of ``queue``.

    A handler takes a `JobContext` and returns a dict (the job's result; ``None`` means ``{}``),
    or raises: `PermanentError` (or any exception with ``retryable = False``) dead-letters the job,
    anything else is a retryable failure. Handlers may be coroutines or plain functions.

    ``lease_secs``: each lease and heartbeat extension; heartbeats go every ``lease_secs / 2``.
    ``wait_secs``: the lease long-poll (<= 30). ``concurrency``: handlers at once; a handler's
    slot frees when it returns, while its job stays held until its report is answered.
    ``batch_size``: jobs per lease (default ``concurrency``); extra jobs wait their turn, heartbeated.
    The loop leases when a slot is free and fewer than ``max(batch_size, concurrency)`` finished
    jobs wait for their report's answer, so it holds fewer than twice that many jobs.
    ``drain_timeout``: on `stop`, how long in-flight jobs may take before they are cancelled.
    ``cancel_grace``: how long a handler whose job was taken back may take to return on its own.

    Successes are acknowledged many per call (``POST /api/v1/jobs/complete``) when the server offers
    that route, which `run` asks ``GET /openapi.json`` before its first acknowledgement; otherwise,
    and for failures, one call per job.

    ``worker_id`` names this worker on every lease (default `default_worker_id`, ``<hostname>:<pid>``;
    1 to 128 visible ASCII characters): the server records it as the worker of each attempt and
    lists the worker (with its host, SDK, version and task names, sent until a lease succeeded) in
    ``GET /api/v1/workers``. Each handler runs inside a ``process <queue>`` consumer span of the
    OpenTelemetry API (``tracer_provider``, default the global one), the child of the job's trace
    context; handlers report progress and log lines through their `JobContext`.

    `run` returns after `stop` once the jobs in hand are done; it raises `Unauthorized` /
    `Forbidden` (and other non-retryable 4xx answers to a lease) instead of spinning.
    """

    def __init__(
        self,
        client: Client,
        queue: str,
        handlers: Mapping[str, Handler],
        lease_secs: int = 30,
        wait_secs: int = 20,
        concurrency: int = 1,
        batch_size: int | None = None,
        *,
        drain_timeout: float = 30.0,
        cancel_grace: float = 1.0,
        backoff: Backoff | None = None,
        worker_id: str | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if not 1 <= lease_secs <= 3600:
            raise ValueError("lease_secs must be within 1..=3600")
        if not 0 <= wait_secs <= 30:
            raise ValueError("wait_secs must be within 0..=30")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if batch_size is not None and not 1 <= batch_size <= 100:
            raise ValueError("batch_size must be within 1..=100")
        if worker_id is not None and not _WORKER_ID.fullmatch(worker_id):
            raise ValueError("worker_id must be 1 to 128 visible ASCII characters (no space)")
        self.client = client
        self.queue = queue
        self.handlers = dict(handlers)
        self.lease_secs = lease_secs
        self.wait_secs = wait_secs
        self.concurrency = concurrency
        self.batch_size = batch_size if batch_size is not None else min(concurrency, 100)
        self.drain_timeout = drain_timeout
        self.cancel_grace = cancel_grace
        self.backoff = backoff or Backoff()
        self.worker_id = worker_id if worker_id is not None else default_worker_id()
        tasks = sorted(name for name in self.handlers if 1 <= len(name.encode()) <= _MAX_TASK_NAME_BYTES)
        self.worker_info = WorkerInfo(
            hostname=socket.gethostname()[:_MAX_INFO_TEXT],
            sdk="python",
            version=__version__,
            tasks=tasks[:_MAX_INFO_TASKS],
        )
        self._tracer = trace.get_tracer("unofficial_queueflow_client", __version__, tracer_provider)
        self._introduced = False  # a lease with `info` succeeded: later ones leave it out
        self._stopping = False
        self._running = False
        self._wake: asyncio.Event | None = None
        self._slots: _Slots | None = None
        self._held: dict[str, asyncio.Task[None]] = {}
        # Held jobs whose handler is done and whose report is not answered yet (out of _held): they
        # no longer take a slot, and leasing waits while there are max(batch_size, concurrency).
        self._settling = 0
        self._contexts: dict[str, JobContext] = {}
        self._heartbeats: set[asyncio.Task[None]] = set()  # heartbeat calls in flight
        # Progress and logs: the jobs with something to send while their handler runs, the task that
        # sends it, what wakes that task, and the logs calls in flight.
        self._reporting: set[JobContext] = set()
        self._reporter: asyncio.Task[None] | None = None
        self._report_wake = asyncio.Event()
        self._posts: set[asyncio.Task[bool]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._beater: asyncio.Task[None] | None = None  # sends the held jobs' heartbeats when due
        self._beat_wake = asyncio.Event()
        # The beat loop looks every tick for heartbeats due; a job's is due a tick before its half
        # lease, so it is sent within [lease/2 - tick, lease/2] of the previous one.
        self._beat_tick = max(0.05, min(1.0, lease_secs / 8))
        self._beat_every = lease_secs / 2 - self._beat_tick
        # The batch acknowledgement: whether the server offers it (None: not known yet), the
        # successes waiting for the next flush, those of the flush in flight, and the flushing task.
        self._batch_route: bool | None = None
        self._acks: deque[_Ack] = deque()
        self._sending: list[_Ack] = []
        self._flusher: asyncio.Task[None] | None = None

    # --- public ----------------------------------------------------------------------------------

    @property
    def held(self) -> int:
        """Jobs this worker holds: running, waiting their turn, or being reported (their handler
        done, their slot free, their report not answered yet)."""
        return len(self._held)

    def stop(self) -> None:
        """Ask the loop to stop gracefully: no new leases; the jobs in hand finish (up to
        ``drain_timeout``), then `run` returns. A lease already waiting completes first (at most
        ``wait_secs``). Call it from the event loop's thread."""
        self._stopping = True
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """Lease and run jobs until `stop`."""
        if self._running:
            raise RuntimeError("this worker is already running")
        self._running = True
        self._wake = asyncio.Event()
        self._slots = _Slots(self.concurrency)
        self._settling = 0
        self._batch_route = None  # asked again for each run: the server may have changed
        self._introduced = False  # so is what the worker is
        self._loop = asyncio.get_running_loop()
        self._beat_wake = asyncio.Event()
        self._report_wake = asyncio.Event()
        self._beater = asyncio.create_task(self._beat_loop(), name="queueflow-heartbeats")
        self._reporter = asyncio.create_task(self._report_loop(), name="queueflow-reports")
        try:
            try:
                await self._lease_loop()
            except BaseException:
                await self._abandon_all("worker stopped by an error")
                raise
            finally:
                self._running = False
            try:
                await self._drain()  # the held jobs include those waiting for their acknowledgement
            finally:
                await self._stop_flushing()
        finally:
            self._beater.cancel()
            self._reporter.cancel()
            await asyncio.gather(self._beater, self._reporter, return_exceptions=True)
            self._reporting.clear()

    # --- the lease loop ----------------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        assert self._wake is not None
        capacity = max(self.batch_size, self.concurrency)
        while not self._stopping:
            if self._lease_waits(capacity):
                self._wake.clear()
                if self._lease_waits(capacity) and not self._stopping:
                    await self._wake.wait()
                continue
            unfinished = len(self._held) - self._settling  # running or waiting their turn
            max_jobs = max(1, min(self.batch_size, capacity - unfinished))
            try:
                leased = await self.client.lease(
                    self.queue,
                    max_jobs=max_jobs,
                    lease_secs=self.lease_secs,
                    wait_secs=self.wait_secs,
                    worker_id=self.worker_id,
                    worker=None if self._introduced else self.worker_info,
                )
            except ApiError as err:
                if not err.retryable:
                    log.error("lease on %s rejected: %s", self.queue, err)
                    raise
                await self._back_off(f"lease on {self.queue} failed: {err}")
                continue
            except (TransportError, UnexpectedResponse) as err:
                await self._back_off(f"lease on {self.queue} failed: {err}")
                continue
            self.backoff.reset()
            self._introduced = True
            for item in leased.jobs:
                self._take(item)

    def _lease_waits(self, capacity: int) -> bool:
        """Whether the next lease must wait: no handler slot is free (the jobs running or waiting
        their turn fill them all), or ``capacity`` finished jobs still wait for their report."""
        return len(self._held) - self._settling >= self.concurrency or self._settling >= capacity

    async def _back_off(self, why: str) -> None:
        assert self._wake is not None
        delay = self.backoff.next()
        log.warning("%s; retrying in %.2fs", why, delay)
        self._wake.clear()
        if self._stopping:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()  # stop() cuts the wait short

    def _take(self, item: LeasedJob) -> None:
        ctx = JobContext(
            job=item.job,
            lease_token=item.lease_token,
            client=self.client,
            traceparent=item.traceparent,
            tracestate=item.tracestate,
            _on_report=self._reports_pending,
        )
        ctx._beat_at = time.monotonic() + self._beat_every
        job_id = item.job.id
        if not self._contexts:
            self._beat_wake.set()
        self._contexts[job_id] = ctx
        # Unnamed: a task name per job costs more than the rest of the task's creation.
        self._held[job_id] = asyncio.create_task(self._hold(ctx))

    # --- one held job ----------------------------------------------------------------------------

    async def _hold(self, ctx: JobContext) -> None:
        assert self._slots is not None
        job_id = ctx.job.id
        settling = False
        try:
            async with self._slots:
                if ctx.is_cancelled:  # taken back while it waited its turn
                    log.info("job %s was taken back before it ran (%s)", job_id, ctx.cancel_reason)
                    return
                outcome = await self._execute(ctx)
            if outcome is not None or ctx._reports is not None:
                # The handler's slot is free again; the job stays held (and heartbeated) until
                # what it reported and its outcome are sent, counted among those the loop's lease
                # bound waits for.
                settling = True
                self._settling += 1
                if self._wake is not None:
                    self._wake.set()
                await self._finish_reports(ctx, outcome is not None)
                if outcome is not None:
                    await self._report(ctx, outcome)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug in the runtime itself: never let it kill the loop silently
            log.exception("job %s: unexpected worker error", job_id)
        finally:
            if ctx._beating is not None:
                ctx._beating.cancel()
            if ctx._posting is not None:
                ctx._posting.cancel()
            self._reporting.discard(ctx)
            if settling:
                self._settling -= 1
            self._held.pop(job_id, None)
            self._contexts.pop(job_id, None)
            if self._wake is not None:
                self._wake.set()

    async def _execute(self, ctx: JobContext) -> _Outcome | None:
        """Run the handler; the outcome to report, or None when nothing may be reported."""
        handler = self.handlers.get(ctx.job.task_name)
        if handler is None:
            return _Outcome(ok=False, error=f"no worker handler for task '{ctx.job.task_name}'", retryable=False)
        ctx._started_at = time.monotonic()
        span = self._start_span(ctx)
        try:
            task = asyncio.create_task(self._invoke(handler, ctx, span))
            ctx._task = task
            outcome = await self._outcome_of(ctx, task, span)
            if outcome is not None and not outcome.ok:
                span.set_status(Status(StatusCode.ERROR, outcome.error))
            return outcome
        finally:
            span.end()

    async def _outcome_of(self, ctx: JobContext, task: asyncio.Task[Any], span: Span) -> _Outcome | None:
        try:
            value = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if ctx.is_cancelled and (current is None or not current.cancelling()):
                log.info("job %s: handler cancelled (%s); reporting nothing", ctx.job.id, ctx.cancel_reason)
                return None
            raise
        except Exception as exc:
            if ctx.is_cancelled:
                log.info(
                    "job %s: handler raised after cancellation (%s); reporting nothing", ctx.job.id, ctx.cancel_reason
                )
                return None
            span.record_exception(exc)
            return _failure_of(exc)
        if ctx.is_cancelled:
            log.info(
                "job %s: handler returned after cancellation (%s); reporting nothing", ctx.job.id, ctx.cancel_reason
            )
            return None
        try:
            return _Outcome(ok=True, result=_result_of(value))
        except TypeError as exc:
            return _Outcome(ok=False, error=str(exc), retryable=False)

    def _start_span(self, ctx: JobContext) -> Span:
        """The handler's span: ``process <queue>``, a consumer span whose parent is the job's trace
        context (a root span when it has none, whatever span is current in the worker's task)."""
        parent = Context()
        if ctx.traceparent:
            carrier = {"traceparent": ctx.traceparent}
            if ctx.tracestate:
                carrier["tracestate"] = ctx.tracestate
            parent = _PROPAGATOR.extract(carrier, context=parent)
        job = ctx.job
        return self._tracer.start_span(
            f"process {self.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "queueflow",
                "messaging.operation": "process",
                "messaging.destination.name": self.queue,
                "messaging.message.id": job.id,
                "queueflow.task.name": job.task_name,
                "queueflow.job.attempt": job.delivery_count,
            },
        )

    @staticmethod
    async def _invoke(handler: Handler, ctx: JobContext, span: Span) -> Any:
        # The span is current in the handler's task (and what it starts): its spans are children.
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            value = handler(ctx)
            if inspect.isawaitable(value):
                value = await value
            return value

    def _take_back(self, ctx: JobContext, reason: str) -> None:
        """The server owns the job now: signal the handler, and cancel it after the grace period."""
        if ctx.is_cancelled:
            return
        ctx.cancel_reason = reason
        ctx.cancelled.set()
        task = ctx._task
        if task is not None and not task.done():
            asyncio.get_running_loop().call_later(self.cancel_grace, task.cancel)

    async def _beat_loop(self) -> None:
        """One task for every held job's heartbeat (not a sleeping task per job): a job is
        heartbeated every half lease, held or settling, and sooner again after a failed call."""
        tick = self._beat_tick
        while True:
            if not self._contexts:
                self._beat_wake.clear()
                await self._beat_wake.wait()
            await asyncio.sleep(tick)
            now = time.monotonic()
            for ctx in list(self._contexts.values()):
                if ctx._beat_at <= now and ctx._beating is None and not ctx.is_cancelled:
                    self._start_heartbeat(ctx)

    def _start_heartbeat(self, ctx: JobContext) -> None:
        ctx._beating = beating = asyncio.create_task(self._heartbeat(ctx))
        self._heartbeats.add(beating)
        beating.add_done_callback(self._heartbeats.discard)

    async def _heartbeat(self, ctx: JobContext) -> None:
        """Extend the job's lease, carrying its latest progress report when the server does not
        have it yet."""
        interval = self.lease_secs / 2
        reports = ctx._reports
        unsent = None
        if reports is not None:
            reports.beat_at = time.monotonic()
            unsent = reports.progress_to_send()
        try:
            answer = await self.client.heartbeat(
                ctx.job.id, ctx.lease_token, self.lease_secs, progress=None if unsent is None else unsent[0]
            )
        except (Conflict, NotFound) as err:
            ctx._lease_lost = True
            self._take_back(ctx, f"lease lost: HTTP {err.status}")
            return
        except (ApiError, TransportError, UnexpectedResponse) as err:
            if reports is not None and unsent is not None and isinstance(err, BadRequest):
                # The server refused the report, not the lease: give the report up and heartbeat
                # again without it at once (this call extended nothing).
                log.warning("job %s: progress report refused: %s", ctx.job.id, err)
                reports.progress_sent(unsent[1])
                ctx._beat_at = time.monotonic()
                return
            log.warning("job %s: heartbeat failed: %s", ctx.job.id, err)
            ctx._beat_at = time.monotonic() + max(0.2, interval / 4)  # the lease is running out: sooner
            return
        finally:
            ctx._beating = None
            if ctx in self._reporting:
                self._report_wake.set()  # a newer report may wait for this call to end
        if reports is not None and unsent is not None:
            reports.progress_sent(unsent[1])
        if answer.status != "running":
            self._take_back(ctx, f"job is {answer.status}")
            return
        ctx._beat_at = time.monotonic() + self._beat_every

    # --- progress and logs -------------------------------------------------------------------------

    def _reports_pending(self, ctx: JobContext) -> None:
        """A handler reported progress or logged while its job had nothing waiting to be sent (its
        context's hook; a handler's thread may call it too)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._add_reporting(ctx)
        else:  # from a thread of the handler's (asyncio.to_thread)
            loop.call_soon_threadsafe(self._add_reporting, ctx)

    def _add_reporting(self, ctx: JobContext) -> None:
        if ctx.job.id in self._contexts and ctx._reports is not None and not ctx._reports.closed:
            self._reporting.add(ctx)
            self._report_wake.set()

    async def _report_loop(self) -> None:
        """One task for every running handler's progress and logs (not a task per job): it posts a
        job's buffered lines and brings its heartbeat forward for a new progress report, each at
        most once per REPORT_INTERVAL per job, and sleeps until the next one is due. What is left
        when a handler ends is the job's own final flush (`_finish_reports`)."""
        wake = self._report_wake
        while True:
            wake.clear()
            now = time.monotonic()
            soonest: float | None = None
            for ctx in list(self._reporting):
                reports = ctx._reports
                if reports is None or reports.closed or ctx.is_cancelled:
                    self._reporting.discard(ctx)
                    continue
                logs_due = reports.logs_due()
                if logs_due is not None and ctx._posting is None:
                    if logs_due <= now:
                        reports.logs_at = now
                        self._start_post(ctx, reports.take_lines())
                    else:
                        soonest = logs_due if soonest is None else min(soonest, logs_due)
                progress_due = reports.progress_due()
                if progress_due is not None and ctx._beating is None:
                    if progress_due <= now:
                        self._start_heartbeat(ctx)
                    else:
                        soonest = progress_due if soonest is None else min(soonest, progress_due)
                if logs_due is None and progress_due is None:
                    # Nothing waits (a call in flight may still end with a failure: the report it
                    # carried is then due again, and its end wakes this loop while the job is here).
                    self._reporting.discard(ctx)
                    reports.queued = False
            if soonest is None:
                await wake.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, soonest - now)):
                        await wake.wait()

    def _start_post(self, ctx: JobContext, lines: list[NewLogLine]) -> None:
        ctx._posting = posting = asyncio.create_task(self._post_logs(ctx, lines))
        self._posts.add(posting)
        posting.add_done_callback(self._posts.discard)

    async def _post_logs(self, ctx: JobContext, lines: list[NewLogLine]) -> bool:
        """One logs call; whether it stored the lines. A failure is logged, never retried (a call
        whose answer was lost may have been stored: lines are sent at most once) and never touches
        the job's outcome; one that says no later call can succeed for this job (lease lost, job or
        route gone, the job's log cap reached) stops its logs."""
        reports = ctx._reports
        assert reports is not None
        job_id = ctx.job.id
        try:
            answer = await self.client.post_logs(job_id, ctx.lease_token, lines)
        except (Conflict, NotFound, MethodNotAllowed) as err:
            given_up = reports.stop(f"HTTP {err.status}")
            reports.lost += len(lines)
            log.info(
                "job %s: %d log line(s) not stored (%s); no more are sent for this job (%d given up)",
                job_id,
                len(lines),
                err,
                given_up,
            )
        except (ApiError, TransportError, UnexpectedResponse) as err:
            reports.lost += len(lines)
            log.warning("job %s: %d log line(s) not stored: %s", job_id, len(lines), err)
        else:
            if answer.dropped:
                given_up = reports.stop("the job's log cap is reached")
                log.info(
                    "job %s: the server dropped %d log line(s) past the job's log cap; no more are sent (%d given up)",
                    job_id,
                    answer.dropped,
                    given_up,
                )
            return True
        finally:
            if ctx._posting is asyncio.current_task():
                ctx._posting = None
            if ctx in self._reporting:
                self._report_wake.set()
        return False

    async def _finish_reports(self, ctx: JobContext, with_progress: bool) -> None:
        """The handler ended: send what it reported that is still buffered, before its outcome: the
        log lines (after the call in flight, if any), then the latest progress report in one
        heartbeat if the server does not have it (``with_progress``: an outcome will be reported).
        Failures are logged; the outcome stays what it is."""
        reports = ctx._reports
        if reports is None:
            return
        reports.closed = True
        self._reporting.discard(ctx)
        job_id = ctx.job.id
        if ctx._posting is not None:
            await asyncio.wait([ctx._posting])
        if ctx._lease_lost:
            reports.stop("the lease was lost")
        while reports.has_lines:
            reports.logs_at = time.monotonic()
            if not await self._post_logs(ctx, reports.take_lines()):
                given_up = reports.stop("a logs call failed")  # an outage must not hold the outcome back
                if given_up:
                    log.warning("job %s: %d more log line(s) not sent", job_id, given_up)
                break
        reports.stop("the handler has ended")  # a line logged from now on is not sent
        if reports.dropped:
            log.warning(
                "job %s: %d log line(s) dropped: more than %d waited to be sent",
                job_id,
                reports.dropped,
                MAX_BUFFERED_LINES,
            )
        if not with_progress or ctx.is_cancelled:
            return
        if ctx._beating is not None:
            await asyncio.wait([ctx._beating])  # it may carry the latest report already
        unsent = reports.progress_to_send()
        if unsent is None:
            return
        reports.beat_at = time.monotonic()
        try:
            await self.client.heartbeat(job_id, ctx.lease_token, self.lease_secs, progress=unsent[0])
        except (ApiError, TransportError, UnexpectedResponse) as err:
            log.warning("job %s: last progress report not sent: %s", job_id, err)
        else:
            reports.progress_sent(unsent[1])

    def _retry_backoff(self) -> Backoff:
        """A back-off for retrying a report: the loop's settings, its own count."""
        b = self.backoff
        return Backoff(initial=b.initial, maximum=b.maximum, factor=b.factor, jitter=b.jitter)

    @property
    def _report_window(self) -> float:
        """How long a report is retried before it is given up (the lease has long expired by then)."""
        return max(30.0, 2.0 * self.lease_secs)

    async def _report(self, ctx: JobContext, outcome: _Outcome) -> None:
        """Report the outcome: a success through the batch acknowledgement unless the server is
        known not to offer it (or the batch path hands it back); a failure one call per job."""
        if outcome.ok and self._batch_route is not False and await self._acknowledge(ctx, outcome.result or {}):
            return
        await self._report_one(ctx, outcome)

    async def _report_one(self, ctx: JobContext, outcome: _Outcome) -> None:
        """Send the outcome, retrying transport errors and 5xx (complete and fail are safe to
        repeat with the same token). A rejected report is logged, never turned into a failure."""
        backoff = self._retry_backoff()
        deadline = time.monotonic() + self._report_window
        what = "complete" if outcome.ok else "fail"
        while True:
            if ctx.is_cancelled:
                log.info("job %s: not reporting %s (%s)", ctx.job.id, what, ctx.cancel_reason)
                return
            try:
                if outcome.ok:
                    await self.client.complete(ctx.job.id, ctx.lease_token, outcome.result)
                else:
                    await self.client.fail(ctx.job.id, ctx.lease_token, outcome.error, outcome.retryable)
                return
            except ApiError as err:
                if not err.retryable or time.monotonic() >= deadline:
                    log.warning("job %s: %s rejected: %s", ctx.job.id, what, err)
                    return
                problem: Exception = err
            except (TransportError, UnexpectedResponse) as err:
                if time.monotonic() >= deadline:
                    log.warning("job %s: %s not delivered: %s", ctx.job.id, what, err)
                    return
                problem = err
            delay = backoff.next()
            log.warning("job %s: %s failed (%s); retrying in %.2fs", ctx.job.id, what, problem, delay)
            await asyncio.sleep(delay)

    # --- the batch acknowledgement ----------------------------------------------------------------

    async def _acknowledge(self, ctx: JobContext, result: dict[str, Any]) -> bool:
        """Put a success in the buffer and wait until it is answered (True), or handed back to be
        sent one call per job (False). A flush starts at once if none is under way: no timer."""
        answered: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._acks.append(_Ack(ctx, result, time.monotonic() + self._report_window, answered))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="queueflow-acknowledgements")
        return await answered

    async def _flush(self) -> None:
        """Send the buffer, one call at a time and up to 100 jobs per call, until it is empty; the
        successes that come in while a call is in flight make up the next one."""
        backoff = self._retry_backoff()
        try:
            while self._acks:
                if self._batch_route is None:
                    self._batch_route = await self._probe()
                batch = self._next_batch()
                if not batch:
                    continue
                if not self._batch_route:  # not known (this flush only) or not offered (for good)
                    self._hand_back(batch)
                    continue
                self._sending = batch
                problem = await self._send(batch)
                self._sending = []
                if problem is None:
                    backoff.reset()
                    continue
                delay = backoff.next()
                log.warning("acknowledgement failed (%s); retrying in %.2fs", problem, delay)
                await asyncio.sleep(delay)
        except Exception:  # a bug in the runtime itself: the jobs still get reported, one call each
            log.exception("the acknowledgement buffer failed; reporting its jobs one call per job")
            self._hand_back([*self._sending, *self._acks])
            self._sending = []
            self._acks.clear()
        finally:
            if self._flusher is asyncio.current_task():
                self._flusher = None

    async def _probe(self) -> bool | None:
        """Whether the server offers the batch route, from its ``/openapi.json``; None when that
        could not be known now (no answer, or a 5xx): the next flush asks again."""
        try:
            document = await self.client.openapi()
        except TransportError as err:
            log.info("GET /openapi.json failed (%s); acknowledging one call per job for now", err)
            return None
        except ApiError as err:
            if err.status >= 500:
                log.info("GET /openapi.json failed (%s); acknowledging one call per job for now", err)
                return None
            log.info("GET /openapi.json answered %s; acknowledging one call per job", err)
            return False
        except UnexpectedResponse as err:
            log.info("GET /openapi.json is not an API description (%s); acknowledging one call per job", err)
            return False
        offered = document.offers("POST", _BATCH_ROUTE)
        log.info("acknowledging %s", f"through POST {_BATCH_ROUTE}" if offered else "one call per job")
        return offered

    def _next_batch(self) -> list[_Ack]:
        """Up to 100 successes from the front of the buffer, leaving out the jobs taken back
        meanwhile (nothing is reported for those, as for a per-job report)."""
        batch: list[_Ack] = []
        while self._acks and len(batch) < MAX_COMPLETIONS:
            ack = self._acks.popleft()
            if ack.answered.done():
                continue
            if ack.ctx.is_cancelled:
                log.info("job %s: not reporting complete (%s)", ack.ctx.job.id, ack.ctx.cancel_reason)
                ack.settle(True)
                continue
            batch.append(ack)
        return batch

    async def _send(self, batch: list[_Ack]) -> str | None:
        """One call of the batch route. Each item's answer is handled as the per-job route's would
        be; returns what went wrong when some jobs are back in the buffer, to retry after a back-off."""
        items = [CompletionItem(id=a.ctx.job.id, lease_token=a.ctx.lease_token, result=a.result) for a in batch]
        try:
            answer = await self.client.complete_many(items)
        except ApiError as err:
            if err.status in (404, 405):
                log.warning(
                    "POST %s answered %s: the server does not offer it after all; acknowledging one call per "
                    "job from now on",
                    _BATCH_ROUTE,
                    err,
                )
                self._batch_route = False
                self._hand_back(batch)
                return None
            if not err.retryable:  # e.g. a body too large for the server: each job on its own may pass
                log.warning(
                    "POST %s rejected %d job(s) (%s); sending them one call per job", _BATCH_ROUTE, len(batch), err
                )
                self._hand_back(batch)
                return None
            return self._retry_later(batch, err, "rejected")
        except (TransportError, UnexpectedResponse) as err:
            return self._retry_later(batch, err, "not delivered")
        now = time.monotonic()
        again: list[_Ack] = []
        for ack, item in zip(batch, answer.results, strict=True):
            if item.ok:
                ack.settle(True)
                continue
            refusal = error_for_item(item.status, item.error)
            if refusal.retryable and now < ack.deadline:
                again.append(ack)
                continue
            log.warning("job %s: complete rejected: %s", ack.ctx.job.id, refusal)
            ack.settle(True)
        if not again:
            return None
        self._acks.extendleft(reversed(again))
        return f"{len(again)} of {len(batch)} job(s) answered with a status worth retrying"

    def _retry_later(self, batch: list[_Ack], err: Exception, given_up: str) -> str | None:
        """Put a batch that met an outage back at the front of the buffer, but for the jobs whose
        report has been retried for too long (given up, as a per-job report would be)."""
        now = time.monotonic()
        again: list[_Ack] = []
        for ack in batch:
            if now < ack.deadline:
                again.append(ack)
            else:
                log.warning("job %s: complete %s: %s", ack.ctx.job.id, given_up, err)
                ack.settle(True)
        if not again:
            return None
        self._acks.extendleft(reversed(again))
        return f"{len(again)} job(s): {err}"

    @staticmethod
    def _hand_back(acks: Iterable[_Ack]) -> None:
        """Those successes are to be sent one call per job, each by its holder."""
        for ack in acks:
            ack.settle(False)

    async def _stop_flushing(self) -> None:
        """End the flushing task; the successes it still had (none after a full drain) go per job."""
        task, self._flusher = self._flusher, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._hand_back([*self._sending, *self._acks])
        self._sending = []
        self._acks.clear()

    # --- shutdown --------------------------------------------------------------------------------

    async def _drain(self) -> None:
        tasks = list(self._held.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self.drain_timeout)
        if pending:
            log.warning(
                "%d job(s) still running after the %.1fs drain timeout; abandoning them",
                len(pending),
                self.drain_timeout,
            )
            await self._abandon_all("worker shut down before the job finished")

    async def _abandon_all(self, reason: str) -> None:
        """Cancel every held job without reporting (their leases expire and the server redelivers)."""
        for ctx in list(self._contexts.values()):
            if not ctx.is_cancelled:
                ctx.cancel_reason = reason
                ctx.cancelled.set()
        tasks = list(self._held.values()) + list(self._heartbeats) + list(self._posts)
        if self._flusher is not None:
            tasks.append(self._flusher)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._stop_flushing()


class _Slots:
    """Handler slots: a FIFO counting semaphore whose checks cost O(1) (asyncio.Semaphore walks
    its waiters on every acquire on Python 3.11, and a worker acquires one per job)."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release()  # handed a slot in the same instant it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1
