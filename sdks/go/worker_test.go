package queueflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer is a stub of the worker protocol for the behaviours a real server makes hard to
// produce on demand (a heartbeat answering cancelled, a 503 from lease, ...).
type fakeServer struct {
	t  *testing.T
	mu sync.Mutex
	// leases answers lease calls in turn; once exhausted, an empty lease.
	leases     []func(w http.ResponseWriter)
	leaseCalls int
	leaseBody  []map[string]any
	// heartbeat answers a heartbeat of a job; nil answers running.
	heartbeat  func(id string, w http.ResponseWriter)
	heartbeats map[string]int
	beatTimes  map[string][]time.Time
	// report answers complete and fail; nil answers 204.
	report   func(w http.ResponseWriter)
	reports  []report
	reported chan report
	// offers lists POST /api/v1/jobs/complete in /openapi.json; probes answer /openapi.json in turn
	// before that (nil: the default answer).
	offers     bool
	probes     []func(w http.ResponseWriter)
	probeCalls int
	// batch answers POST /api/v1/jobs/complete (call counts from 0); nil answers 200 with
	// itemStatus per item (nil: 204 each).
	batch      func(call int, ids []string, w http.ResponseWriter)
	itemStatus func(id string) int
	batchCalls [][]string
	// logs answers POST /api/v1/jobs/{id}/logs (nil: 200); logCalls records each call.
	logs     func(id string, w http.ResponseWriter)
	logCalls []logCall
	// beatBodies records each heartbeat's body, per job.
	beatBodies map[string][]map[string]any
	// order records the calls about jobs as "<action> <id>" (heartbeat, logs, complete, fail), in
	// the order they arrived.
	order []string
}

// logCall is one POST /api/v1/jobs/{id}/logs as the fake received it.
type logCall struct {
	id    string
	token string
	lines []map[string]any
	at    time.Time
}

type report struct {
	kind, id string
	body     map[string]any
	batch    bool // an item of POST /api/v1/jobs/complete
}

func newFake(t *testing.T) (*fakeServer, *Client) {
	f := newFakeServer(t)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, NewClient(srv.URL, "tenant", WithWorkerToken("worker"))
}

func newFakeServer(t *testing.T) *fakeServer {
	return &fakeServer{t: t, heartbeats: map[string]int{}, beatTimes: map[string][]time.Time{},
		beatBodies: map[string][]map[string]any{}, reported: make(chan report, 1000)}
}

// newFakeInMemory is newFake without a network: the client's transport calls the fake directly,
// so that a test can run the worker inside a testing/synctest bubble, on its fake clock.
func newFakeInMemory(t *testing.T) (*fakeServer, *Client) {
	f := newFakeServer(t)
	return f, NewClient("http://fake.invalid", "tenant", WithWorkerToken("worker"),
		WithHTTPClient(&http.Client{Transport: inMemory{f}}))
}

// inMemory is an http.RoundTripper that serves each request with a handler, in the caller's goroutine.
type inMemory struct{ h http.Handler }

func (m inMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := r.Context().Err(); err != nil {
		return nil, err
	}
	if r.Body == nil {
		r.Body = http.NoBody // as a server sees a request without one
	}
	rec := httptest.NewRecorder()
	m.h.ServeHTTP(rec, r)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func errorBody(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "timestamp": "2026-01-01T00:00:00Z"})
}

func leased(tasks ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		var jobs []map[string]any
		for i, task := range tasks {
			jobs = append(jobs, map[string]any{"lease_token": "tok-" + task, "job": map[string]any{
				"id": task, "task_name": strings.SplitN(task, "#", 2)[0], "queue_name": "q", "status": "running",
				"payload": map[string]any{"i": i}, "config": map[string]any{}, "metadata": map[string]any{},
				"retry_count": 0, "delivery_count": 1,
				"created_at": "2026-01-01T00:00:00Z", "scheduled_at": "2026-01-01T00:00:00Z"}})
		}
		writeJSON(w, 200, map[string]any{"jobs": jobs})
	}
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer worker" {
		f.t.Errorf("%s sent with %q", r.URL.Path, r.Header.Get("Authorization"))
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	json.Unmarshal(raw, &body)
	switch r.Method + " " + r.URL.Path {
	case "GET /openapi.json":
		f.serveOpenAPI(w)
		return
	case "POST /api/v1/jobs/complete":
		f.serveBatch(w, raw)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // api v1 {jobs|queues} {id} {action}
	action, id := parts[len(parts)-1], parts[len(parts)-2]
	f.mu.Lock()
	switch action {
	case "lease":
		var answer func(w http.ResponseWriter)
		if f.leaseCalls < len(f.leases) {
			answer = f.leases[f.leaseCalls]
		}
		f.leaseCalls++
		f.leaseBody = append(f.leaseBody, body)
		f.mu.Unlock()
		if answer == nil {
			time.Sleep(20 * time.Millisecond)
			writeJSON(w, 200, map[string]any{"jobs": []any{}})
		} else {
			answer(w)
		}
	case "heartbeat":
		f.heartbeats[id]++
		f.beatTimes[id] = append(f.beatTimes[id], time.Now())
		f.beatBodies[id] = append(f.beatBodies[id], body)
		f.order = append(f.order, "heartbeat "+id)
		hb := f.heartbeat
		f.mu.Unlock()
		if hb == nil {
			writeJSON(w, 200, map[string]string{"status": "running"})
		} else {
			hb(id, w)
		}
	case "logs":
		var lines []map[string]any
		if raw, ok := body["lines"].([]any); ok {
			for _, line := range raw {
				lines = append(lines, line.(map[string]any))
			}
		}
		token, _ := body["lease_token"].(string)
		f.logCalls = append(f.logCalls, logCall{id: id, token: token, lines: lines, at: time.Now()})
		f.order = append(f.order, "logs "+id)
		answer := f.logs
		f.mu.Unlock()
		if answer == nil {
			writeJSON(w, 200, map[string]any{"stored": len(lines), "dropped": 0, "last_seq": len(lines)})
		} else {
			answer(id, w)
		}
	case "complete", "fail":
		rep := report{kind: action, id: id, body: body}
		f.reports = append(f.reports, rep)
		f.order = append(f.order, action+" "+id)
		answer := f.report
		f.mu.Unlock()
		f.reported <- rep
		if answer == nil {
			w.WriteHeader(204)
		} else {
			answer(w)
		}
	default:
		f.mu.Unlock()
		f.t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
	}
}

func (f *fakeServer) serveOpenAPI(w http.ResponseWriter) {
	f.mu.Lock()
	var answer func(w http.ResponseWriter)
	if f.probeCalls < len(f.probes) {
		answer = f.probes[f.probeCalls]
	}
	f.probeCalls++
	offers := f.offers
	f.mu.Unlock()
	if answer != nil {
		answer(w)
		return
	}
	paths := map[string]any{"/api/v1/jobs/{id}/complete": map[string]any{"post": map[string]any{}}}
	if offers {
		paths["/api/v1/jobs/complete"] = map[string]any{"post": map[string]any{}}
	}
	writeJSON(w, 200, map[string]any{"openapi": "3.1.0", "paths": paths})
}

func (f *fakeServer) serveBatch(w http.ResponseWriter, raw []byte) {
	var req struct {
		Jobs []map[string]any `json:"jobs"`
	}
	if err := json.Unmarshal(raw, &req); err != nil || len(req.Jobs) == 0 || len(req.Jobs) > 100 {
		f.t.Errorf("bad batch acknowledgement (%v): %s", err, raw)
		errorBody(w, 400, "bad request")
		return
	}
	ids := make([]string, len(req.Jobs))
	f.mu.Lock()
	call := len(f.batchCalls)
	for i, item := range req.Jobs {
		ids[i], _ = item["id"].(string)
		rep := report{kind: "complete", id: ids[i], body: item, batch: true}
		f.reports = append(f.reports, rep)
		f.order = append(f.order, "complete "+ids[i])
		f.reported <- rep
	}
	f.batchCalls = append(f.batchCalls, ids)
	answer, itemStatus := f.batch, f.itemStatus
	f.mu.Unlock()
	if answer != nil {
		answer(call, ids, w)
		return
	}
	writeBatchAnswer(w, ids, itemStatus)
}

// writeBatchAnswer answers a batch acknowledgement with status(id) per item (nil: 204 each).
func writeBatchAnswer(w http.ResponseWriter, ids []string, status func(id string) int) {
	results := make([]map[string]any, len(ids))
	for i, id := range ids {
		st := 204
		if status != nil {
			st = status(id)
		}
		results[i] = map[string]any{"id": id, "status": st, "outcome": map[int]string{204: "completed",
			409: "conflict", 404: "not_found"}[st]}
		if st != 204 {
			results[i]["error"] = "no"
		}
	}
	writeJSON(w, 200, map[string]any{"results": results})
}

// calls returns the ids of each batch acknowledgement and the number of /openapi.json reads.
func (f *fakeServer) calls() (batches [][]string, probes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.batchCalls...), f.probeCalls
}

func (f *fakeServer) snapshot() (reports []report, beats map[string]int, leaseCalls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	beats = map[string]int{}
	for k, v := range f.heartbeats {
		beats[k] = v
	}
	return append([]report(nil), f.reports...), beats, f.leaseCalls
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// runUntil runs the worker until done returns true (checked after each report), then cancels it
// and returns Run's error.
func runUntil(t *testing.T, w *Worker, f *fakeServer, reports int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	deadline := time.After(5 * time.Second)
	for i := 0; i < reports; i++ {
		select {
		case <-f.reported:
		case err := <-errc:
			cancel()
			return err
		case <-deadline:
			cancel()
			t.Fatalf("only %d of %d reports", i, reports)
		}
	}
	cancel()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancellation")
		return nil
	}
}

func TestWorkerReportsOutcomes(t *testing.T) {
	for _, offers := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch route offered %v", offers), func(t *testing.T) { testWorkerReportsOutcomes(t, offers) })
	}
}

func testWorkerReportsOutcomes(t *testing.T, offers bool) {
	f, c := newFake(t)
	f.offers = offers
	f.leases = []func(http.ResponseWriter){leased("ok#1", "nil#2", "err#3", "perm#4", "panic#5", "unknown#6")}
	var doneMu sync.Mutex
	done := map[string]Outcome{}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 3, BatchSize: 6, Logger: quiet(),
		OnJobDone: func(job *Job, o Outcome, err error) {
			doneMu.Lock()
			done[job.ID] = o
			doneMu.Unlock()
		}})
	w.Handle("ok", func(ctx context.Context, job *Job) (map[string]any, error) { return job.Payload, nil })
	w.Handle("nil", func(ctx context.Context, job *Job) (map[string]any, error) { return nil, nil })
	w.Handle("err", func(ctx context.Context, job *Job) (map[string]any, error) { return nil, errors.New("boom") })
	w.Handle("perm", func(ctx context.Context, job *Job) (map[string]any, error) {
		return nil, fmt.Errorf("wrapped: %w", Permanent(errors.New("invalid input")))
	})
	w.Handle("panic", func(ctx context.Context, job *Job) (map[string]any, error) { panic("kaboom") })
	if err := runUntil(t, w, f, 6); err != nil {
		t.Fatal(err)
	}
	reports, _, _ := f.snapshot()
	got := map[string]report{}
	for _, r := range reports {
		got[r.id] = r
	}
	check := func(id, kind string, field string, want any) {
		t.Helper()
		r := got[id]
		if r.kind != kind || fmt.Sprint(r.body[field]) != fmt.Sprint(want) {
			t.Errorf("%s: %s %v, want %s with %s=%v", id, r.kind, r.body, kind, field, want)
		}
		if r.body["lease_token"] != "tok-"+id {
			t.Errorf("%s: lease token %v", id, r.body["lease_token"])
		}
	}
	for _, r := range reports {
		if r.batch != (offers && r.kind == "complete") {
			t.Errorf("%s %s sent in a batch: %v", r.kind, r.id, r.batch)
		}
	}
	check("ok#1", "complete", "result", map[string]any{"i": 0.0})
	check("nil#2", "complete", "result", map[string]any{})
	check("err#3", "fail", "retryable", true)
	check("err#3", "fail", "error", "boom")
	check("perm#4", "fail", "retryable", false)
	check("perm#4", "fail", "error", "wrapped: invalid input")
	check("panic#5", "fail", "retryable", true)
	check("unknown#6", "fail", "retryable", false)
	check("unknown#6", "fail", "error", "no worker handler for task 'unknown'")
	if len(reports) != 6 {
		t.Fatalf("%d reports: %v", len(reports), reports)
	}
	doneMu.Lock()
	defer doneMu.Unlock()
	want := map[string]Outcome{"ok#1": OutcomeOK, "nil#2": OutcomeOK, "err#3": OutcomeError, "perm#4": OutcomeError,
		"panic#5": OutcomeError} // no handler ran for unknown#6
	if fmt.Sprint(done) != fmt.Sprint(want) {
		t.Fatalf("OnJobDone saw %v, want %v", done, want)
	}
}

func TestWorkerAbandonsOnNonRunningHeartbeatOr409(t *testing.T) {
	for _, answer := range []string{"cancelled", "completed", "409", "404"} {
		t.Run(answer, func(t *testing.T) {
			f, c := newFake(t)
			f.leases = []func(http.ResponseWriter){leased("long#1")}
			f.heartbeat = func(id string, w http.ResponseWriter) {
				switch answer {
				case "409":
					errorBody(w, 409, "lease is no longer held")
				case "404":
					errorBody(w, 404, "job not found")
				default:
					writeJSON(w, 200, map[string]string{"status": answer})
				}
			}
			var mu sync.Mutex
			var outcomes []Outcome
			observed := make(chan error, 1)
			w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, HeartbeatInterval: 30 * time.Millisecond,
				Logger: quiet(), OnJobDone: func(job *Job, o Outcome, err error) {
					mu.Lock()
					outcomes = append(outcomes, o)
					mu.Unlock()
				}})
			w.Handle("long", func(ctx context.Context, job *Job) (map[string]any, error) {
				select {
				case <-ctx.Done():
					observed <- context.Cause(ctx)
					return map[string]any{"ignored": true}, nil // even a result is not reported
				case <-time.After(3 * time.Second):
					return nil, errors.New("never cancelled")
				}
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			select {
			case cause := <-observed:
				if !errors.Is(cause, ErrLeaseLost) {
					t.Errorf("cause %v", cause)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("the handler never saw the cancellation")
			}
			time.Sleep(100 * time.Millisecond)
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			reports, beats, _ := f.snapshot()
			if len(reports) != 0 {
				t.Fatalf("reported %v", reports)
			}
			if beats["long#1"] != 1 {
				t.Fatalf("heartbeats after the stop: %d", beats["long#1"])
			}
			mu.Lock()
			defer mu.Unlock()
			if len(outcomes) != 1 || outcomes[0] != OutcomeCancelled {
				t.Fatalf("outcomes %v", outcomes)
			}
		})
	}
}

func TestWorkerHeartbeatsJobsWaitingTheirTurn(t *testing.T) {
	f, c := newFake(t)
	f.leases = []func(http.ResponseWriter){leased("slow#1", "slow#2", "slow#3")}
	var mu sync.Mutex
	started := map[string]time.Time{}
	var order []string
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 1, BatchSize: 3,
		HeartbeatInterval: 40 * time.Millisecond, Logger: quiet()})
	w.Handle("slow", func(ctx context.Context, job *Job) (map[string]any, error) {
		mu.Lock()
		started[job.ID] = time.Now()
		order = append(order, job.ID)
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
		return nil, nil
	})
	if err := runUntil(t, w, f, 3); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "slow#1,slow#2,slow#3" {
		t.Fatalf("jobs ran out of lease order: %v", order)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range []string{"slow#2", "slow#3"} {
		before := 0
		for _, at := range f.beatTimes[id] {
			if at.Before(started[id]) {
				before++
			}
		}
		if before < 2 {
			t.Errorf("%s got %d heartbeats while it waited its turn", id, before)
		}
	}
	if f.leaseCalls < 1 {
		t.Fatal("no lease")
	}
}

func TestWorkerConcurrency(t *testing.T) {
	f, c := newFake(t)
	f.leases = []func(http.ResponseWriter){leased("c#1", "c#2", "c#3", "c#4")}
	var mu sync.Mutex
	running, peak := 0, 0
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 2, BatchSize: 4, Logger: quiet()})
	w.Handle("c", func(ctx context.Context, job *Job) (map[string]any, error) {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil, nil
	})
	if err := runUntil(t, w, f, 4); err != nil {
		t.Fatal(err)
	}
	if peak != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak)
	}
}

func TestWorkerStopsOnAuthErrors(t *testing.T) {
	for _, status := range []int{401, 403, 400} {
		f, c := newFake(t)
		f.leases = []func(http.ResponseWriter){func(w http.ResponseWriter) { errorBody(w, status, "no") }}
		w := NewWorker(c, "q", WorkerOptions{WaitSecs: 1, Logger: quiet()})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := w.Run(ctx)
		cancel()
		apiErr, ok := AsAPIError(err)
		if !ok || apiErr.Status != status || !apiErr.HasBody() {
			t.Fatalf("status %d: Run returned %v", status, err)
		}
		if _, _, calls := f.snapshot(); calls != 1 {
			t.Fatalf("status %d: %d lease calls; the loop must not spin", status, calls)
		}
	}
}

func TestWorkerBacksOffAndRecovers(t *testing.T) {
	f, c := newFake(t)
	unavailable := func(w http.ResponseWriter) { errorBody(w, 503, "unavailable") }
	broken := func(w http.ResponseWriter) { // a connection cut without an answer
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		conn.Close()
	}
	f.leases = []func(http.ResponseWriter){unavailable, broken, unavailable, leased("ok#1")}
	w := NewWorker(c, "q", WorkerOptions{WaitSecs: 1, MaxBackoff: 50 * time.Millisecond, Logger: quiet()})
	w.Handle("ok", func(ctx context.Context, job *Job) (map[string]any, error) { return nil, nil })
	start := time.Now()
	if err := runUntil(t, w, f, 1); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 60*time.Millisecond {
		t.Fatal("no backoff between failed leases")
	}
	if reports, _, calls := f.snapshot(); len(reports) != 1 || calls < 4 {
		t.Fatalf("reports %v after %d lease calls", reports, calls)
	}
}

func TestWorkerRejectedReportIsNotResent(t *testing.T) {
	f, c := newFake(t)
	f.leases = []func(http.ResponseWriter){leased("ok#1")}
	f.report = func(w http.ResponseWriter) { errorBody(w, 409, "lease is no longer held") }
	w := NewWorker(c, "q", WorkerOptions{WaitSecs: 1, Logger: quiet()})
	w.Handle("ok", func(ctx context.Context, job *Job) (map[string]any, error) { return nil, nil })
	if err := runUntil(t, w, f, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if reports, _, _ := f.snapshot(); len(reports) != 1 {
		t.Fatalf("a rejected report was sent %d times", len(reports))
	}
}

func TestWorkerUnansweredReportIsResentWithinTheLease(t *testing.T) {
	f, c := newFake(t)
	f.leases = []func(http.ResponseWriter){leased("ok#1")}
	var n int
	f.report = func(w http.ResponseWriter) {
		n++
		if n == 1 {
			errorBody(w, 503, "restarting")
			return
		}
		w.WriteHeader(204)
	}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 5, WaitSecs: 1, Logger: quiet()})
	w.Handle("ok", func(ctx context.Context, job *Job) (map[string]any, error) { return nil, nil })
	if err := runUntil(t, w, f, 2); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if reports, _, _ := f.snapshot(); len(reports) != 2 {
		t.Fatalf("%d reports, want the 503 one and its resend", len(reports))
	}
}

func TestWorkerDrainsOnCancel(t *testing.T) {
	for _, offers := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch route offered %v", offers), func(t *testing.T) { testWorkerDrainsOnCancel(t, offers) })
	}
}

func testWorkerDrainsOnCancel(t *testing.T, offers bool) {
	f, c := newFake(t)
	f.offers = offers
	f.leases = []func(http.ResponseWriter){leased("slow#1")}
	started := make(chan struct{})
	var handlerErr error
	w := NewWorker(c, "q", WorkerOptions{WaitSecs: 1, Logger: quiet()})
	w.Handle("slow", func(ctx context.Context, job *Job) (map[string]any, error) {
		close(started)
		time.Sleep(200 * time.Millisecond)
		handlerErr = ctx.Err()
		return map[string]any{"done": true}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-started
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if handlerErr != nil {
		t.Fatalf("draining cancelled the handler: %v", handlerErr)
	}
	reports, _, _ := f.snapshot()
	if len(reports) != 1 || reports[0].kind != "complete" || reports[0].batch != offers {
		t.Fatalf("the running job was not reported before Run returned: %v", reports)
	}
	if err := w.Run(ctx); err != nil {
		t.Fatalf("a stopped worker can run again: %v", err)
	}
}

func TestWorkerLeaseSize(t *testing.T) {
	for _, c := range []struct{ concurrency, batch, want int }{{1, 3, 3}, {4, 0, 4}, {4, 1, 1}, {2, 5, 5}} {
		f, client := newFake(t)
		f.leases = []func(http.ResponseWriter){func(w http.ResponseWriter) { errorBody(w, 401, "no") }}
		w := NewWorker(client, "q", WorkerOptions{LeaseSecs: 7, WaitSecs: 2, Concurrency: c.concurrency, BatchSize: c.batch, Logger: quiet()})
		if err := w.Run(context.Background()); !IsUnauthorized(err) {
			t.Fatal(err)
		}
		f.mu.Lock()
		body := f.leaseBody[0]
		f.mu.Unlock()
		if body["max_jobs"] != float64(c.want) || body["lease_secs"] != 7.0 || body["wait_secs"] != 2.0 {
			t.Errorf("concurrency %d batch %d: lease body %v, want max_jobs %d", c.concurrency, c.batch, body, c.want)
		}
	}
}
