package queueflow

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The worker loop runs each handler inside a span of the OpenTelemetry API (docs/tracing.md and
// sdks/conformance/README.md, "Traces"): named "process <queue>", of kind consumer, a child of the
// lease item's traceparent (and tracestate) when it has one and otherwise a root span, current in
// the handler's context, ended when the handler returns. Without an OpenTelemetry SDK installed by
// the application (otel.SetTracerProvider, or WorkerOptions.TracerProvider) these are the API's
// no-ops.

// InstrumentationName names the tracer of the worker loop's spans.
const InstrumentationName = "github.com/unofficial-queueflow/client-go"

// Attribute keys of the worker loop's span.
const (
	AttrMessagingSystem      = "messaging.system"           // "queueflow"
	AttrMessagingOperation   = "messaging.operation"        // "process"
	AttrMessagingDestination = "messaging.destination.name" // the queue
	AttrMessagingMessageID   = "messaging.message.id"       // the job id
	AttrTaskName             = "queueflow.task.name"        // the job's task
	AttrJobAttempt           = "queueflow.job.attempt"      // the job's delivery_count
)

// startSpan starts the span of one handler run, as a child of the job's trace context when the
// lease item carried one, else as a root span (whatever span ctx holds), and returns ctx with it
// current.
func (w *Worker) startSpan(ctx context.Context, tracer trace.Tracer, lj *LeasedJob) (context.Context, trace.Span) {
	job := &lj.Job
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String(AttrMessagingSystem, "queueflow"),
			attribute.String(AttrMessagingOperation, "process"),
			attribute.String(AttrMessagingDestination, w.queue),
			attribute.String(AttrMessagingMessageID, job.ID),
			attribute.String(AttrTaskName, job.TaskName),
			attribute.Int(AttrJobAttempt, job.DeliveryCount),
		),
	}
	if parent := jobTraceContext(lj); parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return tracer.Start(ctx, "process "+w.queue, opts...)
}

// jobTraceContext is the W3C trace context of the lease item (invalid when it has none, or a
// malformed one).
func jobTraceContext(lj *LeasedJob) trace.SpanContext {
	if lj.Traceparent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": lj.Traceparent}
	if lj.Tracestate != "" {
		carrier["tracestate"] = lj.Tracestate
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}

// endSpan ends a handler's span: status error with the failure's message when the handler failed,
// left unset otherwise (a success, or a job taken away from the worker).
func endSpan(span trace.Span, outcome Outcome, err error) {
	if outcome == OutcomeError && err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
