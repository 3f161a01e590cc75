/**
 * The worker loop's span around each handler, with the OpenTelemetry API only
 * (`@opentelemetry/api`): without an OpenTelemetry SDK registered by the application, every call
 * here is the API's no-op.
 */

import {
  SpanKind,
  SpanStatusCode,
  context,
  createTraceState,
  isSpanContextValid,
  trace,
  type Context,
  type Span,
  type SpanContext,
} from "@opentelemetry/api";

import type { LeasedJob } from "./types.js";
import { SDK_VERSION } from "./version.js";

/** The instrumentation scope of the worker loop's spans. */
export const TRACER_NAME = "unofficial-queueflow-client";

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * The remote span context a W3C `traceparent` (and `tracestate`) names, or `undefined` when the
 * header is malformed (as the W3C recommendation reads it: version `ff`, a version `00` header with
 * trailing data, or an all-zero id).
 */
export function parseTraceparent(traceparent: string, tracestate?: string): SpanContext | undefined {
  const match = TRACEPARENT.exec(traceparent.trim());
  if (!match) return undefined;
  const [, version, traceId, spanId, flags, rest] = match as unknown as [string, string, string, string, string, string?];
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  const spanContext: SpanContext = { traceId, spanId, traceFlags: parseInt(flags, 16), isRemote: true };
  if (!isSpanContextValid(spanContext)) return undefined;
  if (tracestate) spanContext.traceState = createTraceState(tracestate);
  return spanContext;
}

/**
 * Starts the span a handler runs in: `process <queue>`, kind consumer, a child of the lease item's
 * `traceparent` (a root span when it has none or a malformed one), with the messaging attributes.
 * Returns the span and the context to run the handler in (the span current).
 */
export function startProcessSpan(queue: string, leased: LeasedJob): { span: Span; context: Context } {
  const active = context.active();
  const remote = leased.traceparent ? parseTraceparent(leased.traceparent, leased.tracestate) : undefined;
  // Never the span that happens to be current where the loop runs: the job's own trace, or a new one.
  const parent = remote ? trace.setSpanContext(active, remote) : trace.deleteSpan(active);
  const { job } = leased;
  const span = trace.getTracer(TRACER_NAME, SDK_VERSION).startSpan(
    `process ${queue}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        "messaging.system": "queueflow",
        "messaging.operation": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": job.id,
        "queueflow.task.name": job.task_name,
        "queueflow.job.attempt": job.delivery_count,
      },
    },
    parent,
  );
  return { span, context: trace.setSpan(parent, span) };
}

/** Marks the span failed with the handler's error message (its status is otherwise left unset). */
export function failSpan(span: Span, message: string): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}
