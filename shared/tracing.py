"""OpenTelemetry traces (docs/tracing.md): the server's spans for enqueue, lease, complete, fail
and each workflow advance, exported over OTLP (HTTP/protobuf) by the official Python SDK.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and
`OTEL_SDK_DISABLED` is not `true`, nor `OTEL_TRACES_EXPORTER` `none`). Off costs nothing: this module
imports no OpenTelemetry package at import time, `start` answers None without importing one, and
the hot paths (claim, complete, enqueue) only ask whether the tracer they hold is None. On, the
SDK reads every other standard `OTEL_*` variable itself (sampler, batch processor, exporter
headers, timeouts, resource attributes); the service name defaults to `queueflow-<mode>`.

Span context flows through the database, not through the process: a job keeps the trace context
it was created in (shared/domain/traces.py), which is the enqueue span's own when this process
recorded one, else the caller's `traceparent` as given. Lease, complete and fail spans are children
of that context; a lease of a later attempt also links to it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from shared.domain.jobs import Lease, NewJob
from shared.domain.traces import Settled, TraceContext

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Link, Span, SpanContext
    from opentelemetry.util.types import AttributeValue

SYSTEM = "queueflow"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
INSTRUMENTATION = "queueflow"

Attributes = dict[str, "AttributeValue"]


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process exports traces: an OTLP endpoint is set and the SDK is not disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def start(service_name: str, version: str) -> Tracer | None:
    """The process's tracer, exporting over OTLP, or None (nothing imported) when not configured."""
    if not configured():
        return None
    return Tracer.exporting(service_name, version)


def now() -> int:
    """A span's start time (nanoseconds since the epoch), taken before the work it measures."""
    return time.time_ns()


class Publication:
    """An enqueue or workflow-creation span while it is open: `context` is what the new jobs (or
    the workflow) keep; `jobs_created` and `workflow_created` name what was written."""

    def __init__(self, span: Span, context: TraceContext | None) -> None:
        self._span = span
        self.context = context

    def jobs_created(self, ids: Sequence[object]) -> None:
        """A single job's id (a batch's span counts its jobs instead)."""
        if len(ids) == 1:
            self._span.set_attribute("queueflow.job.id", str(ids[0]))
            self._span.set_attribute("messaging.message.id", str(ids[0]))

    def workflow_created(self, workflow_id: str) -> None:
        self._span.set_attribute("queueflow.workflow.id", workflow_id)


class Tracer:
    """The spans the server records, on an SDK tracer provider (`exporting` builds the usual one)."""

    def __init__(self, provider: TracerProvider, version: str) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState

        self._provider = provider
        self._tracer = provider.get_tracer(INSTRUMENTATION, version)
        self._use_span = trace.use_span
        self._in_context = trace.set_span_in_context
        self._NonRecordingSpan = NonRecordingSpan
        self._SpanContext = SpanContext
        self._TraceFlags = TraceFlags
        self._TraceState = TraceState
        self._Link = Link
        self._kind = SpanKind

    @classmethod
    def exporting(cls, service_name: str, version: str) -> Tracer:
        """A tracer whose spans a BatchSpanProcessor sends to the OTLP/HTTP exporter, both
        configured by the standard variables; `service_name` unless OTEL_SERVICE_NAME (or
        OTEL_RESOURCE_ATTRIBUTES) names the service."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create()  # the SDK's defaults and OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        defaults: dict[str, str] = {}
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            defaults["service.name"] = service_name
        if "service.version" not in resource.attributes:
            defaults["service.version"] = version
        provider = TracerProvider(resource=resource.merge(Resource(defaults)))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        return cls(provider, version)

    def shutdown(self) -> None:
        """Export what is buffered and stop (blocking: the exporter's HTTP calls)."""
        self._provider.shutdown()

    # -- trace context ---------------------------------------------------------------------------

    def _span_context(self, trace: TraceContext) -> SpanContext:
        header = trace.traceparent
        return self._SpanContext(
            trace_id=int(header[3:35], 16),
            span_id=int(header[36:52], 16),
            is_remote=True,
            trace_flags=self._TraceFlags(int(header[53:55], 16)),
            trace_state=self._TraceState.from_header([trace.tracestate]) if trace.tracestate else None,
        )

    def _parent(self, trace: TraceContext | None) -> Context | None:
        if trace is None:
            return None
        return self._in_context(self._NonRecordingSpan(self._span_context(trace)))

    @staticmethod
    def _kept(span: Span, parent: TraceContext | None) -> TraceContext | None:
        """What a job keeps: the recorded span's context; a span sampled out, the caller's context,
        or without one the span's own (marked not sampled, so that the job's later spans follow
        the same decision under a parent-based sampler)."""
        ctx = span.get_span_context()
        if (parent is not None and not span.is_recording()) or not ctx.is_valid:
            return parent
        state = ctx.trace_state.to_header() or None
        return TraceContext(f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}", state)

    # -- spans -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def enqueue(
        self, parent: TraceContext | None, tenant: str | None, jobs: Sequence[NewJob]
    ) -> Iterator[Publication]:
        """The span of one enqueue (a job, or a batch: one span for all of it), a child of the
        caller's context; a failure ends it with the exception recorded."""
        queues = {job.queue for job in jobs}
        queue = next(iter(queues)) if len(queues) == 1 else None
        tasks = {job.task_name for job in jobs}
        attributes = _messaging("publish", "enqueue", queue)
        _put(attributes, "queueflow.task.name", next(iter(tasks)) if len(tasks) == 1 else None)
        _put(attributes, "queueflow.tenant", tenant)
        if len(jobs) != 1:
            attributes["messaging.batch.message_count"] = len(jobs)
        span = self._tracer.start_span(
            f"enqueue {queue}" if queue else "enqueue",
            context=self._parent(parent),
            kind=self._kind.PRODUCER,
            attributes=attributes,
        )
        with self._use_span(span, end_on_exit=True):
            yield Publication(span, self._kept(span, parent))

    @contextlib.contextmanager
    def create_workflow(
        self, parent: TraceContext | None, tenant: str | None, name: str
    ) -> Iterator[Publication]:
        """The span of a workflow's creation (its root steps are scheduled inside it); the workflow
        and its steps' jobs keep its context."""
        attributes = _messaging("publish", "create_workflow", None)
        attributes["queueflow.workflow.name"] = name
        _put(attributes, "queueflow.tenant", tenant)
        span = self._tracer.start_span(
            f"create_workflow {name}",
            context=self._parent(parent),
            kind=self._kind.PRODUCER,
            attributes=attributes,
        )
        with self._use_span(span, end_on_exit=True):
            yield Publication(span, self._kept(span, parent))

    @contextlib.contextmanager
    def advance(
        self,
        trace: TraceContext | None,
        workflow_id: str,
        name: str | None,
        tenant: str | None,
        event: str,
        step: str | None,
    ) -> Iterator[None]:
        """The span of applying one outbox event to a workflow, a child of the workflow's context."""
        attributes: Attributes = {"queueflow.workflow.id": workflow_id, "queueflow.workflow.event": event}
        _put(attributes, "queueflow.workflow.name", name)
        _put(attributes, "queueflow.workflow.step", step)
        _put(attributes, "queueflow.tenant", tenant)
        span = self._tracer.start_span(
            f"advance_workflow {name}" if name else "advance_workflow",
            context=self._parent(trace),
            attributes=attributes,
        )
        with self._use_span(span, end_on_exit=True):
            yield

    def leased(self, queue: str, leases: Iterable[Lease], started: int) -> None:
        """One span per leased job, from the claim's start to now, a child of the job's context; a
        later attempt (a retry, a reclaimed lease) also links to that context."""
        ended = time.time_ns()
        for lease in leases:
            job = lease.job
            attributes = _messaging("receive", "lease", queue)
            attributes["messaging.message.id"] = str(job.id)
            attributes["queueflow.job.id"] = str(job.id)
            attributes["queueflow.job.attempt"] = job.delivery_count
            attributes["queueflow.task.name"] = job.task_name
            _put(attributes, "queueflow.tenant", job.tenant_id)
            _put(attributes, "queueflow.workflow.id", job.workflow_id)
            links: list[Link] | None = None
            if lease.trace is not None and job.delivery_count > 1:
                links = [
                    self._Link(
                        self._span_context(lease.trace),
                        {"queueflow.link": "enqueue", "queueflow.job.attempt": job.delivery_count},
                    )
                ]
            span = self._tracer.start_span(
                f"lease {queue}",
                context=self._parent(lease.trace),
                kind=self._kind.CONSUMER,
                attributes=attributes,
                links=links,
                start_time=started,
            )
            span.end(end_time=ended)

    def settled(self, operation: str, outcomes: Iterable[Settled], started: int) -> None:
        """One span per job an outcome statement wrote (`operation`: complete or fail), from the
        statement's start to now, a child of the job's context."""
        ended = time.time_ns()
        for done in outcomes:
            attributes = _messaging("settle", operation, done.queue)
            attributes["messaging.message.id"] = str(done.job_id)
            attributes["queueflow.job.id"] = str(done.job_id)
            attributes["queueflow.job.attempt"] = done.attempt
            attributes["queueflow.job.status"] = done.status
            attributes["queueflow.task.name"] = done.task_name
            _put(attributes, "queueflow.tenant", done.tenant)
            _put(attributes, "queueflow.workflow.id", done.workflow_id)
            span = self._tracer.start_span(
                f"{operation} {done.queue}",
                context=self._parent(done.trace),
                attributes=attributes,
                start_time=started,
            )
            span.end(end_time=ended)


def _messaging(kind: str, operation: str, queue: str | None) -> Attributes:
    """The messaging semantic conventions' attributes of one operation on `queue`."""
    attributes: Attributes = {
        "messaging.system": SYSTEM,
        "messaging.operation": kind,
        "messaging.operation.name": operation,
    }
    _put(attributes, "messaging.destination.name", queue)
    return attributes


def _put(attributes: Attributes, name: str, value: AttributeValue | None) -> None:
    if value is not None:
        attributes[name] = value
