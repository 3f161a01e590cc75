package queueflow

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The worker loop's batch acknowledgement (sdks/conformance/README.md, "Batch acknowledgement"),
// against the fake server of worker_test.go.

// runWhile runs the worker until cond holds (polled), then cancels it and returns Run's error.
func runWhile(t *testing.T, w *Worker, cond func() bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		select {
		case err := <-errc:
			return err
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the condition never held")
		}
	}
	cancel()
	select {
	case err := <-errc:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
		return nil
	}
}

// perJob counts the reports of each kind sent one call per job, and the batch items.
func (f *fakeServer) perJob() (completes, fails, batched map[string]int) {
	completes, fails, batched = map[string]int{}, map[string]int{}, map[string]int{}
	reports, _, _ := f.snapshot()
	for _, r := range reports {
		switch {
		case r.batch:
			batched[r.id]++
		case r.kind == "complete":
			completes[r.id]++
		default:
			fails[r.id]++
		}
	}
	return completes, fails, batched
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s#%d", prefix, i+1)
	}
	return out
}

func echo(ctx context.Context, job *Job) (map[string]any, error) { return job.Payload, nil }

func TestBatchAcksSuccessesManyPerCall(t *testing.T) {
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased(append(ids("ok", 12), "perm#13")...)}
	f.batch = func(call int, ids []string, w http.ResponseWriter) {
		time.Sleep(50 * time.Millisecond) // the next batch builds meanwhile
		writeBatchAnswer(w, ids, nil)
	}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 4, BatchSize: 13, Logger: quiet()})
	w.Handle("ok", func(ctx context.Context, job *Job) (map[string]any, error) {
		time.Sleep(10 * time.Millisecond)
		return job.Payload, nil
	})
	w.Handle("perm", func(ctx context.Context, job *Job) (map[string]any, error) {
		return nil, Permanent(fmt.Errorf("invalid input"))
	})
	if err := runUntil(t, w, f, 13); err != nil {
		t.Fatal(err)
	}
	completes, fails, batched := f.perJob()
	batches, probes := f.calls()
	if len(completes) != 0 || len(batched) != 12 || fails["perm#13"] != 1 || len(fails) != 1 {
		t.Fatalf("per-job completes %v, fails %v, batched %v", completes, fails, batched)
	}
	for id, n := range batched {
		if n != 1 {
			t.Errorf("%s acknowledged %d times", id, n)
		}
	}
	if probes != 1 {
		t.Errorf("/openapi.json read %d times, want once", probes)
	}
	if len(batches) >= 12 {
		t.Errorf("%d calls for 12 acknowledgements: %v", len(batches), batches)
	}
	reports, _, _ := f.snapshot()
	for _, r := range reports {
		if r.batch {
			if r.body["lease_token"] != "tok-"+r.id {
				t.Errorf("%s: lease token %v", r.id, r.body["lease_token"])
			}
			var n int
			fmt.Sscanf(r.id, "ok#%d", &n)
			if fmt.Sprint(r.body["result"]) != fmt.Sprint(map[string]any{"i": float64(n - 1)}) {
				t.Errorf("%s: result %v", r.id, r.body["result"])
			}
		}
	}
}

func TestBatchAcksAtMost100PerCall(t *testing.T) {
	f, c := newFake(t)
	f.offers = true
	all := ids("b", 150)
	f.leases = []func(http.ResponseWriter){leased(all[:100]...), leased(all[100:]...)}
	// b#1 finishes first and goes alone; the others finish while its call is in flight.
	firstCall := make(chan struct{})
	var finished sync.WaitGroup
	finished.Add(149)
	f.batch = func(call int, ids []string, w http.ResponseWriter) {
		if call == 0 {
			close(firstCall)
			finished.Wait()
			time.Sleep(200 * time.Millisecond) // their completions reach the buffer
		}
		writeBatchAnswer(w, ids, nil)
	}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 150, BatchSize: 100, Logger: quiet()})
	w.Handle("b", func(ctx context.Context, job *Job) (map[string]any, error) {
		if job.ID != "b#1" {
			<-firstCall
			defer finished.Done()
		}
		return job.Payload, nil
	})
	if err := runUntil(t, w, f, 150); err != nil {
		t.Fatal(err)
	}
	batches, _ := f.calls()
	largest, total := 0, 0
	for _, b := range batches {
		largest = max(largest, len(b))
		total += len(b)
	}
	if total != 150 || largest != 100 || len(batches) != 3 {
		t.Fatalf("%d items in %d calls, the largest of %d; want 150, at most (and here exactly) 100 a call",
			total, len(batches), largest)
	}
}

func TestBatchAckItemAnswersAreFinal(t *testing.T) {
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased("ok#1", "lost#2", "gone#3")}
	f.itemStatus = func(id string) int {
		switch {
		case strings.HasPrefix(id, "lost"):
			return 409
		case strings.HasPrefix(id, "gone"):
			return 404
		}
		return 204
	}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 3, Logger: quiet()})
	for _, task := range []string{"ok", "lost", "gone"} {
		w.Handle(task, echo)
	}
	if err := runUntil(t, w, f, 3); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	completes, fails, batched := f.perJob()
	if len(completes)+len(fails) != 0 || len(batched) != 3 {
		t.Fatalf("per-job completes %v, fails %v, batched %v", completes, fails, batched)
	}
	for id, n := range batched {
		if n != 1 {
			t.Errorf("%s sent %d times; an answered item is never sent again", id, n)
		}
	}
}

func TestBatchRouteRefusedFallsBackForGood(t *testing.T) {
	for _, status := range []int{404, 405} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			f, c := newFake(t)
			f.offers = true
			f.leases = []func(http.ResponseWriter){leased("ok#1", "ok#2"), leased("ok#3")}
			f.batch = func(call int, ids []string, w http.ResponseWriter) { errorBody(w, status, "not found") }
			w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 2, Logger: quiet()})
			w.Handle("ok", echo)
			err := runWhile(t, w, func() bool {
				completes, _, _ := f.perJob()
				return len(completes) == 3
			})
			if err != nil {
				t.Fatal(err)
			}
			completes, _, _ := f.perJob()
			batches, probes := f.calls()
			if len(batches) != 1 || probes != 1 {
				t.Fatalf("%d batch calls, %d probes; want 1 of each", len(batches), probes)
			}
			for _, id := range []string{"ok#1", "ok#2", "ok#3"} {
				if completes[id] != 1 {
					t.Errorf("%s completed %d times one call per job", id, completes[id])
				}
			}
		})
	}
}

func TestBatchAckRejectedGoesPerJobThisTime(t *testing.T) {
	// A refusal other than 404/405 (here a 413) sends those items one call per job, and the next
	// flush tries the batch route again.
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased("ok#1"), leased("ok#2")}
	f.batch = func(call int, ids []string, w http.ResponseWriter) { errorBody(w, 413, "too large") }
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 1, Logger: quiet()})
	w.Handle("ok", echo)
	err := runWhile(t, w, func() bool {
		completes, _, _ := f.perJob()
		return len(completes) == 2
	})
	if err != nil {
		t.Fatal(err)
	}
	batches, probes := f.calls()
	if len(batches) != 2 || probes != 1 {
		t.Fatalf("%d batch calls, %d probes; want 2 and 1", len(batches), probes)
	}
}

func TestBatchAckUnaccountedItemGoesPerJob(t *testing.T) {
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased("ok#1")}
	f.batch = func(call int, ids []string, w http.ResponseWriter) { writeBatchAnswer(w, []string{"other"}, nil) }
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Logger: quiet()})
	w.Handle("ok", echo)
	err := runWhile(t, w, func() bool {
		completes, _, _ := f.perJob()
		return completes["ok#1"] == 1
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBatchRouteProbe(t *testing.T) {
	garbage := func(w http.ResponseWriter) { // no HTTP answer (a cut connection net/http retries)
		hj, _ := w.(http.Hijacker)
		conn, _, _ := hj.Hijack()
		conn.Write([]byte("not http\r\n\r\n"))
		conn.Close()
	}
	cases := []struct {
		name   string
		offers bool
		probes []func(http.ResponseWriter)
		// want: the number of /openapi.json reads, and whether ok#1 and ok#2 went in a batch
		wantProbes   int
		want1, want2 bool
	}{
		{name: "offered", offers: true, wantProbes: 1, want1: true, want2: true},
		{name: "not offered", offers: false, wantProbes: 1},
		{name: "401 settles it", offers: true, wantProbes: 1,
			probes: []func(http.ResponseWriter){func(w http.ResponseWriter) { errorBody(w, 401, "no") }}},
		{name: "a non-JSON answer settles it", offers: true, wantProbes: 1,
			probes: []func(http.ResponseWriter){func(w http.ResponseWriter) { w.Write([]byte("<html>")) }}},
		{name: "503 asks again", offers: true, wantProbes: 2, want2: true,
			probes: []func(http.ResponseWriter){func(w http.ResponseWriter) { errorBody(w, 503, "starting") }}},
		{name: "no answer asks again", offers: true, wantProbes: 2, want2: true,
			probes: []func(http.ResponseWriter){garbage}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, c := newFake(t)
			f.offers, f.probes = tc.offers, tc.probes
			// Concurrency 1: ok#2 is leased once ok#1 was answered, so they are two flushes.
			f.leases = []func(http.ResponseWriter){leased("ok#1"), leased("ok#2")}
			w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 1, Logger: quiet()})
			w.Handle("ok", echo)
			if err := runUntil(t, w, f, 2); err != nil {
				t.Fatal(err)
			}
			completes, _, batched := f.perJob()
			_, probes := f.calls()
			if probes != tc.wantProbes {
				t.Errorf("%d probes, want %d", probes, tc.wantProbes)
			}
			for id, want := range map[string]bool{"ok#1": tc.want1, "ok#2": tc.want2} {
				if batched[id]+completes[id] != 1 || (batched[id] == 1) != want {
					t.Errorf("%s: %d batched, %d per job; want batched %v", id, batched[id], completes[id], want)
				}
			}
		})
	}
}

func TestBatchAckUnansweredIsResentWhileTheJobIsHeld(t *testing.T) {
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased("ok#1")}
	f.batch = func(call int, ids []string, w http.ResponseWriter) {
		switch call {
		case 0, 1:
			errorBody(w, 503, "restarting")
		case 2:
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Write([]byte("not http\r\n\r\n"))
			conn.Close()
		default:
			writeBatchAnswer(w, ids, nil)
		}
	}
	finished := make(chan time.Time, 1)
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 5, WaitSecs: 1, HeartbeatInterval: 40 * time.Millisecond,
		Logger: quiet()})
	w.Handle("ok", func(ctx context.Context, job *Job) (map[string]any, error) {
		finished <- time.Now()
		return nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	end := <-finished
	cancel() // a graceful stop waits for the acknowledgement
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	batches, _ := f.calls()
	completes, _, _ := f.perJob()
	if len(batches) != 4 || len(completes) != 0 {
		t.Fatalf("%d batch calls and %v per job, want the three unanswered ones and the answered one", len(batches),
			completes)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	after := 0
	for _, at := range f.beatTimes["ok#1"] {
		if at.After(end) {
			after++
		}
	}
	if after < 2 {
		t.Errorf("%d heartbeats while the acknowledgement was retried", after)
	}
}

func TestBatchAckGivesUpWhenTheLeaseRunsOut(t *testing.T) {
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased("ok#1")}
	f.batch = func(call int, ids []string, w http.ResponseWriter) { errorBody(w, 503, "down") }
	// No heartbeat during the test: the lease stays the leased second.
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 1, WaitSecs: 1, HeartbeatInterval: time.Minute, Logger: quiet()})
	w.Handle("ok", echo)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-f.reported
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run kept resending past the lease")
	}
	completes, _, _ := f.perJob()
	if len(completes) != 0 {
		t.Fatalf("sent per job after giving up: %v", completes)
	}
}

func TestBatchAcksAreRaceFree(t *testing.T) {
	// Many jobs, some answered 409, with the route refused half-way: every job is answered once,
	// and Run returns. Meant for go test -race.
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased(ids("r", 40)...), leased(ids("s", 40)...)}
	var mu sync.Mutex
	calls := 0
	f.batch = func(call int, ids []string, w http.ResponseWriter) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the next batches build meanwhile
		if n > 3 {
			errorBody(w, 404, "gone")
			return
		}
		writeBatchAnswer(w, ids, func(id string) int {
			if strings.HasSuffix(id, "7") {
				return 409
			}
			return 204
		})
	}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 8, BatchSize: 40, Logger: quiet()})
	w.Handle("r", echo)
	w.Handle("s", echo)
	err := runWhile(t, w, func() bool {
		completes, _, batched := f.perJob()
		answered := 0
		for _, id := range append(ids("r", 40), ids("s", 40)...) {
			if completes[id] > 0 || batched[id] > 0 {
				answered++
			}
		}
		return answered == 80
	})
	if err != nil {
		t.Fatal(err)
	}
	batches, _ := f.calls()
	if len(batches) > 4 {
		t.Errorf("%d batch calls after the route was refused", len(batches)-4)
	}
}

// leaseLingerFor sets the lease loop's wait for the test's length.
func leaseLingerFor(t *testing.T, lease time.Duration) {
	old := leaseLinger
	leaseLinger = lease
	t.Cleanup(func() { leaseLinger = old })
}

// Handlers finishing one after the other (within 5 ms) have their successes sent in one call, and
// the next lease asks for a whole batch, not for the first half of it that was free: with the
// waits long, the batching does not depend on how the goroutines happen to be scheduled.
func TestALeasesSuccessesGoInOneCallAndTheNextLeaseAsksForAWholeBatch(t *testing.T) {
	leaseLingerFor(t, time.Minute)
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased(ids("ok", 50)...)}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 50, BatchSize: 50, Logger: quiet(),
		AckLinger: time.Minute})
	w.Handle("ok", func(ctx context.Context, job *Job) (map[string]any, error) {
		i, _ := job.Payload["i"].(float64)
		time.Sleep(time.Duration(i) * 100 * time.Microsecond)
		return job.Payload, nil
	})
	if err := runWhile(t, w, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.batchCalls) >= 1 && f.leaseCalls >= 2
	}); err != nil {
		t.Fatal(err)
	}
	batches, _ := f.calls()
	if len(batches) != 1 || len(batches[0]) != 50 {
		t.Errorf("50 successes sent in %d calls: %v", len(batches), batches)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.leaseBody[1]["max_jobs"]; got != float64(50) {
		t.Errorf("the lease after the first batch asked for %v jobs, want 50", got)
	}
}

// The flusher's wait is bounded: a handler that runs on does not hold back the successes of the
// others (this test would hang without the bound, as the slow handler ends only after their call).
func TestAHandlerStillRunningDoesNotHoldBackTheOthersSuccesses(t *testing.T) {
	leaseLingerFor(t, time.Millisecond)
	f, c := newFake(t)
	f.offers = true
	f.leases = []func(http.ResponseWriter){leased(append(ids("ok", 9), "slow#10")...)}
	firstCall := make(chan struct{})
	f.batch = func(call int, ids []string, w http.ResponseWriter) {
		if call == 0 {
			close(firstCall)
		}
		writeBatchAnswer(w, ids, nil)
	}
	w := NewWorker(c, "q", WorkerOptions{LeaseSecs: 10, WaitSecs: 1, Concurrency: 10, BatchSize: 10, Logger: quiet(),
		AckLinger: time.Millisecond})
	w.Handle("ok", echo)
	w.Handle("slow", func(ctx context.Context, job *Job) (map[string]any, error) {
		<-firstCall
		return job.Payload, nil
	})
	if err := runWhile(t, w, func() bool {
		_, _, batched := f.perJob()
		return len(batched) == 10
	}); err != nil {
		t.Fatal(err)
	}
	batches, _ := f.calls()
	for _, id := range batches[0] {
		if id == "slow#10" {
			t.Errorf("the first call waited for the slow handler: %v", batches)
		}
	}
}
