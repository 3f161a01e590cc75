"""Traces (docs/tracing.md): the W3C trace context a job is created in goes through the database to
the worker that leases it, and the server's spans, exported over OTLP/HTTP by real server
processes, continue the caller's trace. The test runs the OTLP receiver itself (an aiohttp app
taking POST /v1/traces) and decodes each request with the official opentelemetry-proto package.
With the OTEL_* variables unset, nothing of OpenTelemetry is imported and the context is still
stored and handed on as the caller sent it."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from devkit import REPO
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": "Bearer dev"}
TENANT = "tenant1"  # what --dev makes of any bearer token
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
TRACESTATE = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"


@dataclass
class Exported:
    """One span as the receiver decoded it: ids in lowercase hex, attributes as plain values."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent: str
    attributes: dict[str, Any]
    links: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    pair: KeyValue
    for pair in pairs:
        found[pair.key] = _value(pair.value)
    return found


class Receiver:
    """An OTLP/HTTP trace receiver: every span of every accepted export request, decoded."""

    def __init__(self) -> None:
        self.spans: list[Exported] = []
        self.requests = 0

    async def traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest.FromString(body)
        self.requests += 1
        for resource_spans in export.resource_spans:
            service = _attributes(resource_spans.resource.attributes).get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(self._decoded(service, span))
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    @staticmethod
    def _decoded(service: str, span: Span) -> Exported:
        return Exported(
            service=service,
            name=span.name,
            kind=span.kind,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent=span.parent_span_id.hex(),
            attributes=_attributes(span.attributes),
            links=[
                (link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes)) for link in span.links
            ],
        )

    def named(self, name: str, **attributes: Any) -> list[Exported]:
        return [
            s
            for s in self.spans
            if s.name == name and all(s.attributes.get(k) == v for k, v in attributes.items())
        ]

    async def one(self, name: str, **attributes: Any) -> Exported:
        """The one span of that name and those attributes, once it has been exported."""

        def exported() -> Exported:
            found = self.named(name, **attributes)
            assert len(found) == 1, f"{name} {attributes}: {found} among {[s.name for s in self.spans]}"
            return found[0]

        return await eventually(exported, timeout=20)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    """The receiver on a free port of 127.0.0.1, and its base URL (OTEL_EXPORTER_OTLP_ENDPOINT)."""
    spans = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", spans.traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield spans, f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def _otel_env(endpoint: str) -> dict[str, str]:
    # A short batch delay, so that spans are exported while the test polls for them.
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}


async def _post(
    http: aiohttp.ClientSession, url: str, body: Any, headers: dict[str, str] | None = None
) -> Any:
    async with http.post(url, json=body, headers={**AUTH, **(headers or {})}) as resp:
        assert resp.status in (200, 201), await resp.text()
        return await resp.json()


async def _lease(http: aiohttp.ClientSession, base: str, queue: str) -> dict[str, Any]:
    """The next job of `queue`, leased over HTTP (long-polls until one comes)."""

    async def leased() -> dict[str, Any] | None:
        answer = await _post(http, f"{base}/api/v1/queues/{queue}/lease", {"max_jobs": 1, "wait_secs": 1})
        return answer["jobs"][0] if answer["jobs"] else None

    return await eventually(leased, timeout=20)


async def _settle(
    http: aiohttp.ClientSession, base: str, item: dict[str, Any], verb: str, **body: Any
) -> None:
    async with http.post(
        f"{base}/api/v1/jobs/{item['job']['id']}/{verb}",
        json={"lease_token": item["lease_token"], **body},
        headers=AUTH,
    ) as resp:
        assert resp.status == 204, await resp.text()


def _parts(traceparent: str) -> tuple[str, str, str]:
    found = re.fullmatch(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})", traceparent)
    assert found is not None, traceparent
    return found.group(1), found.group(2), found.group(3)


async def test_a_job_continues_the_callers_trace_from_enqueue_through_lease_to_complete(
    database_url, service, receiver
):
    spans, endpoint = receiver
    api = await service(database_url, mode="api", env=_otel_env(endpoint))
    async with aiohttp.ClientSession() as http:
        created = await _post(
            http,
            f"{api.base_url}/api/v1/jobs",
            {"task_name": "traced", "config": {"queue": "tq"}},
            {"traceparent": TRACEPARENT, "tracestate": TRACESTATE},
        )
        item = await _lease(http, api.base_url, "tq")
        assert item["job"]["id"] == created["job_id"]
        # The worker gets a context in the caller's trace, sampled, whose parent is the server's
        # enqueue span, and the caller's tracestate.
        trace_id, parent_id, flags = _parts(item["traceparent"])
        assert (trace_id, flags) == (CALLER_TRACE, "01") and parent_id != CALLER_SPAN
        assert item["tracestate"] == TRACESTATE
        await _settle(http, api.base_url, item, "complete", result={"ok": True})

    job_id = created["job_id"]
    enqueue = await spans.one("enqueue tq")
    assert (enqueue.trace_id, enqueue.parent, enqueue.span_id) == (CALLER_TRACE, CALLER_SPAN, parent_id)
    assert enqueue.service == "queueflow-api"
    assert enqueue.kind == Span.SpanKind.SPAN_KIND_PRODUCER
    assert enqueue.attributes == {
        "messaging.system": "queueflow",
        "messaging.operation": "publish",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "tq",
        "messaging.message.id": job_id,
        "queueflow.job.id": job_id,
        "queueflow.task.name": "traced",
        "queueflow.tenant": TENANT,
    }
    lease = await spans.one("lease tq")
    assert (lease.trace_id, lease.parent) == (CALLER_TRACE, enqueue.span_id)
    assert lease.kind == Span.SpanKind.SPAN_KIND_CONSUMER and lease.links == []
    assert lease.attributes == {
        "messaging.system": "queueflow",
        "messaging.operation": "receive",
        "messaging.operation.name": "lease",
        "messaging.destination.name": "tq",
        "messaging.message.id": job_id,
        "queueflow.job.id": job_id,
        "queueflow.job.attempt": 1,
        "queueflow.task.name": "traced",
        "queueflow.tenant": TENANT,
    }
    complete = await spans.one("complete tq")
    assert (complete.trace_id, complete.parent) == (CALLER_TRACE, enqueue.span_id)
    assert complete.attributes["messaging.operation"] == "settle"
    assert complete.attributes["messaging.operation.name"] == "complete"
    assert complete.attributes["queueflow.job.id"] == job_id
    assert complete.attributes["queueflow.job.status"] == "completed"
    assert complete.attributes["queueflow.job.attempt"] == 1


async def test_a_malformed_traceparent_is_ignored_and_a_batch_gets_one_span(database_url, service, receiver):
    spans, endpoint = receiver
    api = await service(database_url, mode="api", env={**_otel_env(endpoint), "OTEL_SERVICE_NAME": "billing"})
    async with aiohttp.ClientSession() as http:
        # Uppercase hex is not a traceparent: no 400, the server starts a trace of its own (and
        # ignores the tracestate that came with it).
        bad = f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01"
        await _post(
            http,
            f"{api.base_url}/api/v1/jobs",
            {"task_name": "fresh", "config": {"queue": "fq"}},
            {"traceparent": bad, "tracestate": TRACESTATE},
        )
        fresh = await _lease(http, api.base_url, "fq")
        batch = await _post(
            http,
            f"{api.base_url}/api/v1/jobs/batch",
            {"jobs": [{"task_name": "b", "config": {"queue": "bq"}} for _ in range(3)]},
            {"traceparent": TRACEPARENT},
        )
        items = [await _lease(http, api.base_url, "bq") for _ in range(3)]

    trace_id, parent_id, _ = _parts(fresh["traceparent"])
    assert trace_id != CALLER_TRACE and "tracestate" not in fresh
    root = await spans.one("enqueue fq")
    assert (root.trace_id, root.span_id, root.parent) == (trace_id, parent_id, "")
    published = await spans.one("enqueue bq")
    assert (published.trace_id, published.parent) == (CALLER_TRACE, CALLER_SPAN)
    assert published.service == root.service == "billing"  # OTEL_SERVICE_NAME wins over the default
    assert published.attributes["messaging.batch.message_count"] == 3
    assert {item["traceparent"] for item in items} == {f"00-{CALLER_TRACE}-{published.span_id}-01"}
    assert sorted(item["job"]["id"] for item in items) == sorted(batch["job_ids"])


async def test_a_retry_keeps_the_context_and_its_lease_links_to_the_enqueue(database_url, service, receiver):
    spans, endpoint = receiver
    api = await service(database_url, mode="api", env=_otel_env(endpoint))
    config = {"queue": "rq", "max_retries": 2, "retry_delay_secs": 0, "jitter_factor": 0}
    async with aiohttp.ClientSession() as http:
        created = await _post(
            http,
            f"{api.base_url}/api/v1/jobs",
            {"task_name": "flaky", "config": config},
            {"traceparent": TRACEPARENT},
        )
        first = await _lease(http, api.base_url, "rq")
        await _settle(http, api.base_url, first, "fail", error="boom", retryable=True)
        second = await _lease(http, api.base_url, "rq")
        assert second["job"]["id"] == created["job_id"] and second["job"]["delivery_count"] == 2
        assert second["traceparent"] == first["traceparent"]  # the original context, again
        await _settle(http, api.base_url, second, "complete")

    enqueue = await spans.one("enqueue rq")
    failed = await spans.one("fail rq")
    assert (failed.trace_id, failed.parent) == (CALLER_TRACE, enqueue.span_id)
    assert failed.attributes["queueflow.job.status"] == "retrying"
    assert failed.attributes["queueflow.job.attempt"] == 1
    leased = await spans.one("lease rq", **{"queueflow.job.attempt": 1})
    assert leased.links == []
    again = await spans.one("lease rq", **{"queueflow.job.attempt": 2})
    assert (again.trace_id, again.parent) == (CALLER_TRACE, enqueue.span_id)
    assert again.links == [
        (CALLER_TRACE, enqueue.span_id, {"queueflow.link": "enqueue", "queueflow.job.attempt": 2})
    ]
    done = await spans.one("complete rq")
    assert done.attributes["queueflow.job.attempt"] == 2


async def test_a_workflows_steps_inherit_its_context_and_each_advance_is_a_span(
    database_url, service, receiver
):
    spans, endpoint = receiver
    env = _otel_env(endpoint)
    api = await service(database_url, mode="api", env=env)
    await service(database_url, mode="workflow", env=env)
    definition = {
        "name": "traced-flow",
        "steps": [
            {"name": "a", "task_name": "first", "queue": "wq"},
            {"name": "nap", "sleep_secs": 1, "depends_on": ["a"]},
            {"name": "b", "task_name": "second", "queue": "wq", "depends_on": ["nap"]},
        ],
    }
    async with aiohttp.ClientSession() as http:
        created = await _post(
            http, f"{api.base_url}/api/v1/workflows", definition, {"traceparent": TRACEPARENT}
        )
        wf_id = created["workflow_id"]
        a = await _lease(http, api.base_url, "wq")
        assert a["job"]["workflow_id"] == wf_id
        await _settle(http, api.base_url, a, "complete", result={"n": 1})
        b = await _lease(http, api.base_url, "wq")  # scheduled by the workflow process
        assert b["job"]["workflow_id"] == wf_id and b["job"]["task_name"] == "second"
        await _settle(http, api.base_url, b, "complete")

    create = await spans.one("create_workflow traced-flow")
    assert (create.trace_id, create.parent, create.service) == (CALLER_TRACE, CALLER_SPAN, "queueflow-api")
    assert create.attributes["queueflow.workflow.id"] == wf_id
    assert create.attributes["queueflow.tenant"] == TENANT
    # Both steps' jobs carry the workflow's context: the span that created it.
    inherited = f"00-{CALLER_TRACE}-{create.span_id}-01"
    assert a["traceparent"] == inherited and b["traceparent"] == inherited
    # The workflow process applied step a's outcome (arming the sleep), the sleep's end (a timer
    # lane's wake-up, scheduling b) and b's outcome (settling the workflow).
    for step, event in (("a", "job"), ("nap", "timer"), ("b", "job")):
        advance = await spans.one("advance_workflow traced-flow", **{"queueflow.workflow.step": step})
        assert (advance.trace_id, advance.parent) == (CALLER_TRACE, create.span_id)
        assert advance.service == "queueflow-workflow"
        assert advance.attributes["queueflow.workflow.id"] == wf_id
        assert advance.attributes["queueflow.workflow.event"] == event
    for task in ("first", "second"):
        lease = await spans.one("lease wq", **{"queueflow.task.name": task})
        assert (lease.trace_id, lease.parent) == (CALLER_TRACE, create.span_id)
        assert lease.attributes["queueflow.workflow.id"] == wf_id


async def test_the_sdk_reads_the_sampler_and_a_job_follows_its_decision(database_url, service, receiver):
    """OTEL_TRACES_SAMPLER=always_off: nothing is exported, even at shutdown, and a job keeps the
    caller's context, or without one an unsampled context of its own."""
    spans, endpoint = receiver
    api = await service(
        database_url, mode="api", env={**_otel_env(endpoint), "OTEL_TRACES_SAMPLER": "always_off"}
    )
    async with aiohttp.ClientSession() as http:
        await _post(
            http,
            f"{api.base_url}/api/v1/jobs",
            {"task_name": "s", "config": {"queue": "sq"}},
            {"traceparent": TRACEPARENT},
        )
        followed = await _lease(http, api.base_url, "sq")
        await _post(http, f"{api.base_url}/api/v1/jobs", {"task_name": "s", "config": {"queue": "sq"}})
        own = await _lease(http, api.base_url, "sq")
        await _settle(http, api.base_url, own, "complete")
    assert followed["traceparent"] == TRACEPARENT
    trace_id, _, flags = _parts(own["traceparent"])
    assert trace_id != CALLER_TRACE and not int(flags, 16) & 1  # the sampled flag is off
    assert await api.terminate() == 0  # a graceful stop flushes whatever was buffered
    assert spans.spans == [] and spans.requests == 0
    assert "tracing_enabled" in api.log_text()


async def test_in_process_workers_trace_their_leases_and_outcomes(database_url, service, receiver):
    """One `--mode all` process (service name `queueflow`): its built-in handlers lease, complete
    and fail through the same database code, so their spans continue the caller's trace too."""
    spans, endpoint = receiver
    proc = await service(database_url, mode="all", env=_otel_env(endpoint))
    async with aiohttp.ClientSession() as http:
        echoed = await _post(
            http, f"{proc.base_url}/api/v1/jobs", {"task_name": "echo"}, {"traceparent": TRACEPARENT}
        )
        failed = await _post(
            http,
            f"{proc.base_url}/api/v1/jobs",
            {"task_name": "fail", "payload": {"permanent": True}},
            {"traceparent": TRACEPARENT},
        )

    lease = await spans.one("lease default", **{"queueflow.job.id": echoed["job_id"]})
    complete = await spans.one("complete default", **{"queueflow.job.id": echoed["job_id"]})
    enqueues = {s.attributes["queueflow.job.id"]: s for s in spans.named("enqueue default")}
    parent = enqueues[echoed["job_id"]]
    assert parent.service == lease.service == complete.service == "queueflow"
    assert {lease.parent, complete.parent} == {parent.span_id}
    assert {lease.trace_id, complete.trace_id, parent.trace_id} == {CALLER_TRACE}
    fail = await spans.one("fail default", **{"queueflow.job.id": failed["job_id"]})
    assert fail.attributes["queueflow.job.status"] == "failed"
    assert (fail.trace_id, fail.parent) == (CALLER_TRACE, enqueues[failed["job_id"]].span_id)


async def test_with_tracing_off_the_context_is_kept_as_sent_and_nothing_is_exported(
    database_url, service, db
):
    api = await service(database_url, mode="api")
    async with aiohttp.ClientSession() as http:
        plain = await _post(
            http, f"{api.base_url}/api/v1/jobs", {"task_name": "t", "config": {"queue": "oq"}}
        )
        item = await _lease(http, api.base_url, "oq")
        assert item["job"]["id"] == plain["job_id"]
        assert "traceparent" not in item and "tracestate" not in item
        sent = await _post(
            http,
            f"{api.base_url}/api/v1/jobs",
            {"task_name": "t", "config": {"queue": "oq"}},
            {"traceparent": f" {TRACEPARENT}\t", "tracestate": TRACESTATE},
        )
        traced = await _lease(http, api.base_url, "oq")
        assert traced["job"]["id"] == sent["job_id"]
        # No span of the server's own: the caller's context as it came (trimmed).
        assert (traced["traceparent"], traced["tracestate"]) == (TRACEPARENT, TRACESTATE)
    rows = {
        str(r["id"]): (r["traceparent"], r["tracestate"])
        for r in await db.fetch("SELECT id, traceparent, tracestate FROM queueflow.jobs")
    }
    assert rows == {plain["job_id"]: (None, None), sent["job_id"]: (TRACEPARENT, TRACESTATE)}
    assert "tracing_enabled" not in api.log_text()


def test_without_an_endpoint_the_sdk_is_never_imported():
    """The whole server (every service's app, serve, the CLI) imports, builds its app and asks for
    a tracer without importing any OpenTelemetry module."""
    script = """
import sys
import services.cli, services.serve
from shared import tracing
from shared.config import Settings
services.serve.build_app(Settings(database_url="postgresql://unused", mode="all"))
assert tracing.start("queueflow", "0") is None
loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
assert not loaded, loaded
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
