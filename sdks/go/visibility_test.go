package queueflow

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
)

// The worker loop's visibility (sdks/conformance/README.md, "Visibility: progress, logs, worker
// id, traces") against the fake server of worker_test.go. The timing tests run the worker in a
// testing/synctest bubble over the in-memory transport: time there is a fake clock that moves only
// when every goroutine of the bubble waits, so "once a second" is checked exactly, not against the
// wall clock.

// runJobs runs w until n jobs were reported (complete or fail), then stops it gracefully (so it
// drains) and waits for Run to return.
func runJobs(t *testing.T, w *Worker, f *fakeServer, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(ctx) }()
	for i := 0; i < n; i++ {
		select {
		case <-f.reported:
		case err := <-errc:
			t.Fatalf("Run returned after %d of %d reports: %v", i, n, err)
		}
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func (f *fakeServer) logSnapshot() (calls []logCall, order []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.logCalls), slices.Clone(f.order)
}

// progressBeats returns the progress of each heartbeat of job id that carried one.
func (f *fakeServer) progressBeats(id string) []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []map[string]any
	for _, body := range f.beatBodies[id] {
		if p, ok := body["progress"].(map[string]any); ok {
			out = append(out, p)
		}
	}
	return out
}

// messages flattens the log calls' messages, in order.
func messages(calls []logCall) []string {
	var out []string
	for _, c := range calls {
		for _, line := range c.lines {
			out = append(out, line["message"].(string))
		}
	}
	return out
}

func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s %d", prefix, i+1)
	}
	return out
}

func sizes(calls []logCall) []int {
	out := make([]int, len(calls))
	for i, c := range calls {
		out[i] = len(c.lines)
	}
	return out
}

func visibleWorker(c *Client, opts WorkerOptions) *Worker {
	if opts.LeaseSecs == 0 {
		opts.LeaseSecs = 30
	}
	opts.WaitSecs, opts.Logger = 1, quiet()
	return NewWorker(c, "q", opts)
}

func TestLogsOfAQuickHandlerGoInThreeCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){leased("chatty#1")}
		w := visibleWorker(c, WorkerOptions{})
		w.Handle("chatty", func(ctx context.Context, job *Job) (map[string]any, error) {
			jc := JobContextFrom(ctx)
			for _, m := range numbered("line", 250) {
				jc.Log(m)
			}
			return nil, nil
		})
		runJobs(t, w, f, 1)
		calls, order := f.logSnapshot()
		if got := sizes(calls); !slices.Equal(got, []int{100, 100, 50}) {
			t.Fatalf("250 lines logged at once went in calls of %v lines, want [100 100 50]", got)
		}
		if got := messages(calls); !slices.Equal(got, numbered("line", 250)) {
			t.Fatalf("messages out of order: %v", got)
		}
		for _, call := range calls {
			if call.id != "chatty#1" || call.token != "tok-chatty#1" {
				t.Fatalf("posted to %s with token %s", call.id, call.token)
			}
			for _, line := range call.lines {
				ts, _ := line["ts"].(string)
				if line["level"] != "info" || ts == "" {
					t.Fatalf("line %v: want level info and a ts", line)
				}
				if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
					t.Fatalf("ts %q: %v", ts, err)
				}
			}
		}
		if want := []string{"logs chatty#1", "logs chatty#1", "logs chatty#1", "complete chatty#1"}; !slices.Equal(order, want) {
			t.Fatalf("calls %v, want %v", order, want)
		}
	})
}

func TestLogsAtASteadyRateGoAboutOnceASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){leased("steady#1")}
		var ended time.Time
		w := visibleWorker(c, WorkerOptions{})
		w.Handle("steady", func(ctx context.Context, job *Job) (map[string]any, error) {
			jc := JobContextFrom(ctx)
			n := 0
			for range 30 { // 3 s: 5 lines every 100 ms
				for range 5 {
					n++
					jc.Log(fmt.Sprintf("tick %d", n))
				}
				time.Sleep(100 * time.Millisecond)
			}
			ended = time.Now()
			return nil, nil
		})
		start := time.Now()
		runJobs(t, w, f, 1)
		calls, _ := f.logSnapshot()
		if len(calls) < 3 || len(calls) > 4 {
			t.Fatalf("3 s of logging made %d calls (%v lines), want 3 or 4: about one a second", len(calls), sizes(calls))
		}
		if got := messages(calls); !slices.Equal(got, numbered("tick", 150)) {
			t.Fatalf("messages %v", got)
		}
		// While the handler ran, the calls were a second apart at least, the first a second after the start.
		last := start
		for i, call := range calls {
			if call.at.After(ended) {
				break
			}
			if gap := call.at.Sub(last); gap < reportInterval {
				t.Fatalf("call %d came %v after the previous one (or the start)", i, gap)
			}
			last = call.at
		}
	})
}

func TestLogCallsTakeAtMost64KiBAndLongMessagesAreCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){leased("big#1")}
		block := strings.Repeat("x", 30_000)
		long := "a" + strings.Repeat("é", 40_000) // 80,001 bytes; 65,536 falls inside an "é"
		w := visibleWorker(c, WorkerOptions{})
		w.Handle("big", func(ctx context.Context, job *Job) (map[string]any, error) {
			jc := JobContextFrom(ctx)
			jc.Log(block)
			jc.Log(block)
			jc.Log(block) // 90,000 bytes: a second call
			jc.Log(long)
			jc.Log("nul\x00 and invalid \xff utf-8")
			return nil, nil
		})
		runJobs(t, w, f, 1)
		calls, _ := f.logSnapshot()
		if got := sizes(calls); !slices.Equal(got, []int{2, 1, 1, 1}) {
			t.Fatalf("calls of %v lines, want [2 1 1 1]", got)
		}
		for i, call := range calls {
			size := 0
			for _, line := range call.lines {
				size += len(line["message"].(string))
			}
			if size > MaxLogCallBytes {
				t.Fatalf("call %d carries %d bytes of messages", i, size)
			}
		}
		cut := calls[2].lines[0]["message"].(string)
		if len(cut) != MaxLogCallBytes-1 || !utf8.ValidString(cut) || !strings.HasPrefix(long, cut) {
			t.Fatalf("a long message was cut to %d bytes (valid UTF-8 %v)", len(cut), utf8.ValidString(cut))
		}
		if got := calls[3].lines[0]["message"]; got != "nul\uFFFD and invalid \uFFFD utf-8" {
			t.Fatalf("message %q", got)
		}
	})
}

func TestNextLogCall(t *testing.T) {
	line := func(n int) LogLineRequest { return LogLineRequest{Message: strings.Repeat("m", n)} }
	many := make([]LogLineRequest, 150)
	for i := range many {
		many[i] = line(10)
	}
	cases := []struct {
		lines []LogLineRequest
		want  int
	}{
		{nil, 0},
		{many, 100},
		{[]LogLineRequest{line(MaxLogCallBytes), line(1)}, 1},
		{[]LogLineRequest{line(MaxLogCallBytes - 1), line(1), line(1)}, 2},
		{[]LogLineRequest{line(40_000), line(40_000)}, 1},
	}
	for i, c := range cases {
		if got := nextLogCall(c.lines); got != c.want {
			t.Errorf("case %d: %d lines, want %d", i, got, c.want)
		}
	}
	if got := cutMessage(strings.Repeat("€", 30_000)); len(got) != 65_535 || !utf8.ValidString(got) {
		t.Errorf("cut to %d bytes", len(got))
	}
	if got := cutMessage("short"); got != "short" {
		t.Errorf("cut %q", got)
	}
}

func TestLogBufferDropsItsNewestLinesPast10000(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){leased("flood#1")}
		w := visibleWorker(c, WorkerOptions{})
		w.Handle("flood", func(ctx context.Context, job *Job) (map[string]any, error) {
			jc := JobContextFrom(ctx)
			for _, m := range numbered("flood", maxBufferedLines+50) {
				jc.Log(m)
			}
			return nil, nil
		})
		runJobs(t, w, f, 1)
		calls, _ := f.logSnapshot()
		if got := messages(calls); !slices.Equal(got, numbered("flood", maxBufferedLines)) {
			t.Fatalf("%d lines posted, want the first %d", len(got), maxBufferedLines)
		}
	})
}

// What the handler left unsent goes before the outcome: its log lines, then its last progress.
func TestLogsAndProgressAreFlushedBeforeTheReport(t *testing.T) {
	for _, offers := range []bool{false, true} {
		for _, fails := range []bool{false, true} {
			t.Run(fmt.Sprintf("batch route %v, failing %v", offers, fails), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					f, c := newFakeInMemory(t)
					f.offers = offers
					f.leases = []func(http.ResponseWriter){leased("flush#1")}
					w := visibleWorker(c, WorkerOptions{})
					w.Handle("flush", func(ctx context.Context, job *Job) (map[string]any, error) {
						jc := JobContextFrom(ctx)
						jc.Progress(50, "half") // sent early, at once
						time.Sleep(10 * time.Millisecond)
						for _, m := range numbered("line", 5) {
							jc.Log(m)
						}
						jc.Progress(100, "done") // within the second: waits for the end
						if fails {
							return nil, errors.New("boom")
						}
						return nil, nil
					})
					runJobs(t, w, f, 1)
					_, order := f.logSnapshot()
					outcome := "complete flush#1"
					if fails {
						outcome = "fail flush#1"
					}
					want := []string{"heartbeat flush#1", "logs flush#1", "heartbeat flush#1", outcome}
					if !slices.Equal(order, want) {
						t.Fatalf("calls %v, want %v", order, want)
					}
					beats := f.progressBeats("flush#1")
					if fmt.Sprint(beats) != "[map[message:half percent:50] map[message:done percent:100]]" {
						t.Fatalf("progress sent %v", beats)
					}
				})
			})
		}
	}
}

// A refused or failed logs call is logged; the job's outcome is what its handler made it.
func TestLogFailuresDoNotChangeTheOutcome(t *testing.T) {
	for _, c := range []struct {
		status int
		calls  int // logs calls for 250 lines
	}{{409, 1}, {404, 1}, {503, 1}, {400, 3}} {
		for _, fails := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d, failing %v", c.status, fails), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					f, client := newFakeInMemory(t)
					f.leases = []func(http.ResponseWriter){leased("refused#1")}
					f.logs = func(id string, w http.ResponseWriter) { errorBody(w, c.status, "no") }
					var outcome Outcome
					w := visibleWorker(client, WorkerOptions{OnJobDone: func(job *Job, o Outcome, err error) { outcome = o }})
					w.Handle("refused", func(ctx context.Context, job *Job) (map[string]any, error) {
						jc := JobContextFrom(ctx)
						for _, m := range numbered("line", 250) {
							jc.Log(m)
						}
						if fails {
							return nil, errors.New("boom")
						}
						return map[string]any{"ok": true}, nil
					})
					runJobs(t, w, f, 1)
					calls, _ := f.logSnapshot()
					if len(calls) != c.calls {
						t.Errorf("%d logs calls, want %d", len(calls), c.calls)
					}
					reports, _, _ := f.snapshot()
					if len(reports) != 1 {
						t.Fatalf("reports %v", reports)
					}
					r := reports[0]
					switch {
					case fails && (r.kind != "fail" || r.body["error"] != "boom" || r.body["retryable"] != true || outcome != OutcomeError):
						t.Fatalf("reported %s %v, outcome %s; want a retryable fail with boom", r.kind, r.body, outcome)
					case !fails && (r.kind != "complete" || fmt.Sprint(r.body["result"]) != "map[ok:true]" || outcome != OutcomeOK):
						t.Fatalf("reported %s %v, outcome %s; want complete with the result", r.kind, r.body, outcome)
					}
				})
			})
		}
	}
}

// Lines whose call got no answer while the handler runs are sent again with the next call.
func TestLogLinesAreResentAfterAFailedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){leased("flaky#1")}
		n := 0
		f.logs = func(id string, w http.ResponseWriter) {
			n++
			if n == 1 {
				errorBody(w, 503, "restarting")
				return
			}
			writeJSON(w, 200, map[string]any{"stored": 1, "dropped": 0, "last_seq": 1})
		}
		w := visibleWorker(c, WorkerOptions{})
		w.Handle("flaky", func(ctx context.Context, job *Job) (map[string]any, error) {
			jc := JobContextFrom(ctx)
			for _, m := range numbered("line", 10) {
				jc.Log(m)
			}
			time.Sleep(1500 * time.Millisecond) // the first call (at 1 s) fails
			jc.Log("line 11")
			return nil, nil
		})
		runJobs(t, w, f, 1)
		calls, _ := f.logSnapshot()
		if got := sizes(calls); !slices.Equal(got, []int{10, 11}) {
			t.Fatalf("calls of %v lines, want [10 11]", got)
		}
		if got := messages(calls[1:]); !slices.Equal(got, numbered("line", 11)) {
			t.Fatalf("resent %v", got)
		}
	})
}

func TestProgressTravelsOnHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){leased("slow#1")}
		var invalid []error
		w := visibleWorker(c, WorkerOptions{LeaseSecs: 30, HeartbeatInterval: 2 * time.Second})
		w.Handle("slow", func(ctx context.Context, job *Job) (map[string]any, error) {
			jc := JobContextFrom(ctx)
			jc.Progress(40, "loading") // an early heartbeat at once
			time.Sleep(100 * time.Millisecond)
			jc.Progress(60, "") // superseded before its turn
			time.Sleep(100 * time.Millisecond)
			jc.Progress(70, "parsing") // early, a second after the first
			invalid = append(invalid, jc.Progress(150, "no"), jc.Progress(math.NaN(), ""),
				jc.Progress(-1, ""), jc.Progress(1, strings.Repeat("é", MaxProgressMessage+1)))
			time.Sleep(3 * time.Second) // a regular heartbeat at 2 s carries nothing new
			return nil, nil
		})
		runJobs(t, w, f, 1)
		for _, err := range invalid {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("an invalid report returned %v", err)
			}
		}
		f.mu.Lock()
		bodies, times := slices.Clone(f.beatBodies["slow#1"]), slices.Clone(f.beatTimes["slow#1"])
		f.mu.Unlock()
		var got []string
		for _, b := range bodies {
			got = append(got, fmt.Sprint(b["progress"]))
		}
		want := []string{"map[message:loading percent:40]", "map[message:parsing percent:70]", "<nil>"}
		if !slices.Equal(got, want) {
			t.Fatalf("heartbeats carried %v, want %v", got, want)
		}
		if gap := times[1].Sub(times[0]); gap != reportInterval {
			t.Fatalf("the second early heartbeat came %v after the first", gap)
		}
	})
}

// A server that refuses a heartbeat's progress (400) still gets the heartbeat, without it.
func TestProgressRefusedKeepsTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){leased("old#1")}
		f.heartbeat = func(id string, w http.ResponseWriter) {
			f.mu.Lock()
			bodies := f.beatBodies[id]
			_, progress := bodies[len(bodies)-1]["progress"]
			f.mu.Unlock()
			if progress {
				errorBody(w, 400, "unknown field `progress`")
				return
			}
			writeJSON(w, 200, map[string]string{"status": "running"})
		}
		var outcome Outcome
		w := visibleWorker(c, WorkerOptions{OnJobDone: func(job *Job, o Outcome, err error) { outcome = o }})
		w.Handle("old", func(ctx context.Context, job *Job) (map[string]any, error) {
			jc := JobContextFrom(ctx)
			jc.Progress(10, "")
			time.Sleep(2 * time.Second)
			jc.Progress(90, "") // no progress from this Run any more: no early heartbeat
			return nil, nil
		})
		runJobs(t, w, f, 1)
		f.mu.Lock()
		bodies := slices.Clone(f.beatBodies["old#1"])
		f.mu.Unlock()
		if len(bodies) != 2 || bodies[0]["progress"] == nil || bodies[1]["progress"] != nil {
			t.Fatalf("heartbeats %v, want the refused one and its plain resend", bodies)
		}
		if reports, _, _ := f.snapshot(); len(reports) != 1 || reports[0].kind != "complete" || outcome != OutcomeOK {
			t.Fatalf("reports %v, outcome %s", reports, outcome)
		}
	})
}

func TestJobContextOutsideAWorker(t *testing.T) {
	jc := JobContextFrom(context.Background())
	if jc != nil || jc.Job() != nil {
		t.Fatal("a JobContext outside a handler")
	}
	jc.Log("ignored")
	if err := jc.Progress(50, "ok"); err != nil {
		t.Fatal(err)
	}
	if err := jc.Progress(101, ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("out of range: %v", err)
	}
	if err := jc.Progress(1, strings.Repeat("é", MaxProgressMessage)); err != nil {
		t.Fatalf("1024 characters: %v", err)
	}
	for _, level := range []string{"", "warn-ing", "two words", strings.Repeat("a", MaxLogLevel+1), "é"} {
		if err := jc.LogAt(level, "x"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("level %q: %v", level, err)
		}
	}
	if err := jc.LogAt("Notice", "x"); err != nil {
		t.Errorf("level Notice: %v", err)
	}
}

func TestLeaseCarriesWorkerIDAndInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newFakeInMemory(t)
		f.leases = []func(http.ResponseWriter){
			func(w http.ResponseWriter) { errorBody(w, 503, "starting") }, // not a success: worker is sent again
			leased("b.task#1"),
		}
		w := visibleWorker(c, WorkerOptions{WorkerID: "render-box-1", MaxBackoff: 10 * time.Millisecond})
		w.Handle("b.task", echo).Handle("a.task", echo)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- w.Run(ctx) }()
		<-f.reported
		time.Sleep(100 * time.Millisecond) // a few more (empty) leases
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		bodies := slices.Clone(f.leaseBody)
		f.mu.Unlock()
		if len(bodies) < 3 {
			t.Fatalf("%d lease calls", len(bodies))
		}
		host, _ := os.Hostname()
		info := fmt.Sprintf("map[hostname:%s sdk:go tasks:[a.task b.task] version:%s]", host, Version)
		for i, body := range bodies {
			if body["worker_id"] != "render-box-1" {
				t.Errorf("lease %d: worker_id %v", i, body["worker_id"])
			}
			worker, sent := body["worker"]
			if want := i < 2; sent != want || (sent && fmt.Sprint(worker) != info) {
				t.Errorf("lease %d: worker %v (sent %v), want sent %v as %s", i, worker, sent, want, info)
			}
		}
	})
}

func TestWorkerIDDefaultAndValidation(t *testing.T) {
	host, _ := os.Hostname()
	if got, want := (WorkerOptions{}).withDefaults().WorkerID, fmt.Sprintf("%s:%d", host, os.Getpid()); got != want {
		t.Errorf("default worker id %q, want %q", got, want)
	}
	if err := checkWorkerID(defaultWorkerID()); err != nil {
		t.Error(err)
	}
	for _, id := range []string{"has space", strings.Repeat("x", MaxWorkerIDBytes+1), "tab\there", "é"} {
		f, c := newFake(t)
		err := NewWorker(c, "q", WorkerOptions{WorkerID: id, Logger: quiet()}).Run(context.Background())
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("worker id %q: Run returned %v", id, err)
		}
		if _, _, calls := f.snapshot(); calls != 0 {
			t.Errorf("worker id %q: %d lease calls", id, calls)
		}
	}
	if got := visibleASCII("box 1\té"); got != "box-1--" {
		t.Errorf("visibleASCII %q", got)
	}
}
