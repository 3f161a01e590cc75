package queueflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// HandlerFunc runs one job. Its context is cancelled when the worker learns from a heartbeat
// that the job is no longer its own (cancelled, finished elsewhere, lease lost); the worker then
// reports nothing, whatever the handler returns. A nil result is reported as {}. A returned error
// fails the job retryably; wrap it with Permanent to fail it without retry. The context carries the
// job's JobContext (JobContextFrom: progress and log lines) and the worker's span, current
// (trace.SpanFromContext), so spans the handler starts are its children.
type HandlerFunc func(ctx context.Context, job *Job) (map[string]any, error)

// Outcome is how a handler finished.
type Outcome string

const (
	OutcomeOK        Outcome = "ok"        // returned a result: reported with complete
	OutcomeError     Outcome = "error"     // returned an error (or panicked): reported with fail
	OutcomeCancelled Outcome = "cancelled" // the job was taken away: nothing is reported
)

// ErrLeaseLost is the cause of a handler context cancelled because the worker no longer owns
// the job (context.Cause(ctx) returns it).
var ErrLeaseLost = errors.New("queueflow: the job is no longer leased by this worker")

// WorkerOptions tune a Worker. Zero values take the defaults.
type WorkerOptions struct {
	// LeaseSecs is the lease requested per job and the heartbeat's extension (default 60).
	LeaseSecs int
	// WaitSecs is the lease long-poll (default 20, at most 30); a negative value disables it.
	WaitSecs int
	// Concurrency is the number of handlers running at once (default 1).
	Concurrency int
	// BatchSize is the number of jobs leased at once (default Concurrency, at most 100). Jobs of a
	// batch waiting for a free handler slot are heartbeated too.
	BatchSize int
	// HeartbeatInterval defaults to half the lease.
	HeartbeatInterval time.Duration
	// MaxBackoff caps the wait after a transport error or a 5xx (default 5 s).
	MaxBackoff time.Duration
	// Logger receives the worker's logs (default slog.Default()).
	Logger *slog.Logger
	// OnJobDone, when set, is called after a handler finished and before the outcome is reported,
	// from the job's goroutine (so possibly concurrently). err is the handler's error (or the
	// cancellation cause for OutcomeCancelled).
	OnJobDone func(job *Job, outcome Outcome, err error)
	// WorkerID names this worker on every lease call (an extension, docs/visibility.md): the
	// server records it on the jobs it leases (their attempts) and lists the worker in
	// GET /api/v1/workers. 1 to MaxWorkerIDBytes visible ASCII characters; default
	// "<hostname>:<process id>".
	WorkerID string
	// TracerProvider makes the span each handler runs in (default otel.GetTracerProvider(), the
	// global one: the API's no-op until the application installs an OpenTelemetry SDK).
	TracerProvider trace.TracerProvider
	// AckLinger is how long a batch acknowledgement waits, while other held jobs are still
	// running, for their successes to join the same call (default 2 ms; a negative value sends at
	// once). A success with no other job running goes at once whatever this is.
	AckLinger time.Duration
}

func (o WorkerOptions) withDefaults() WorkerOptions {
	if o.LeaseSecs <= 0 {
		o.LeaseSecs = 60
	}
	if o.LeaseSecs > 3600 {
		o.LeaseSecs = 3600
	}
	switch {
	case o.WaitSecs == 0:
		o.WaitSecs = 20
	case o.WaitSecs < 0:
		o.WaitSecs = 0
	case o.WaitSecs > 30:
		o.WaitSecs = 30
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.BatchSize <= 0 {
		o.BatchSize = o.Concurrency
	}
	if o.BatchSize > 100 {
		o.BatchSize = 100
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = time.Duration(o.LeaseSecs) * time.Second / 2
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.WorkerID == "" {
		o.WorkerID = defaultWorkerID()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	switch {
	case o.AckLinger == 0:
		o.AckLinger = defaultAckLinger
	case o.AckLinger < 0:
		o.AckLinger = 0
	}
	return o
}

// Worker leases jobs from one queue and runs the registered handlers: long-poll lease, a batch
// run up to Concurrency at once, a heartbeat for every held job at half the lease, and complete or
// fail once each handler returns. Successes are acknowledged many per call
// (POST /api/v1/jobs/complete) when the server offers that route, one call per job otherwise.
type Worker struct {
	client  *Client
	queue   string
	opts    WorkerOptions
	mu      sync.RWMutex
	handler map[string]HandlerFunc
	running atomic.Bool
	// progressOff: the server refused a heartbeat's progress (400) during this Run.
	progressOff atomic.Bool
}

// NewWorker returns a worker of queue. It authenticates with the client's worker token.
func NewWorker(client *Client, queue string, opts WorkerOptions) *Worker {
	return &Worker{client: client, queue: queue, opts: opts.withDefaults(), handler: map[string]HandlerFunc{}}
}

// Options returns the effective options (defaults applied).
func (w *Worker) Options() WorkerOptions { return w.opts }

// Handle registers the handler of a task name, replacing any earlier one. The task names are sent
// (sorted) in the worker's description on its first lease call.
func (w *Worker) Handle(taskName string, fn HandlerFunc) *Worker {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.handler[taskName] = fn
	return w
}

func (w *Worker) lookup(taskName string) HandlerFunc {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.handler[taskName]
}

// fatalLeaseError reports a lease error that retrying cannot fix: a 4xx other than 408 and 429
// (401 and 403 above all: a wrong credential).
func fatalLeaseError(err error) bool {
	e, ok := AsAPIError(err)
	return ok && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout &&
		e.Status != http.StatusTooManyRequests
}

// leaseLinger bounds how long a lease call waits, once half a batch of handler slots is free, for
// the handlers still running to free the rest (a variable for the tests).
var leaseLinger = time.Millisecond

// Run leases and runs jobs until ctx is cancelled, then drains: it stops leasing, lets the held
// jobs (running or waiting their turn) finish and be reported, and returns nil. A lease answered
// with 401, 403 or another non-retryable 4xx ends Run with that *APIError (after draining).
// Transport errors and 5xx are retried with a jittered backoff capped at MaxBackoff.
//
// Before its first acknowledgement Run reads GET /openapi.json once to learn whether the server
// offers the batch acknowledgement. If so, successes wait in a buffer that one call at a time
// sends (up to MaxCompletions items; the next batch builds while a call is in flight, and an idle
// worker sends at once); each job stays held and heartbeated until its item is answered. A batch
// route answering 404 or 405 sends Run back to one call per job for good. Failures are always
// reported one call per job.
//
// Every lease call names the worker (WorkerOptions.WorkerID), and until one succeeded it also says
// what the worker is (WorkerInfo: hostname, SDK "go", Version, the handlers' task names). An
// invalid WorkerID makes Run return an error wrapping ErrInvalidArgument at once.
func (w *Worker) Run(ctx context.Context) error {
	if err := checkWorkerID(w.opts.WorkerID); err != nil {
		return fmt.Errorf("queueflow: WorkerOptions.WorkerID: %w", err)
	}
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("queueflow: this worker is already running")
	}
	defer w.running.Store(false)
	w.progressOff.Store(false)
	o := w.opts
	log := o.Logger.With("queue", w.queue)
	tracer := o.TracerProvider.Tracer(InstrumentationName, trace.WithInstrumentationVersion(Version))
	announced := false               // a lease call succeeded: the server knows what this worker is
	bg := context.WithoutCancel(ctx) // held jobs outlive ctx: they drain
	slots := make(chan struct{}, o.Concurrency)
	freed := make(chan struct{}, 1)   // a held job settled or ended: the lease loop looks again
	decided := make(chan struct{}, 1) // the same, for the acknowledgement flusher
	signal := func() {
		for _, ch := range [...]chan struct{}{freed, decided} {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	var held atomic.Int64
	// Held jobs whose handler is done and whose report is not answered yet: they take no handler
	// slot, so leasing goes on while they settle (up to max(BatchSize, Concurrency) of them).
	var settling atomic.Int64
	capacity := int64(max(o.BatchSize, o.Concurrency))
	var wg sync.WaitGroup
	turn := make(chan struct{}) // jobs take handler slots in lease order
	close(turn)
	backoff := NewBackoff(100*time.Millisecond, o.MaxBackoff)
	var runErr error
	// A held job not settling yet is waiting for its turn or running its handler: its completion
	// may join the next batch call.
	acks := startAcker(bg, w.client, log, o.AckLinger, func() bool { return held.Load() > settling.Load() }, decided)

	// Lease once there is room for half a batch (at least one job): with acknowledgements answered
	// a few at a time, leasing at every freed place made most leases a job or two.
	room := int64(max(1, min(o.BatchSize, o.Concurrency)/2))

loop:
	for ctx.Err() == nil {
		for int64(o.Concurrency)-(held.Load()-settling.Load()) < room || settling.Load() >= capacity {
			select {
			case <-ctx.Done():
				break loop
			case <-freed:
			}
		}
		// Handlers finishing in parallel free the rest of the batch within moments: wait for them
		// (briefly) rather than lease a part of it now and the rest in a call of its own.
		batchFree := func() bool {
			h := held.Load() - settling.Load()
			return h == 0 || int64(o.Concurrency)-h >= int64(o.BatchSize)
		}
		if !waitUntil(batchFree, freed, leaseLinger, ctx.Done()) {
			break
		}
		// At most BatchSize per lease; with BatchSize above Concurrency, up to BatchSize held.
		h := int(held.Load() - settling.Load())
		n := min(max(o.Concurrency-h, o.BatchSize-h), o.BatchSize)
		req := LeaseRequest{MaxJobs: n, LeaseSecs: o.LeaseSecs, WaitSecs: o.WaitSecs, WorkerID: o.WorkerID}
		if !announced {
			req.Worker = w.workerInfo()
		}
		leased, err := w.client.Lease(ctx, w.queue, req)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if fatalLeaseError(err) {
				log.Error("queueflow: lease refused; the worker stops", "error", err)
				runErr = err
				break
			}
			wait := backoff.Next()
			log.Warn("queueflow: lease failed; backing off", "error", err, "wait", wait)
			sleepCtx(ctx, wait)
			continue
		}
		backoff.Reset()
		announced = true
		// The whole lease is held before any of its jobs can finish: the flusher, which waits
		// while held jobs are unsettled, never takes the first success for the lease's last.
		held.Add(int64(len(leased.Jobs)))
		for i := range leased.Jobs {
			lj := leased.Jobs[i]
			next := make(chan struct{})
			wg.Add(1)
			go func(prev <-chan struct{}, mine chan struct{}) {
				defer wg.Done()
				defer func() {
					held.Add(-1)
					signal()
				}()
				w.hold(bg, log, acks, tracer, &lj, slots, prev, mine, func(on bool) {
					if on {
						settling.Add(1)
					} else {
						settling.Add(-1)
					}
					signal()
				})
			}(turn, next)
			turn = next
		}
	}
	wg.Wait() // every held job reported: the acknowledgement buffer is empty
	acks.stop()
	return runErr
}

// waitUntil waits until done() holds, asking again at each signal on changed, for at most
// within (none when within <= 0); it reports false only when stop closed first. A token left on
// changed by an earlier change only makes it ask once more.
func waitUntil(done func() bool, changed <-chan struct{}, within time.Duration, stop <-chan struct{}) bool {
	if within <= 0 || done() {
		return true
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
	for !done() {
		select {
		case <-stop:
			return false
		case <-timer.C:
			return true
		case <-changed:
		}
	}
	return true
}

// hold owns one leased job from lease to report: it heartbeats it from the start (also while it
// waits for a handler slot), runs its handler, sends what the handler left of its logs and
// progress, and reports the outcome unless the job was lost. A success goes through the loop's
// acknowledgement buffer (acks) and the job stays held until it is answered; without the batch
// route it is completed with its own call.
func (w *Worker) hold(bg context.Context, log *slog.Logger, acks *acker, tracer trace.Tracer, lj *LeasedJob,
	slots chan struct{}, prev <-chan struct{}, mine chan struct{}, settle func(on bool)) {
	o := w.opts
	job := &lj.Job
	log = log.With("job_id", job.ID, "task", job.TaskName)
	jobCtx, cancelJob := context.WithCancelCause(bg)
	defer cancelJob(nil)
	var lost atomic.Bool
	var deadline atomic.Int64 // unix nanos until which the lease is held
	deadline.Store(time.Now().Add(time.Duration(o.LeaseSecs) * time.Second).UnixNano())
	extended := func(sent time.Time) {
		deadline.Store(sent.Add(time.Duration(o.LeaseSecs) * time.Second).UnixNano())
	}
	jc := newJobContext(job, log)

	stopBeat := make(chan struct{})
	beatDone := make(chan struct{})
	beatCtx, cancelBeat := context.WithCancel(jobCtx)
	go func() {
		defer close(beatDone)
		w.heartbeat(beatCtx, log, lj, jc, stopBeat, extended, func(reason error) {
			lost.Store(true)
			cancelJob(reason)
		})
	}()
	defer func() {
		close(stopBeat)
		cancelBeat() // a heartbeat in flight is not waited for
		<-beatDone
	}()

	// Wait for this job's turn, then for a free handler slot.
	started := false
	select {
	case <-prev:
		select {
		case slots <- struct{}{}:
			started = true
		case <-jobCtx.Done():
		}
	case <-jobCtx.Done():
	}
	close(mine)
	if !started {
		log.Info("queueflow: job taken away before its handler started; reporting nothing",
			"cause", context.Cause(jobCtx))
		return
	}

	fn := w.lookup(job.TaskName)
	if fn == nil {
		// No handler ran: no OnJobDone. Dead-letter it at once rather than burn its retries.
		<-slots
		msg := fmt.Sprintf("no worker handler for task '%s'", job.TaskName)
		log.Error("queueflow: " + msg + "; failing the job permanently")
		until := func() time.Time { return time.Unix(0, deadline.Load()) }
		w.report(bg, log, "fail", until, func(ctx context.Context) error {
			return w.client.Fail(ctx, job.ID, lj.LeaseToken, msg, false)
		})
		return
	}
	result, err, panicked := w.runHandler(jobCtx, bg, log, tracer, lj, jc, fn, lost.Load)
	<-slots

	outcome := OutcomeOK
	switch {
	case lost.Load():
		outcome = OutcomeCancelled
		if err == nil {
			err = context.Cause(jobCtx)
		}
	case err != nil:
		outcome = OutcomeError
	}
	if o.OnJobDone != nil {
		o.OnJobDone(job, outcome, err)
	}
	if outcome == OutcomeCancelled {
		// Its last lines, should the server still take them from this lease; no progress.
		w.flushReports(bg, log, jc, lj, false, extended)
		log.Info("queueflow: handler abandoned; the server owns the outcome", "cause", context.Cause(jobCtx))
		return
	}
	// The heartbeat keeps the lease while the report is sent; a heartbeat saying the job is gone
	// does not stop a report already decided.
	until := func() time.Time { return time.Unix(0, deadline.Load()) }
	settle(true) // the handler is done: its slot is free, its report outstanding
	defer settle(false)
	w.flushReports(bg, log, jc, lj, true, extended) // logs and progress first, then the outcome
	if outcome == OutcomeOK {
		if result == nil {
			result = map[string]any{}
		}
		p := &pendingAck{item: CompletionItem{ID: job.ID, LeaseToken: lj.LeaseToken, Result: result},
			until: until, log: log, verdict: make(chan ackVerdict, 1)}
		if acks.submit(p) == ackDone {
			return
		}
		w.report(bg, log, "complete", until, func(ctx context.Context) error {
			return w.client.Complete(ctx, job.ID, lj.LeaseToken, result)
		})
		return
	}
	retryable := panicked || !IsPermanent(err)
	msg := err.Error()
	w.report(bg, log, "fail", until, func(ctx context.Context) error {
		return w.client.Fail(ctx, job.ID, lj.LeaseToken, msg, retryable)
	})
}

// runHandler runs the job's handler inside its span, with its JobContext in ctx, while a goroutine
// posts the lines it logs (at most once a second); it returns once the span has ended and that
// goroutine has finished its last call. lost reports a job taken away (the span's status stays
// unset for it).
func (w *Worker) runHandler(jobCtx, bg context.Context, log *slog.Logger, tracer trace.Tracer, lj *LeasedJob,
	jc *JobContext, fn HandlerFunc, lost func() bool) (result map[string]any, err error, panicked bool) {
	ctx, span := w.startSpan(context.WithValue(jobCtx, jobContextKey{}, jc), tracer, lj)
	stopLogs := make(chan struct{})
	logsDone := make(chan struct{})
	go func() {
		defer close(logsDone)
		w.postLogsEverySecond(bg, log, jc, lj, stopLogs)
	}()
	result, err, panicked = w.invoke(ctx, &lj.Job, fn)
	outcome := OutcomeOK
	if lost() {
		outcome = OutcomeCancelled
	} else if err != nil {
		outcome = OutcomeError
	}
	endSpan(span, outcome, err)
	close(stopLogs)
	<-logsDone
	return result, err, panicked
}

// invoke runs the job's handler, turning a panic into an error.
func (w *Worker) invoke(ctx context.Context, job *Job, fn HandlerFunc) (result map[string]any, err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
			panicked = true
			w.opts.Logger.Error("queueflow: handler panicked", "job_id", job.ID, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	result, err = fn(ctx, job)
	return result, err, false
}

// heartbeat extends the lease every HeartbeatInterval until stop is closed, carrying the job's
// progress when a report waits; a new report also sends a heartbeat early, at most one every
// reportInterval. A status other than running, a 409 or a 404 calls lose and ends the heartbeat;
// other failures are logged and the next beat tries again.
func (w *Worker) heartbeat(ctx context.Context, log *slog.Logger, lj *LeasedJob, jc *JobContext, stop <-chan struct{},
	extended func(sent time.Time), lose func(error)) {
	o := w.opts
	ticker := time.NewTicker(o.HeartbeatInterval)
	defer ticker.Stop()
	var lastEarly time.Time // the last heartbeat sent early for a progress report
	var early *time.Timer   // armed while an early heartbeat waits for its turn
	defer func() {
		if early != nil {
			early.Stop()
		}
	}()
	var earlyDue <-chan time.Time
	for {
		select {
		case <-stop:
			return
		case <-ticker.C:
		case <-jc.beatWake:
			if earlyDue != nil || !w.progressPending(jc) {
				continue
			}
			if wait := time.Until(lastEarly.Add(reportInterval)); wait > 0 {
				early = time.NewTimer(wait)
				earlyDue = early.C
				continue
			}
			lastEarly = time.Now()
		case <-earlyDue:
			earlyDue = nil
			if !w.progressPending(jc) { // a regular beat took it meanwhile
				continue
			}
			lastEarly = time.Now()
		}
		sent := time.Now()
		hctx, cancel := context.WithTimeout(ctx, max(o.HeartbeatInterval, time.Second))
		resp, err := w.beat(hctx, log, jc, lj)
		cancel()
		switch {
		case err == nil && resp.Status == StatusRunning:
			extended(sent)
			log.Debug("queueflow: lease extended", "secs", o.LeaseSecs)
		case err == nil:
			lose(fmt.Errorf("%w: the job is %s", ErrLeaseLost, resp.Status))
			return
		case IsConflict(err) || IsNotFound(err):
			lose(fmt.Errorf("%w: %v", ErrLeaseLost, err))
			return
		default:
			select {
			case <-stop:
				return
			default:
			}
			log.Warn("queueflow: heartbeat failed; retrying at the next beat", "error", err)
		}
	}
}

// report sends complete or fail once. An answer from the server, success or not, is final: a
// rejected report (409: the lease was lost) is logged and never sent again. Only a report that
// got no answer at all (transport error) or a 5xx is sent again, with backoff, while the lease
// still holds: the server may not have recorded it, and complete is idempotent.
func (w *Worker) report(ctx context.Context, log *slog.Logger, what string, until func() time.Time,
	send func(context.Context) error) {
	backoff := NewBackoff(100*time.Millisecond, time.Second)
	stopAt := until() // the lease as known now: later heartbeats do not prolong the resending
	for {
		err := send(ctx)
		if err == nil {
			log.Debug("queueflow: reported", "what", what, "attempts", backoff.Attempts()+1)
			return
		}
		if !IsTransient(err) {
			log.Error("queueflow: "+what+" rejected; not reporting again", "error", err)
			return
		}
		wait := backoff.Next()
		if time.Now().Add(wait).After(stopAt) {
			log.Error("queueflow: "+what+" not delivered before the lease ran out; the server will redeliver the job",
				"error", err)
			return
		}
		log.Warn("queueflow: "+what+" got no answer; sending it again", "error", err, "wait", wait)
		sleepCtx(ctx, wait)
	}
}
