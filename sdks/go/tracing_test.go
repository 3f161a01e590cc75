package queueflow

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The handler's span, recorded by the OpenTelemetry SDK (a test dependency only: the SDK's
// library uses the API).

const (
	testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	testParentID    = "00f067aa0ba902b7"
)

// leasedTraced answers a lease with one job per task of tasks; the first carries the test's trace
// context, the others none.
func leasedTraced(tasks ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		var jobs []map[string]any
		for i, task := range tasks {
			item := map[string]any{"lease_token": "tok-" + task, "job": map[string]any{
				"id": task, "task_name": task[:len(task)-2], "queue_name": "q", "status": "running",
				"payload": map[string]any{}, "config": map[string]any{}, "metadata": map[string]any{},
				"retry_count": 0, "delivery_count": 2 + i,
				"created_at": "2026-01-01T00:00:00Z", "scheduled_at": "2026-01-01T00:00:00Z"}}
			if i == 0 {
				item["traceparent"] = testTraceparent
				item["tracestate"] = "congo=t61rcWkgMzE"
			}
			jobs = append(jobs, item)
		}
		writeJSON(w, 200, map[string]any{"jobs": jobs})
	}
}

func TestHandlerRunsInsideItsSpan(t *testing.T) {
	f, c := newFake(t)
	f.leases = []func(http.ResponseWriter){leasedTraced("traced#1", "failing#2")}
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	defer provider.Shutdown(context.Background())

	var mu sync.Mutex
	current := map[string]trace.SpanContext{} // the span current in each handler
	seen := func(ctx context.Context, job *Job) {
		mu.Lock()
		current[job.ID] = trace.SpanFromContext(ctx).SpanContext()
		mu.Unlock()
	}
	w := NewWorker(c, "q", WorkerOptions{WaitSecs: 1, Concurrency: 2, Logger: quiet(), TracerProvider: provider})
	w.Handle("traced", func(ctx context.Context, job *Job) (map[string]any, error) {
		seen(ctx, job)
		_, child := provider.Tracer("app").Start(ctx, "child") // the handler's own span
		child.End()
		return nil, nil
	})
	w.Handle("failing", func(ctx context.Context, job *Job) (map[string]any, error) {
		seen(ctx, job)
		return nil, errors.New("boom")
	})
	// An application span current when Run is called is no parent of a job's span.
	appCtx, appSpan := provider.Tracer("app").Start(context.Background(), "application")
	defer appSpan.End()
	ctx, cancel := context.WithTimeout(appCtx, 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	for range 2 {
		select {
		case <-f.reported:
		case <-ctx.Done():
			t.Fatal("the jobs were not reported")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	spans := map[string]sdktrace.ReadOnlySpan{}
	var child sdktrace.ReadOnlySpan
	for _, s := range recorder.Ended() {
		switch s.Name() {
		case "process q":
			for _, kv := range s.Attributes() {
				if kv.Key == AttrMessagingMessageID {
					spans[kv.Value.AsString()] = s
				}
			}
		case "child":
			child = s
		}
	}
	if len(spans) != 2 {
		t.Fatalf("spans %v", recorder.Ended())
	}
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string]struct {
		attempt int
		status  codes.Code
		message string
	}{"traced#1": {2, codes.Unset, ""}, "failing#2": {3, codes.Error, "boom"}} {
		s := spans[id]
		if s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("%s: kind %v", id, s.SpanKind())
		}
		if s.Status().Code != want.status || s.Status().Description != want.message {
			t.Errorf("%s: status %+v, want %v %q", id, s.Status(), want.status, want.message)
		}
		attrs := attribute.NewSet(s.Attributes()...)
		wantAttrs := attribute.NewSet(
			attribute.String("messaging.system", "queueflow"),
			attribute.String("messaging.operation", "process"),
			attribute.String("messaging.destination.name", "q"),
			attribute.String("messaging.message.id", id),
			attribute.String("queueflow.task.name", id[:len(id)-2]),
			attribute.Int("queueflow.job.attempt", want.attempt),
		)
		if !attrs.Equals(&wantAttrs) {
			t.Errorf("%s: attributes %v", id, attrs.ToSlice())
		}
		if !current[id].Equal(s.SpanContext()) {
			t.Errorf("%s: the handler's current span %v is not the worker span %v", id, current[id], s.SpanContext())
		}
	}

	traced := spans["traced#1"]
	if traced.SpanContext().TraceID().String() != testTraceID || traced.Parent().SpanID().String() != testParentID ||
		!traced.Parent().IsRemote() {
		t.Errorf("traced#1: trace %s parent %s, want a child of %s", traced.SpanContext().TraceID(),
			traced.Parent().SpanID(), testTraceparent)
	}
	if got := traced.SpanContext().TraceState().Get("congo"); got != "t61rcWkgMzE" {
		t.Errorf("traced#1: tracestate %q", traced.SpanContext().TraceState())
	}
	if child == nil || child.Parent().SpanID() != traced.SpanContext().SpanID() {
		t.Errorf("the handler's own span is not a child of the worker span: %v", child)
	}
	failing := spans["failing#2"]
	if failing.Parent().IsValid() || failing.SpanContext().TraceID() == appSpan.SpanContext().TraceID() {
		t.Errorf("failing#2: parent %v; a job without a trace context gets a root span", failing.Parent())
	}
}

func TestJobTraceContext(t *testing.T) {
	for _, c := range []struct {
		traceparent string
		valid       bool
	}{
		{testTraceparent, true},
		{"", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", false}, // uppercase
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false}, // all-zero trace id
		{"garbage", false},
	} {
		got := jobTraceContext(&LeasedJob{Traceparent: c.traceparent})
		if got.IsValid() != c.valid || (c.valid && (!got.IsRemote() || got.TraceID().String() != testTraceID)) {
			t.Errorf("%q: %v", c.traceparent, got)
		}
	}
}
