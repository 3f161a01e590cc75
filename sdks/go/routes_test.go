package queueflow

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Every typed call hits its route with its method (the real-server proof of the payloads is the
// conformance suite).
func TestEveryRoute(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.EscapedPath()
		if strings.HasSuffix(r.URL.Path, "/events") {
			w.Header().Set("Content-Type", "text/event-stream")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	defer srv.Close()
	c := NewClient(srv.URL, "t")
	ctx := context.Background()
	calls := []struct {
		want string
		call func() error
	}{
		{"POST /api/v1/jobs", func() error { _, err := c.CreateJob(ctx, CreateJobRequest{TaskName: "x"}, ""); return err }},
		{"POST /api/v1/jobs/batch", func() error { _, err := c.CreateBatch(ctx, nil); return err }},
		{"GET /api/v1/jobs", func() error { _, err := c.ListJobs(ctx, ListJobsParams{}); return err }},
		{"GET /api/v1/jobs/j", func() error { _, err := c.GetJob(ctx, "j"); return err }},
		{"POST /api/v1/jobs/j/cancel", func() error { return c.CancelJob(ctx, "j") }},
		{"POST /api/v1/jobs/cancel", func() error { _, err := c.CancelJobs(ctx, CancelJobsRequest{}); return err }},
		{"GET /api/v1/jobs/j/events", func() error { s, err := c.JobEvents(ctx, "j"); closeStream(s); return err }},
		{"POST /api/v1/queues/q/lease", func() error { _, err := c.Lease(ctx, "q", LeaseRequest{}); return err }},
		{"POST /api/v1/jobs/j/heartbeat", func() error { _, err := c.Heartbeat(ctx, "j", "l", 1); return err }},
		{"POST /api/v1/jobs/j/complete", func() error { return c.Complete(ctx, "j", "l", nil) }},
		{"POST /api/v1/jobs/j/fail", func() error { return c.Fail(ctx, "j", "l", "e", true) }},
		{"POST /api/v1/workflows", func() error { _, err := c.CreateWorkflow(ctx, CreateWorkflowRequest{}); return err }},
		{"GET /api/v1/workflows", func() error { _, err := c.ListWorkflows(ctx, ListWorkflowsParams{}); return err }},
		{"GET /api/v1/workflows/w", func() error { _, err := c.GetWorkflow(ctx, "w"); return err }},
		{"GET /api/v1/workflows/w/steps", func() error { _, err := c.WorkflowSteps(ctx, "w"); return err }},
		{"GET /api/v1/workflows/w/diagram", func() error { _, err := c.WorkflowDiagram(ctx, "w"); return err }},
		{"POST /api/v1/workflows/w/cancel", func() error { return c.CancelWorkflow(ctx, "w") }},
		{"POST /api/v1/workflows/w/retry", func() error { return c.RetryWorkflow(ctx, "w") }},
		{"GET /api/v1/workflows/w/events", func() error { s, err := c.WorkflowEvents(ctx, "w"); closeStream(s); return err }},
		{"POST /api/v1/cron", func() error { _, err := c.CreateCron(ctx, CreateCronRequest{}); return err }},
		{"GET /api/v1/cron", func() error { _, err := c.ListCrons(ctx, ListParams{}); return err }},
		{"GET /api/v1/cron/c", func() error { _, err := c.GetCron(ctx, "c"); return err }},
		{"DELETE /api/v1/cron/c", func() error { return c.DeleteCron(ctx, "c") }},
		{"POST /api/v1/cron/c/pause", func() error { return c.PauseCron(ctx, "c") }},
		{"POST /api/v1/cron/c/resume", func() error { return c.ResumeCron(ctx, "c") }},
		{"GET /api/v1/dlq", func() error { _, err := c.ListDeadLetters(ctx, ListDeadLettersParams{}); return err }},
		{"GET /api/v1/dlq/7", func() error { _, err := c.GetDeadLetter(ctx, 7); return err }},
		{"POST /api/v1/dlq/7/replay", func() error { _, err := c.ReplayDeadLetter(ctx, 7); return err }},
		{"POST /api/v1/dlq/replay", func() error { _, err := c.ReplayDeadLetters(ctx, ReplayDeadLettersRequest{}); return err }},
		{"GET /api/v1/queues", func() error { _, err := c.ListQueues(ctx); return err }},
		{"POST /api/v1/queues/q/pause", func() error { _, err := c.PauseQueue(ctx, "q"); return err }},
		{"POST /api/v1/queues/q/resume", func() error { _, err := c.ResumeQueue(ctx, "q"); return err }},
		{"GET /api/v1/stats", func() error { _, err := c.Stats(ctx); return err }},
		{"GET /api/v1/tasks", func() error { _, err := c.Tasks(ctx); return err }},
		{"GET /api/v1/whoami", func() error { _, err := c.WhoAmI(ctx); return err }},
		{"GET /health", func() error { _, err := c.Health(ctx); return err }},
		{"GET /ready", func() error { _, err := c.Ready(ctx); return err }},
	}
	for _, tc := range calls {
		got = ""
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v", tc.want, err)
		}
		if got != tc.want {
			t.Errorf("called %q, want %q", got, tc.want)
		}
	}
}

func closeStream[T any](s *Stream[T]) {
	if s != nil {
		s.Close()
	}
}

func TestNoContentAndEmptyBodies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	if err := NewClient(srv.URL, "t").Complete(context.Background(), "j", "l", nil); err != nil {
		t.Fatal(err)
	}
}

func TestMalformedSuccessBodyIsAnError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"tenant": 3`))
	}))
	defer srv.Close()
	if _, err := NewClient(srv.URL, "t").WhoAmI(context.Background()); err == nil || StatusOf(err) != 0 {
		t.Fatalf("got %v", err)
	}
}
