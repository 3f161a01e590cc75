package queueflow

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"
)

type recorded struct {
	method, path string
	query        url.Values
	header       http.Header
	body         map[string]any
}

// recorder answers every request with status and body, and records it.
func recorder(t *testing.T, status int, body string) (*httptest.Server, func() []recorded) {
	var mu sync.Mutex
	var reqs []recorded
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		rec := recorded{method: r.Method, path: r.URL.EscapedPath(), query: r.URL.Query(), header: r.Header.Clone()}
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &rec.body); err != nil {
				t.Errorf("body is not a JSON object: %s", raw)
			}
		}
		mu.Lock()
		reqs = append(reqs, rec)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), reqs...)
	}
}

func TestNewClientDefaults(t *testing.T) {
	c := NewClient("http://x:8000/", "tenant")
	if c.BaseURL() != "http://x:8000" || c.Timeout() != DefaultTimeout || c.workerToken != "tenant" || c.http != pooledHTTP {
		t.Fatalf("defaults %+v", c)
	}
	h := &http.Client{}
	c = NewClient("http://x", "tenant", WithWorkerToken("worker"), WithTimeout(time.Second), WithHTTPClient(h),
		WithHTTPClient(nil), WithUserAgent("me/1"))
	if c.workerToken != "worker" || c.Timeout() != time.Second || c.http != h || c.userAgent != "me/1" {
		t.Fatalf("options %+v", c)
	}
}

func TestTokensPerRoute(t *testing.T) {
	srv, reqs := recorder(t, 200, `{"jobs":[],"status":"running","tenant":"x","access":"read_write"}`)
	ctx := context.Background()
	c := NewClient(srv.URL, "tenant", WithWorkerToken("worker"))
	c.WhoAmI(ctx)
	c.Lease(ctx, "images", LeaseRequest{MaxJobs: 2, LeaseSecs: 60, WaitSecs: 1})
	c.Heartbeat(ctx, "j", "tok", 30)
	c.Health(ctx)
	// No worker token: the tenant token is used on the worker routes too.
	NewClient(srv.URL, "tenant").Lease(ctx, "images", LeaseRequest{})
	got := reqs()
	want := []string{"Bearer tenant", "Bearer worker", "Bearer worker", "", "Bearer tenant"}
	for i, w := range want {
		if got[i].header.Get("Authorization") != w {
			t.Errorf("request %d (%s): Authorization %q, want %q", i, got[i].path, got[i].header.Get("Authorization"), w)
		}
	}
	if got[1].path != "/api/v1/queues/images/lease" || got[1].body["max_jobs"] != 2.0 || got[1].body["wait_secs"] != 1.0 {
		t.Errorf("lease request %+v", got[1])
	}
	if got[2].body["lease_token"] != "tok" || got[2].body["extend_secs"] != 30.0 {
		t.Errorf("heartbeat body %v", got[2].body)
	}
	if len(got[4].body) != 0 {
		t.Errorf("empty lease options must be omitted: %v", got[4].body)
	}
}

func TestCreateJobIdempotencyHeaderAndBody(t *testing.T) {
	srv, reqs := recorder(t, 201, `{"job_id":"j1"}`)
	c := NewClient(srv.URL, "tenant")
	resp, err := c.CreateJob(context.Background(), CreateJobRequest{TaskName: "t", Payload: map[string]any{"a": 1},
		Config: &JobConfigRequest{Queue: "q", Priority: Int(0)}}, "key-1")
	if err != nil || resp.JobID != "j1" {
		t.Fatal(resp, err)
	}
	c.CreateJob(context.Background(), CreateJobRequest{TaskName: "t"}, "")
	got := reqs()
	if got[0].header.Get("Idempotency-Key") != "key-1" || got[0].header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v", got[0].header)
	}
	cfg := got[0].body["config"].(map[string]any)
	if cfg["queue"] != "q" || cfg["priority"] != 0.0 || len(cfg) != 2 {
		t.Fatalf("config %v (a set zero priority must be sent, unset fields omitted)", cfg)
	}
	if _, has := got[1].header["Idempotency-Key"]; has {
		t.Fatal("empty idempotency key sent")
	}
	if len(got[1].body) != 1 {
		t.Fatalf("optional fields must be omitted: %v", got[1].body)
	}
}

func TestListParamsQuery(t *testing.T) {
	srv, reqs := recorder(t, 200, `{"jobs":[],"limit":2,"offset":0,"has_more":true,"total":4,"next_cursor":"c2"}`)
	c := NewClient(srv.URL, "tenant")
	after := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	resp, err := c.ListJobs(context.Background(), ListJobsParams{Status: "pending", Queue: "q", TaskName: "t",
		ListParams: ListParams{Limit: 2, Offset: 3, OrderBy: "created_at ASC", IncludeTotal: true, Cursor: "c1",
			CreatedAfter: &after}})
	if err != nil || !resp.HasMore || *resp.Total != 4 || *resp.NextCursor != "c2" || resp.Limit != 2 {
		t.Fatal(resp, err)
	}
	q := reqs()[0].query
	want := map[string]string{"status": "pending", "queue": "q", "task_name": "t", "limit": "2", "offset": "3",
		"order_by": "created_at ASC", "include_total": "true", "cursor": "c1", "created_after": "2026-01-02T02:04:05Z"}
	for k, v := range want {
		if q.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, q.Get(k), v)
		}
	}
	if q.Has("created_before") || len(q) != len(want) {
		t.Errorf("unexpected parameters %v", q)
	}
	c.ListDeadLetters(context.Background(), ListDeadLettersParams{Replayed: Bool(false)})
	if reqs()[1].query.Get("replayed") != "false" {
		t.Errorf("replayed %v", reqs()[1].query)
	}
}

func TestPathSegmentsEscaped(t *testing.T) {
	srv, reqs := recorder(t, 200, `{"queue":"a/b","paused":true,"pending":0,"running":0}`)
	NewClient(srv.URL, "t").PauseQueue(context.Background(), "a/b")
	if p := reqs()[0].path; p != "/api/v1/queues/a%2Fb/pause" {
		t.Fatalf("path %s", p)
	}
}

func TestTimeoutOption(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	start := time.Now()
	_, err := NewClient(srv.URL, "t", WithTimeout(100*time.Millisecond)).WhoAmI(context.Background())
	if err == nil || time.Since(start) > time.Second {
		t.Fatalf("timeout not applied: %v after %v", err, time.Since(start))
	}
	if !IsTransient(err) {
		t.Fatalf("a timed out request is transient: %v", err)
	}
}

func TestWorkerOptionDefaults(t *testing.T) {
	o := WorkerOptions{}.withDefaults()
	if o.LeaseSecs != 60 || o.WaitSecs != 20 || o.Concurrency != 1 || o.BatchSize != 1 ||
		o.HeartbeatInterval != 30*time.Second || o.MaxBackoff != 5*time.Second || o.Logger == nil {
		t.Fatalf("defaults %+v", o)
	}
	o = WorkerOptions{LeaseSecs: 5000, WaitSecs: -1, Concurrency: 4, BatchSize: 500}.withDefaults()
	if o.LeaseSecs != 3600 || o.WaitSecs != 0 || o.BatchSize != 100 || o.HeartbeatInterval != 1800*time.Second {
		t.Fatalf("clamped %+v", o)
	}
	if o = (WorkerOptions{Concurrency: 3, WaitSecs: 99}).withDefaults(); o.BatchSize != 3 || o.WaitSecs != 30 {
		t.Fatalf("batch default %+v", o)
	}
	if o = (WorkerOptions{}).withDefaults(); o.AckLinger != 2*time.Millisecond {
		t.Fatalf("acknowledgement wait %v, want 2ms by default", o.AckLinger)
	}
	if o = (WorkerOptions{AckLinger: -1}).withDefaults(); o.AckLinger != 0 {
		t.Fatalf("acknowledgement wait %v, want none for a negative value", o.AckLinger)
	}
}
