/**
 * The worker loop's span around each handler, seen through the OpenTelemetry SDK (in memory). The
 * SDK is installed as the global tracer provider for this file only (node --test runs each file in
 * a process of its own).
 */

import { test } from "node:test";
import assert from "node:assert/strict";

import { SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-node";

import { SDK_VERSION, TRACER_NAME } from "../dist/index.js";
import { parseTraceparent } from "../dist/tracing.js";
import { FakeServer, quiet, stopAfter } from "./fakeserver.js";
import { fakeJob } from "./stub.js";

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register();

const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID = "00f067aa0ba902b7";

/** A job with its lease item's trace context (`traceparent`, `tracestate`) when given. */
function leased(job: Record<string, unknown>, traceparent?: string, tracestate?: string): Record<string, unknown> {
  return { ...job, __trace: { traceparent, tracestate } };
}

/** The fake server hands out lease items with the trace context of `leased`. */
function withTraceContext(fake: FakeServer): void {
  fake.leaseAnswer = (req, res) => {
    const max = (req.body as { max_jobs?: number }).max_jobs ?? 1;
    const jobs = fake.pending.splice(0, max).map((entry) => {
      const { __trace, ...job } = entry as { __trace?: { traceparent?: string; tracestate?: string }; id?: unknown };
      const item: Record<string, unknown> = { job, lease_token: `tok-${String(job.id)}` };
      if (__trace?.traceparent) item.traceparent = __trace.traceparent;
      if (__trace?.tracestate) item.tracestate = __trace.tracestate;
      return item;
    });
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ jobs }));
    return true;
  };
}

test("the handler runs in a `process <queue>` consumer span, the child of the lease item's traceparent", async () => {
  exporter.reset();
  const fake = await new FakeServer().start();
  withTraceContext(fake);
  const job = { ...fakeJob("j1", "render", { n: 1 }), delivery_count: 3, queue_name: "renders" };
  fake.pending = [leased(job, `00-${TRACE_ID}-${PARENT_ID}-01`, "congo=t61rcWkgMzE")];
  const stop = stopAfter(1);
  let seen: { traceId: string; spanId: string } | undefined;
  let childParent: string | undefined;
  try {
    await fake.client().worker.run(
      "renders",
      {
        render: async (j) => {
          await Promise.resolve(); // still current after an await
          seen = trace.getActiveSpan()?.spanContext();
          const child = trace.getTracer("app").startSpan("resize");
          childParent = (child as unknown as { parentSpanContext?: { spanId: string } }).parentSpanContext?.spanId;
          child.end();
          stop.tick();
          return j.payload;
        },
      },
      { waitSecs: 0, signal: stop.signal, onError: quiet },
    );
    assert.equal(fake.calls("complete").length, 1);
    const spans = exporter.getFinishedSpans().filter((s) => s.name.startsWith("process "));
    assert.equal(spans.length, 1);
    const span = spans[0]!;
    assert.equal(span.name, "process renders");
    assert.equal(span.kind, SpanKind.CONSUMER);
    assert.equal(span.spanContext().traceId, TRACE_ID);
    assert.equal(span.parentSpanContext?.spanId, PARENT_ID);
    assert.equal(span.parentSpanContext?.isRemote, true);
    assert.equal(span.parentSpanContext?.traceState?.get("congo"), "t61rcWkgMzE");
    assert.deepEqual(span.attributes, {
      "messaging.system": "queueflow",
      "messaging.operation": "process",
      "messaging.destination.name": "renders",
      "messaging.message.id": "j1",
      "queueflow.task.name": "render",
      "queueflow.job.attempt": 3,
    });
    assert.equal(span.status.code, SpanStatusCode.UNSET);
    assert.equal(span.instrumentationScope.name, TRACER_NAME);
    assert.equal(span.instrumentationScope.version, SDK_VERSION);
    assert.deepEqual(seen, span.spanContext(), "the span is current in the handler");
    assert.equal(childParent, span.spanContext().spanId, "a span the handler starts is its child");
  } finally {
    await fake.close();
  }
});

test("without a traceparent (or with a malformed one) the span is a root; a failing handler's span has error status", async () => {
  exporter.reset();
  const fake = await new FakeServer().start();
  withTraceContext(fake);
  fake.pending = [
    leased(fakeJob("plain", "fails")),
    leased(fakeJob("bad", "fails"), `00-${"0".repeat(32)}-${PARENT_ID}-01`),
  ];
  const stop = stopAfter(2);
  try {
    // Started inside an application span: the job's span must not become its child.
    await trace.getTracer("app").startActiveSpan("app", async (appSpan) => {
      await fake.client().worker.run(
        "q",
        {
          fails: () => {
            stop.tick();
            throw new Error("boom");
          },
        },
        { waitSecs: 0, signal: stop.signal, onError: quiet },
      );
      appSpan.end();
    });
    const spans = exporter.getFinishedSpans().filter((s) => s.name === "process q");
    assert.deepEqual(
      spans.map((s) => s.attributes["messaging.message.id"]),
      ["plain", "bad"],
    );
    const traces = new Set<string>();
    for (const span of spans) {
      assert.equal(span.parentSpanContext, undefined, "a root span");
      assert.equal(span.status.code, SpanStatusCode.ERROR);
      assert.equal(span.status.message, "boom");
      assert.equal(span.attributes["queueflow.job.attempt"], 1);
      traces.add(span.spanContext().traceId);
    }
    assert.equal(traces.size, 2, "each job a trace of its own");
    assert.equal(fake.calls("fail").length, 2, "the span changes nothing of the outcome");
  } finally {
    await fake.close();
  }
});

test("parseTraceparent reads a W3C traceparent as the recommendation says", () => {
  const ok = parseTraceparent(`00-${TRACE_ID}-${PARENT_ID}-01`, "a=1,b=2");
  assert.equal(ok?.traceId, TRACE_ID);
  assert.equal(ok?.spanId, PARENT_ID);
  assert.equal(ok?.traceFlags, 1);
  assert.equal(ok?.isRemote, true);
  assert.equal(ok?.traceState?.get("b"), "2");
  assert.equal(parseTraceparent(`00-${TRACE_ID}-${PARENT_ID}-00`)?.traceFlags, 0);
  assert.equal(parseTraceparent(`00-${TRACE_ID}-${PARENT_ID}-01`)?.traceState, undefined);
  assert.ok(parseTraceparent(`01-${TRACE_ID}-${PARENT_ID}-01-later`), "a later version may carry more");
  for (const bad of [
    "",
    "garbage",
    `00-${TRACE_ID}-${PARENT_ID}-01-more`, // version 00 has nothing after the flags
    `ff-${TRACE_ID}-${PARENT_ID}-01`,
    `00-${TRACE_ID.toUpperCase()}-${PARENT_ID}-01`,
    `00-${"0".repeat(32)}-${PARENT_ID}-01`,
    `00-${TRACE_ID}-${"0".repeat(16)}-01`,
  ]) {
    assert.equal(parseTraceparent(bad), undefined, bad);
  }
});
