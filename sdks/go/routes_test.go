package queueflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Every typed call hits its route with its method (the real-server proof of the payloads is the
// conformance suite).
func TestEveryRoute(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.EscapedPath()
		if strings.HasSuffix(r.URL.Path, "/events") && r.URL.Path != "/api/v1/events" {
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
		{"POST /api/v1/jobs/complete", func() error { _, err := c.CompleteMany(ctx, nil); return err }},
		{"POST /api/v1/jobs/j/heartbeat", func() error {
			_, err := c.HeartbeatWithProgress(ctx, "j", "l", 1, &Progress{Percent: 5})
			return err
		}},
		{"POST /api/v1/jobs/j/logs", func() error { _, err := c.PostJobLogs(ctx, "j", "l", nil); return err }},
		{"GET /api/v1/jobs/j/logs", func() error { _, err := c.JobLogs(ctx, "j", JobLogsParams{}); return err }},
		{"GET /api/v1/jobs/j/attempts", func() error { _, err := c.JobAttempts(ctx, "j"); return err }},
		{"GET /api/v1/workers", func() error { _, err := c.ListWorkers(ctx); return err }},
		{"GET /openapi.json", func() error { _, err := c.OpenAPI(ctx); return err }},
		{"POST /api/v1/workflows", func() error { _, err := c.CreateWorkflow(ctx, CreateWorkflowRequest{}); return err }},
		{"GET /api/v1/workflows", func() error { _, err := c.ListWorkflows(ctx, ListWorkflowsParams{}); return err }},
		{"GET /api/v1/workflows/w", func() error { _, err := c.GetWorkflow(ctx, "w"); return err }},
		{"GET /api/v1/workflows/w/steps", func() error { _, err := c.WorkflowSteps(ctx, "w"); return err }},
		{"GET /api/v1/workflows/w/diagram", func() error { _, err := c.WorkflowDiagram(ctx, "w"); return err }},
		{"POST /api/v1/workflows/w/cancel", func() error { return c.CancelWorkflow(ctx, "w") }},
		{"POST /api/v1/workflows/w/retry", func() error { return c.RetryWorkflow(ctx, "w") }},
		{"GET /api/v1/workflows/w/events", func() error { s, err := c.WorkflowEvents(ctx, "w"); closeStream(s); return err }},
		{"POST /api/v1/events", func() error { _, err := c.SendEvent(ctx, PostEventRequest{Key: "k"}); return err }},
		{"GET /api/v1/events", func() error { _, err := c.ListEvents(ctx, ListEventsParams{}); return err }},
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
		{"POST /api/v1/worker-keys", func() error { _, err := c.CreateWorkerKey(ctx, CreateWorkerKeyRequest{Name: "k"}); return err }},
		{"GET /api/v1/worker-keys", func() error { _, err := c.ListWorkerKeys(ctx); return err }},
		{"DELETE /api/v1/worker-keys/k", func() error { return c.DeleteWorkerKey(ctx, "k") }},
		{"PUT /api/v1/limits/k", func() error { _, err := c.PutLimit(ctx, "k", PutLimitRequest{Concurrency: Int(1)}); return err }},
		{"GET /api/v1/limits", func() error { _, err := c.ListLimits(ctx); return err }},
		{"GET /api/v1/limits/k", func() error { _, err := c.GetLimit(ctx, "k"); return err }},
		{"DELETE /api/v1/limits/k", func() error { return c.DeleteLimit(ctx, "k") }},
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

func TestCompleteMany(t *testing.T) {
	srv, reqs := recorder(t, 200, `{"results": [
		{"id": "a", "outcome": "completed", "status": 204},
		{"id": "b", "outcome": "conflict", "status": 409, "error": "lease is no longer held"},
		{"id": "c", "outcome": "not_found", "status": 404, "error": "job not found"}]}`)
	c := NewClient(srv.URL, "tenant", WithWorkerToken("worker"))
	items := []CompletionItem{
		{ID: "a", LeaseToken: "ta", Result: map[string]any{"n": 1}},
		{ID: "b", LeaseToken: "tb"},
		{ID: "c", LeaseToken: "tc", Result: map[string]any{}},
	}
	resp, err := c.CompleteMany(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	if items[1].Result != nil {
		t.Error("CompleteMany changed the caller's items")
	}
	got := reqs()[0]
	if got.method != "POST" || got.path != "/api/v1/jobs/complete" || got.header.Get("Authorization") != "Bearer worker" {
		t.Errorf("request %s %s with %q", got.method, got.path, got.header.Get("Authorization"))
	}
	want := `[map[id:a lease_token:ta result:map[n:1]] map[id:b lease_token:tb result:map[]] map[id:c lease_token:tc result:map[]]]`
	if fmt.Sprint(got.body["jobs"]) != want {
		t.Errorf("body %v, want jobs %s", got.body, want)
	}
	if len(resp.Results) != 3 {
		t.Fatalf("results %+v", resp.Results)
	}
	if a := resp.Results[0]; a.ID != "a" || a.Outcome != CompletionCompleted || a.Err() != nil {
		t.Errorf("a: %+v, err %v", a, a.Err())
	}
	if b := resp.Results[1]; b.Outcome != CompletionConflict || !IsConflict(b.Err()) || !strings.Contains(b.Err().Error(), "lease is no longer held") {
		t.Errorf("b: %+v, err %v", b, b.Err())
	}
	if c := resp.Results[2]; c.Outcome != CompletionNotFound || !IsNotFound(c.Err()) || IsTransient(c.Err()) {
		t.Errorf("c: %+v, err %v", c, c.Err())
	}
}

func TestCompleteManyWithoutTheRoute(t *testing.T) {
	srv, _ := recorder(t, 404, `{"error": "not found", "timestamp": "2026-01-01T00:00:00Z"}`)
	_, err := NewClient(srv.URL, "t").CompleteMany(context.Background(), []CompletionItem{{ID: "a", LeaseToken: "t"}})
	if !IsNotFound(err) {
		t.Fatalf("got %v", err)
	}
}

func TestOpenAPIOffers(t *testing.T) {
	srv, _ := recorder(t, 200, `{"openapi": "3.1.0", "paths": {
		"/api/v1/jobs/complete": {"summary": "batch", "post": {"operationId": "completeJobs"}},
		"/api/v1/jobs/{id}/complete": {"post": {}}}}`)
	doc, err := NewClient(srv.URL, "t").OpenAPI(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"POST", "/api/v1/jobs/complete", true},
		{"post", "/api/v1/jobs/complete", true},
		{"GET", "/api/v1/jobs/complete", false},
		{"POST", "/api/v1/jobs/batch", false},
	} {
		if got := doc.Offers(tc.method, tc.path); got != tc.want {
			t.Errorf("Offers(%s, %s) = %v", tc.method, tc.path, got)
		}
	}
	var none *OpenAPIDocument
	if none.Offers("POST", "/api/v1/jobs/complete") {
		t.Error("a nil document offers nothing")
	}
}

// The limit calls send the key as one path segment, the policy as the body, and the tenant token;
// the policy decodes with its live figures (RateAvailable only when the server sends it).
func TestLimits(t *testing.T) {
	policy := `{"key": "customer:*", "concurrency": 1, "rate": {"count": 10, "per_secs": 1.5}, "running": 0,
		"created_at": "2026-12-03T14:00:00Z", "updated_at": "2026-12-03T14:00:00Z"}`
	exact := `{"key": "api:stripe", "concurrency": null, "rate": {"count": 10, "per_secs": 1.5}, "running": 2,
		"created_at": "2026-12-03T14:00:00Z", "updated_at": "2026-12-03T14:00:00Z", "rate_available": 7}`
	var seen []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{method: r.Method, path: r.URL.EscapedPath(), header: r.Header.Clone()}
		if r.Body != nil {
			json.NewDecoder(r.Body).Decode(&rec.body)
		}
		seen = append(seen, rec)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPut:
			w.Write([]byte(policy))
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/api/v1/limits":
			fmt.Fprintf(w, `{"limits": [%s, %s]}`, exact, policy)
		case r.URL.Path == "/api/v1/limits/api:stripe":
			w.Write([]byte(exact))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": "no policy", "timestamp": "2026-12-03T14:00:00Z"}`))
		}
	}))
	defer srv.Close()
	c := NewClient(srv.URL, "tenant", WithWorkerToken("worker"))
	ctx := context.Background()
	put, err := c.PutLimit(ctx, "customer:*", PutLimitRequest{Concurrency: Int(1), Rate: &LimitRate{Count: 10, PerSecs: 1.5}})
	if err != nil {
		t.Fatal(err)
	}
	if put.Key != "customer:*" || *put.Concurrency != 1 || *put.Rate != (LimitRate{10, 1.5}) || put.RateAvailable != nil ||
		!put.CreatedAt.Equal(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)) {
		t.Errorf("put %+v", put)
	}
	listed, err := c.ListLimits(ctx)
	if err != nil || len(listed.Limits) != 2 || listed.Limits[0].Key != "api:stripe" || listed.Limits[1].Key != "customer:*" {
		t.Fatalf("listed %+v, %v", listed, err)
	}
	got, err := c.GetLimit(ctx, "api:stripe")
	if err != nil || got.Concurrency != nil || got.Running != 2 || got.RateAvailable == nil || *got.RateAvailable != 7 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if err := c.DeleteLimit(ctx, "customer:*"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetLimit(ctx, "customer:42"); !IsNotFound(err) {
		t.Errorf("a key without a policy: %v", err)
	}
	if _, err := c.PutLimit(ctx, "a/b", PutLimitRequest{Concurrency: Int(2)}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PUT /api/v1/limits/customer:%2A", "GET /api/v1/limits", "GET /api/v1/limits/api:stripe",
		"DELETE /api/v1/limits/customer:%2A", "GET /api/v1/limits/customer:42", "PUT /api/v1/limits/a%2Fb",
	}
	for i, rec := range seen {
		if rec.method+" "+rec.path != want[i] {
			t.Errorf("call %d: %s %s, want %s", i, rec.method, rec.path, want[i])
		}
		if rec.header.Get("Authorization") != "Bearer tenant" {
			t.Errorf("call %d: Authorization %q", i, rec.header.Get("Authorization"))
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("%d calls, want %d", len(seen), len(want))
	}
	if fmt.Sprint(seen[0].body) != "map[concurrency:1 rate:map[count:10 per_secs:1.5]]" {
		t.Errorf("put body %v", seen[0].body)
	}
	if fmt.Sprint(seen[5].body) != "map[concurrency:2]" {
		t.Errorf("a policy without a rate sends none: %v", seen[5].body)
	}
}

// A config's Limits go out only when set, and a job's config keeps them.
func TestJobConfigLimits(t *testing.T) {
	for _, tc := range []struct {
		cfg  any
		want string
	}{
		{JobConfigRequest{Priority: Int(1)}, `{"priority":1}`},
		{JobConfigRequest{Limits: []string{"customer:42", "api:stripe"}}, `{"limits":["customer:42","api:stripe"]}`},
		{JobConfig{}, `{}`},
		{JobConfig{Limits: []string{"customer:*"}}, `{"limits":["customer:*"]}`},
	} {
		raw, err := json.Marshal(tc.cfg)
		if err != nil || string(raw) != tc.want {
			t.Errorf("%+v encodes as %s (%v), want %s", tc.cfg, raw, err, tc.want)
		}
	}
	var job Job
	if err := json.Unmarshal([]byte(`{"id": "j", "config": {"priority": 0, "limits": ["customer:42"]}}`), &job); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(job.Config["limits"]) != "[customer:42]" {
		t.Errorf("job config %v", job.Config)
	}
	var cron CronSchedule
	if err := json.Unmarshal([]byte(`{"id": "c", "config": {"limits": ["api:stripe"]}}`), &cron); err != nil {
		t.Fatal(err)
	}
	if cron.Config == nil || fmt.Sprint(cron.Config.Limits) != "[api:stripe]" {
		t.Errorf("cron config %+v", cron.Config)
	}
}

// A config's Unique goes out only when set (OnConflict only when given), in a create and in a
// batch item, and a job read back decodes it with Job.Unique (nil when the job has none).
func TestJobConfigUnique(t *testing.T) {
	var seen []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{method: r.Method, path: r.URL.EscapedPath(), header: r.Header.Clone()}
		if r.Body != nil {
			json.NewDecoder(r.Body).Decode(&rec.body)
		}
		seen = append(seen, rec)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/jobs/batch":
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"job_ids": ["j1", "j2"], "count": 2}`))
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"job_id": "j1"}`))
		case r.URL.Path == "/api/v1/jobs/j1":
			w.Write([]byte(`{"id": "j1", "config": {"priority": 0,
				"unique": {"key": "report:42", "window_secs": 600, "on_conflict": "skip"}}}`))
		default:
			w.Write([]byte(`{"id": "j2", "config": {"priority": 0}}`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := NewClient(srv.URL, "tenant")
	unique := &UniquePolicy{Key: "report:42", WindowSecs: 600}
	if _, err := c.CreateJob(ctx, CreateJobRequest{TaskName: "report", Config: &JobConfigRequest{Unique: unique}}, ""); err != nil {
		t.Fatal(err)
	}
	batch := []CreateJobRequest{
		{TaskName: "report", Config: &JobConfigRequest{Unique: &UniquePolicy{Key: "report:43", WindowSecs: 60, OnConflict: UniqueReplace}}},
		{TaskName: "report", Config: &JobConfigRequest{Priority: Int(2)}},
	}
	if _, err := c.CreateBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	held, err := c.GetJob(ctx, "j1")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.GetJob(ctx, "j2")
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seen[0].body["config"]); got != "map[unique:map[key:report:42 window_secs:600]]" {
		t.Errorf("create config %s", got)
	}
	if got := fmt.Sprint(seen[1].body["jobs"]); got != "[map[config:map[unique:map[key:report:43 on_conflict:replace window_secs:60]] task_name:report] map[config:map[priority:2] task_name:report]]" {
		t.Errorf("batch items %s", got)
	}
	policy, err := held.Unique()
	if err != nil || policy == nil || *policy != (UniquePolicy{Key: "report:42", WindowSecs: 600, OnConflict: UniqueSkip}) {
		t.Errorf("held job's policy %+v (%v)", policy, err)
	}
	if policy, err := plain.Unique(); policy != nil || err != nil {
		t.Errorf("a job without a policy gave %+v (%v)", policy, err)
	}
	broken := Job{ID: "j3", Config: map[string]any{"unique": "report:42"}}
	if policy, err := broken.Unique(); policy != nil || err == nil {
		t.Errorf("a malformed policy gave %+v (%v)", policy, err)
	}
	raw, err := json.Marshal(JobConfigRequest{Priority: Int(1)})
	if err != nil || string(raw) != `{"priority":1}` {
		t.Errorf("a config without a policy encodes as %s (%v)", raw, err)
	}
}

// A cron schedule's Timezone goes out only when set, and a schedule read back decodes Timezone and
// NextRunLocal (keeping the zone's offset), both nil for a schedule without a zone.
func TestCronTimezone(t *testing.T) {
	var seen []recorded
	const schedule = `"cron_expr": "0 9 * * 1-5", "task_name": "remind", "enabled": true,
		"next_run_at": "2026-03-30T07:00:00Z", "created_at": "2026-03-27T12:00:00Z"`
	zoned := `{"id": "c1", "name": "standup", ` + schedule +
		`, "timezone": "Europe/Berlin", "next_run_local": "2026-03-30T09:00:00+02:00"}`
	plain := `{"id": "c2", "name": "nightly", ` + schedule + `}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{method: r.Method, path: r.URL.EscapedPath(), header: r.Header.Clone()}
		if r.Body != nil {
			json.NewDecoder(r.Body).Decode(&rec.body)
		}
		seen = append(seen, rec)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"cron_id": "c1"}`))
		case r.URL.Path == "/api/v1/cron/c1":
			w.Write([]byte(zoned))
		case r.URL.Path == "/api/v1/cron/c2":
			w.Write([]byte(plain))
		default:
			w.Write([]byte(`{"crons": [` + zoned + `, ` + plain + `], "limit": 50, "offset": 0, "has_more": false}`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := NewClient(srv.URL, "tenant")
	standup := CreateCronRequest{Name: "standup", CronExpr: "0 9 * * 1-5", TaskName: "remind", Timezone: "Europe/Berlin"}
	if _, err := c.CreateCron(ctx, standup); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCron(ctx, CreateCronRequest{Name: "nightly", CronExpr: "0 2 * * *", TaskName: "remind"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetCron(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	bare, err := c.GetCron(ctx, "c2")
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListCrons(ctx, ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(seen[0].body); got != "map[cron_expr:0 9 * * 1-5 name:standup task_name:remind timezone:Europe/Berlin]" {
		t.Errorf("create body %s", got)
	}
	if _, sent := seen[1].body["timezone"]; sent {
		t.Errorf("a schedule without a zone sent one: %v", seen[1].body)
	}
	if got.Timezone == nil || *got.Timezone != "Europe/Berlin" {
		t.Errorf("timezone %v", got.Timezone)
	}
	if got.NextRunLocal == nil {
		t.Fatal("no next_run_local")
	}
	local := *got.NextRunLocal
	if _, offset := local.Zone(); offset != 2*60*60 || local.Hour() != 9 || !local.Equal(got.NextRunAt) {
		t.Errorf("next_run_local %s (offset %d), next_run_at %s", local.Format(time.RFC3339), offset, got.NextRunAt)
	}
	if local.Format(time.RFC3339) != "2026-03-30T09:00:00+02:00" {
		t.Errorf("next_run_local formats as %s", local.Format(time.RFC3339))
	}
	if bare.Timezone != nil || bare.NextRunLocal != nil {
		t.Errorf("a schedule without a zone gave %v, %v", bare.Timezone, bare.NextRunLocal)
	}
	if len(list.Crons) != 2 || list.Crons[0].Timezone == nil || list.Crons[0].NextRunLocal == nil ||
		!list.Crons[0].NextRunLocal.Equal(local) || list.Crons[1].Timezone != nil || list.Crons[1].NextRunLocal != nil {
		t.Errorf("listed %+v", list.Crons)
	}
}

// A workflow schedule as the server answers it (shared/domain/cron.py CronSchedule, its workflow
// stored normalised): no task_name, each step's defaults filled in, and a field this SDK does not
// know.
const workflowSchedule = `{"id": "c1", "name": "nightly", "cron_expr": "0 2 * * *", "enabled": true,
	"next_run_at": "2026-12-04T02:00:00Z", "created_at": "2026-12-03T00:00:00Z", "future": 1,
	"workflow": {"name": "etl", "steps": [
		{"name": "extract", "task_name": "etl.extract", "depends_on": [], "payload": {"full": true},
		 "config": {"priority": 3}, "on_failure": "halt", "on_success": "continue", "metadata": {}, "queue": "etl"},
		{"name": "nap", "depends_on": ["extract"], "payload": {}, "on_failure": "halt", "on_success": "continue",
		 "metadata": {}, "sleep_secs": 60},
		{"name": "load", "task_name": "etl.load", "depends_on": ["nap"], "payload": {}, "on_failure": "halt",
		 "on_success": "continue", "metadata": {}, "when": {"op": "exists", "path": "extract.rows"}}],
	 "context": {"day": "today"}, "metadata": {}}}`

// A schedule that starts a workflow goes out with Workflow and no task_name, and comes back (by
// GetCron and ListCrons) with Workflow decoded and TaskName nil; a task schedule beside it keeps
// its TaskName and has no Workflow.
func TestCronWorkflow(t *testing.T) {
	var seen []recorded
	plain := `{"id": "c2", "name": "remind", "cron_expr": "* * * * *", "task_name": "remind", "enabled": true,
		"next_run_at": "2026-12-04T02:00:00Z", "created_at": "2026-12-03T00:00:00Z"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{method: r.Method, path: r.URL.EscapedPath()}
		if r.Body != nil {
			json.NewDecoder(r.Body).Decode(&rec.body)
		}
		seen = append(seen, rec)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"cron_id": "c1"}`))
		case r.URL.Path == "/api/v1/cron/c1":
			w.Write([]byte(workflowSchedule))
		default:
			w.Write([]byte(`{"crons": [` + workflowSchedule + `, ` + plain + `], "limit": 50, "offset": 0, "has_more": false}`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := NewClient(srv.URL, "tenant")
	definition := CreateWorkflowRequest{Name: "etl", Steps: []WorkflowStep{
		{Name: "extract", TaskName: "etl.extract", Queue: "etl"},
		SleepStep("nap", 60, "extract"),
	}}
	req := CreateCronRequest{Name: "nightly", CronExpr: "0 2 * * *", Workflow: &definition, Timezone: "Europe/Berlin"}
	if _, err := c.CreateCron(ctx, req); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetCron(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.ListCrons(ctx, ListParams{})
	if err != nil {
		t.Fatal(err)
	}
	sent, _ := json.Marshal(seen[0].body)
	want := `{"cron_expr":"0 2 * * *","name":"nightly","timezone":"Europe/Berlin","workflow":{"name":"etl",` +
		`"steps":[{"name":"extract","queue":"etl","task_name":"etl.extract"},` +
		`{"depends_on":["extract"],"name":"nap","sleep_secs":60}]}}`
	if string(sent) != want {
		t.Errorf("create body\n got %s\nwant %s", sent, want)
	}
	if got.TaskName != nil {
		t.Errorf("task_name %q on a workflow schedule", *got.TaskName)
	}
	wf := got.Workflow
	if wf == nil || wf.Name != "etl" || len(wf.Steps) != 3 || fmt.Sprint(wf.Context) != "map[day:today]" {
		t.Fatalf("workflow %+v", wf)
	}
	extract, nap, load := wf.Steps[0], wf.Steps[1], wf.Steps[2]
	if extract.TaskName != "etl.extract" || extract.Queue != "etl" || extract.OnFailure != "halt" ||
		extract.DependsOn == nil || len(extract.DependsOn) != 0 || extract.Config == nil || *extract.Config.Priority != 3 {
		t.Errorf("extract %+v", extract)
	}
	if nap.SleepSecs != 60 || nap.TaskName != "" || fmt.Sprint(nap.DependsOn) != "[extract]" {
		t.Errorf("nap %+v", nap)
	}
	if load.When == nil || load.When.Op != "exists" || load.When.Path != "extract.rows" {
		t.Errorf("load %+v", load)
	}
	if len(list.Crons) != 2 || list.Crons[0].Workflow == nil || len(list.Crons[0].Workflow.Steps) != 3 {
		t.Fatalf("listed %+v", list.Crons)
	}
	if p := list.Crons[1]; p.TaskName == nil || *p.TaskName != "remind" || p.Workflow != nil {
		t.Errorf("the task schedule listed as %+v", p)
	}
}

// Sleep and wait-for-event steps go out with only their own fields (a task step's are left out),
// and a waiting step's state decodes its WakeAt and EventKey.
func TestDurableTimeSteps(t *testing.T) {
	var seen []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		seen = append(seen, recorded{method: r.Method, path: r.URL.EscapedPath()})
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			if got := string(raw); got != `{"name":"ship","steps":[`+
				`{"name":"approve","on_failure":"skip","wait_for_event":{"key":"approval:{{context.order}}"},"timeout_secs":3600},`+
				`{"name":"nap","depends_on":["approve"],"sleep_secs":90},`+
				`{"name":"later","depends_on":["nap"],"sleep_until":"2027-01-02T03:04:05Z"},`+
				`{"name":"forever","wait_for_event":{"key":"k"}}],"context":{"order":42}}` {
				t.Errorf("workflow body %s", got)
			}
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"workflow_id": "w1"}`))
			return
		}
		w.Write([]byte(`{"steps": [
			{"name": "approve", "status": "running", "wake_at": "2026-12-03T15:00:00Z", "event_key": "approval:42"},
			{"name": "nap", "status": "pending"}]}`))
	}))
	defer srv.Close()
	ctx := context.Background()
	c := NewClient(srv.URL, "tenant")
	approve := WaitForEventStep("approve", "approval:{{context.order}}", 3600)
	approve.OnFailure = "skip"
	steps := []WorkflowStep{
		approve,
		SleepStep("nap", 90, "approve"),
		SleepUntilStep("later", time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC), "nap"),
		WaitForEventStep("forever", "k", 0),
	}
	created, err := c.CreateWorkflow(ctx, CreateWorkflowRequest{Name: "ship", Steps: steps, Context: map[string]any{"order": 42}})
	if err != nil || created.WorkflowID != "w1" {
		t.Fatalf("created %+v, %v", created, err)
	}
	states, err := c.WorkflowSteps(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	waiting, pending := states.Steps[0], states.Steps[1]
	if waiting.WakeAt == nil || !waiting.WakeAt.Equal(time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)) ||
		waiting.EventKey == nil || *waiting.EventKey != "approval:42" || waiting.JobID != nil {
		t.Errorf("waiting step %+v", waiting)
	}
	if pending.WakeAt != nil || pending.EventKey != nil {
		t.Errorf("pending step %+v", pending)
	}
	if len(seen) != 2 || seen[0].method+" "+seen[0].path != "POST /api/v1/workflows" {
		t.Errorf("calls %+v", seen)
	}
}

// SendEvent posts the key and the payload (none when nil) with the tenant token; ListEvents sends
// key and limit only when set; both answers decode.
func TestEvents(t *testing.T) {
	var seen []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		seen = append(seen, recorded{method: r.Method, path: r.URL.EscapedPath() + "?" + r.URL.RawQuery,
			header: r.Header.Clone(), body: map[string]any{"raw": string(raw)}})
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"event_id": "e1", "delivered": 1}`))
			return
		}
		w.Write([]byte(`{"events": [{"event_id": "e1", "key": "approval:42", "payload": {"by": "ada"}, "delivered": 1,
			"created_at": "2026-12-03T14:00:00Z", "expires_at": "2026-12-04T14:00:00Z"}]}`))
	}))
	defer srv.Close()
	ctx := context.Background()
	c := NewClient(srv.URL, "tenant", WithWorkerToken("worker"))
	sent, err := c.SendEvent(ctx, PostEventRequest{Key: "approval:42", Payload: map[string]any{"by": "ada"}})
	if err != nil || *sent != (PostEventResponse{EventID: "e1", Delivered: 1}) {
		t.Fatalf("sent %+v, %v", sent, err)
	}
	if _, err := c.SendEvent(ctx, PostEventRequest{Key: "ping"}); err != nil {
		t.Fatal(err)
	}
	listed, err := c.ListEvents(ctx, ListEventsParams{Key: "approval:42", Limit: 5})
	if err != nil || len(listed.Events) != 1 {
		t.Fatalf("listed %+v, %v", listed, err)
	}
	ev := listed.Events[0]
	if ev.EventID != "e1" || ev.Key != "approval:42" || fmt.Sprint(ev.Payload) != "map[by:ada]" || ev.Delivered != 1 ||
		!ev.CreatedAt.Equal(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)) || !ev.ExpiresAt.Equal(time.Date(2026, 12, 4, 14, 0, 0, 0, time.UTC)) {
		t.Errorf("event %+v", ev)
	}
	if _, err := c.ListEvents(ctx, ListEventsParams{}); err != nil {
		t.Fatal(err)
	}
	want := []struct{ call, body string }{
		{"POST /api/v1/events?", `{"key":"approval:42","payload":{"by":"ada"}}`},
		{"POST /api/v1/events?", `{"key":"ping"}`},
		{"GET /api/v1/events?key=approval%3A42&limit=5", ""},
		{"GET /api/v1/events?", ""},
	}
	if len(seen) != len(want) {
		t.Fatalf("%d calls, want %d", len(seen), len(want))
	}
	for i, rec := range seen {
		if rec.method+" "+rec.path != want[i].call || rec.body["raw"] != want[i].body {
			t.Errorf("call %d: %s %s %v, want %s %s", i, rec.method, rec.path, rec.body["raw"], want[i].call, want[i].body)
		}
		if rec.header.Get("Authorization") != "Bearer tenant" {
			t.Errorf("call %d: Authorization %q", i, rec.header.Get("Authorization"))
		}
	}
}

// The visibility extension's calls: what they send, and the answers of docs/visibility.md decoded.
func TestVisibilityCalls(t *testing.T) {
	ctx := context.Background()
	srv, reqs := recorder(t, 200, `{"stored": 2, "dropped": 1, "last_seq": 9, "status": "running"}`)
	c := NewClient(srv.URL, "tenant", WithWorkerToken("worker"))
	at := time.Date(2026, 12, 3, 20, 41, 49, 0, time.UTC)
	appended, err := c.PostJobLogs(ctx, "j 1", "tok", []LogLineRequest{
		{Message: "loading scene", Level: LevelInfo, TS: &at}, {Message: "texture missing", Level: LevelWarning}, {Message: "plain"}})
	if err != nil || *appended != (PostJobLogsResponse{Stored: 2, Dropped: 1, LastSeq: 9}) {
		t.Fatalf("PostJobLogs: %+v, %v", appended, err)
	}
	if _, err := c.HeartbeatWithProgress(ctx, "j", "tok", 30, &Progress{Percent: 42.5, Message: "frames 425/1000"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.HeartbeatWithProgress(ctx, "j", "tok", 30, &Progress{Percent: 0}); err != nil {
		t.Fatal(err)
	}
	c.Lease(ctx, "q", LeaseRequest{MaxJobs: 1, WorkerID: "box:1", Worker: &WorkerInfo{SDK: "go", Tasks: []string{"a"}}})
	got := reqs()
	if got[0].path != "/api/v1/jobs/j%201/logs" || got[0].header.Get("Authorization") != "Bearer worker" {
		t.Errorf("logs posted to %s with %q", got[0].path, got[0].header.Get("Authorization"))
	}
	want := "map[lease_token:tok lines:[map[level:info message:loading scene ts:2026-12-03T20:41:49Z] " +
		"map[level:warning message:texture missing] map[message:plain]]]"
	if fmt.Sprint(got[0].body) != want {
		t.Errorf("logs body %v, want %s", got[0].body, want)
	}
	if fmt.Sprint(got[1].body) != "map[extend_secs:30 lease_token:tok progress:map[message:frames 425/1000 percent:42.5]]" {
		t.Errorf("heartbeat body %v", got[1].body)
	}
	if fmt.Sprint(got[2].body["progress"]) != "map[percent:0]" {
		t.Errorf("a progress of 0 must be sent: %v", got[2].body)
	}
	if fmt.Sprint(got[3].body) != "map[max_jobs:1 worker:map[sdk:go tasks:[a]] worker_id:box:1]" {
		t.Errorf("lease body %v", got[3].body)
	}

	srv, reqs = recorder(t, 200, `{
		"lines": [{"seq": 201, "attempt": 2, "ts": "2026-12-03T20:41:49.112Z", "level": "info", "message": "m"},
		          {"seq": 202, "attempt": 2, "ts": "2026-12-03T20:41:50Z", "message": "no level"}],
		"last_seq": 950, "dropped": 3, "has_more": true,
		"attempts": [
			{"attempt": 1, "outcome": "lease_expired", "worker_id": "render-box-1", "started_at": "2026-12-03T20:40:00Z",
			 "ended_at": "2026-12-03T20:41:02Z", "duration_secs": 62.1, "error_message": "lease expired"},
			{"attempt": 2, "outcome": "running", "started_at": "2026-12-03T20:41:03Z"}],
		"workers": [{"worker_id": "render-box-1:4711", "queues": ["renders"], "in_flight": 3,
		             "first_seen_at": "2026-12-03T20:00:00Z", "last_seen_at": "2026-12-03T20:41:49Z", "live": true,
		             "info": {"hostname": "render-box-1", "sdk": "python", "version": "2.0.1", "tasks": ["render", "encode"]}},
		            {"worker_id": "old", "queues": [], "in_flight": 0, "first_seen_at": "2026-12-03T20:00:00Z",
		             "last_seen_at": "2026-12-03T20:00:00Z", "live": false}]}`)
	c = NewClient(srv.URL, "tenant", WithWorkerToken("worker"))
	page, err := c.JobLogs(ctx, "j", JobLogsParams{After: 200, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Lines) != 2 || page.Lines[0].Seq != 201 || page.Lines[0].Attempt != 2 || page.Lines[0].Level != "info" ||
		page.Lines[1].Level != "" || page.Lines[1].Message != "no level" || page.LastSeq != 950 || page.Dropped != 3 ||
		!page.HasMore || page.Lines[0].TS.Nanosecond() != 112_000_000 {
		t.Errorf("logs page %+v", page)
	}
	c.JobLogs(ctx, "j", JobLogsParams{})
	attempts, err := c.JobAttempts(ctx, "j")
	if err != nil || len(attempts.Attempts) != 2 {
		t.Fatalf("attempts %+v, %v", attempts, err)
	}
	a, b := attempts.Attempts[0], attempts.Attempts[1]
	if a.Outcome != AttemptLeaseExpired || *a.WorkerID != "render-box-1" || *a.DurationSecs != 62.1 ||
		*a.ErrorMessage != "lease expired" || a.EndedAt == nil {
		t.Errorf("attempt 1 %+v", a)
	}
	if b.Outcome != AttemptRunning || b.WorkerID != nil || b.EndedAt != nil || b.DurationSecs != nil || b.StartedAt == nil {
		t.Errorf("attempt 2 %+v", b)
	}
	workers, err := c.ListWorkers(ctx)
	if err != nil || len(workers.Workers) != 2 {
		t.Fatalf("workers %+v, %v", workers, err)
	}
	if w := workers.Workers[0]; w.WorkerID != "render-box-1:4711" || !w.Live || w.InFlight != 3 ||
		fmt.Sprint(w.Queues) != "[renders]" || fmt.Sprint(*w.Info) != "{render-box-1 python 2.0.1 [render encode]}" {
		t.Errorf("worker %+v", w)
	}
	if w := workers.Workers[1]; w.Info != nil || w.Live {
		t.Errorf("a worker without info %+v", w)
	}
	got = reqs()
	if got[0].query.Encode() != "after=200&limit=2" || len(got[1].query) != 0 {
		t.Errorf("logs queries %v, %v", got[0].query, got[1].query)
	}
	for _, r := range got {
		if r.header.Get("Authorization") != "Bearer tenant" {
			t.Errorf("%s sent with %q", r.path, r.header.Get("Authorization"))
		}
	}
}

// A job, and a lease item, from a server with the visibility and tracing extensions, and from one
// without them (an upstream server): both decode.
func TestVisibilityFieldsAreOptional(t *testing.T) {
	base := `"id": "j", "queue_name": "q", "task_name": "t", "payload": {}, "config": {}, "status": "running",
		"retry_count": 0, "delivery_count": 1, "created_at": "2026-01-01T00:00:00Z",
		"scheduled_at": "2026-01-01T00:00:00Z", "metadata": {}`
	var item LeasedJob
	raw := `{"lease_token": "l", "traceparent": "` + "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" +
		`", "tracestate": "congo=t61rcWkgMzE", "job": {` + base +
		`, "progress": {"percent": 42.5, "message": "frames", "updated_at": "2026-12-03T20:41:49.112Z"}}}`
	if err := json.Unmarshal([]byte(raw), &item); err != nil {
		t.Fatal(err)
	}
	p := item.Job.Progress
	if item.Traceparent == "" || item.Tracestate != "congo=t61rcWkgMzE" || p == nil || p.Percent != 42.5 ||
		p.Message != "frames" || p.UpdatedAt == nil {
		t.Errorf("extended item %+v, progress %+v", item, p)
	}
	item = LeasedJob{}
	if err := json.Unmarshal([]byte(`{"lease_token": "l", "job": {`+base+`}}`), &item); err != nil {
		t.Fatal(err)
	}
	if item.Traceparent != "" || item.Tracestate != "" || item.Job.Progress != nil {
		t.Errorf("upstream item %+v", item)
	}
}
