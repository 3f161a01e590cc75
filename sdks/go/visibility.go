package queueflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// What a running handler reports through its JobContext (sdks/conformance/README.md, "Visibility:
// progress, logs, worker id, traces"; docs/visibility.md on the server). Nothing is sent from the
// handler's own calls: progress waits for the job's next heartbeat (sent early, at most once a
// second, when a report is new), log lines wait in a per-job buffer that one goroutine posts at
// most once a second, and when the handler ends the loop sends what is left before it reports the
// outcome. A failure of these calls is logged and never changes the job's outcome.

// ErrInvalidArgument is wrapped by the errors of JobContext calls given an argument the server
// would refuse (a percent outside 0..100, a message too long, a level that is not 1 to 16 letters).
// Nothing is recorded for such a call.
var ErrInvalidArgument = errors.New("queueflow: invalid argument")

const (
	// reportInterval spaces a job's log posts and its early (progress) heartbeats.
	reportInterval = time.Second
	// maxBufferedLines bounds a job's unsent log lines; past it the newest are dropped and counted.
	maxBufferedLines = 10_000
)

type jobContextKey struct{}

// JobContext is a running job's line to the worker loop: Progress and Log (LogAt) report how the
// job goes, for the operator reading the job (GET /api/v1/jobs/{id}, .../logs). Get it in a handler
// with JobContextFrom(ctx). It is safe for concurrent use. A nil *JobContext (a handler called
// outside the Worker, in a test say) checks its arguments and records nothing.
type JobContext struct {
	job      *Job
	log      *slog.Logger
	logWake  chan struct{} // buffered 1: lines were buffered
	beatWake chan struct{} // buffered 1: a new progress report

	mu           sync.Mutex
	lines        []LogLineRequest // unsent, oldest first
	dropped      int              // lines that will never be sent (buffer full, refused, undelivered)
	ended        bool             // the handler returned: later calls record nothing
	logsOff      bool             // the server refused the job's lines (409, 404): no more are posted
	progress     *Progress        // the latest report
	progressVer  uint64           // counts reports
	progressSent uint64           // the latest report a heartbeat delivered

	beatMu sync.Mutex // one heartbeat of the job at a time, so reports arrive in order
}

func newJobContext(job *Job, log *slog.Logger) *JobContext {
	return &JobContext{job: job, log: log, logWake: make(chan struct{}, 1), beatWake: make(chan struct{}, 1)}
}

// JobContextFrom returns the JobContext of the job whose handler ctx is (or derives from), or nil
// outside a handler run by a Worker.
func JobContextFrom(ctx context.Context) *JobContext {
	jc, _ := ctx.Value(jobContextKey{}).(*JobContext)
	return jc
}

// Job returns the job being run (nil for a nil JobContext).
func (jc *JobContext) Job() *Job {
	if jc == nil {
		return nil
	}
	return jc.job
}

// Progress records how far the job got: percent from 0 to 100 and a message of at most
// MaxProgressMessage characters ("" for none). The latest report travels on the job's next
// heartbeat; a report newer than the last one sent makes the loop send that heartbeat early, at
// most once a second, and a report not yet sent when the handler returns is sent before the
// outcome. An argument out of range returns an error wrapping ErrInvalidArgument and records
// nothing. Invalid UTF-8 and NUL characters in message are replaced with U+FFFD.
func (jc *JobContext) Progress(percent float64, message string) error {
	if math.IsNaN(percent) || percent < 0 || percent > 100 {
		return fmt.Errorf("%w: progress percent %v is not within 0..100", ErrInvalidArgument, percent)
	}
	message = storable(message)
	if n := utf8.RuneCountInString(message); n > MaxProgressMessage {
		return fmt.Errorf("%w: a progress message of %d characters (at most %d)", ErrInvalidArgument, n,
			MaxProgressMessage)
	}
	if jc == nil {
		return nil
	}
	jc.mu.Lock()
	if jc.ended {
		jc.mu.Unlock()
		return nil
	}
	jc.progress = &Progress{Percent: percent, Message: message}
	jc.progressVer++
	jc.mu.Unlock()
	signal(jc.beatWake)
	return nil
}

// Log appends a line at level "info" to the job's log; see LogAt.
func (jc *JobContext) Log(message string) {
	_ = jc.LogAt(LevelInfo, message) // LevelInfo is a valid level
}

// LogAt appends a line at level (1 to MaxLogLevel ASCII letters: LevelDebug, LevelInfo,
// LevelWarning, LevelError or any other) to the job's log, stamped with the time of the call.
// Nothing is sent from the call: the loop posts the job's buffer at most once a second, at most
// MaxLogLinesPerCall lines and MaxLogCallBytes of messages a call, and what is left when the
// handler returns before the outcome. A message longer than MaxLogCallBytes is cut there (at a
// character boundary); invalid UTF-8 and NUL characters are replaced with U+FFFD. Past 10,000
// unsent lines the newest are dropped (and counted in the worker's log). An invalid level returns
// an error wrapping ErrInvalidArgument and records nothing; calls after the handler returned are
// ignored.
func (jc *JobContext) LogAt(level, message string) error {
	if !validLevel(level) {
		return fmt.Errorf("%w: log level %q is not 1 to %d ASCII letters", ErrInvalidArgument, level, MaxLogLevel)
	}
	if jc == nil {
		return nil
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	line := LogLineRequest{Message: cutMessage(storable(message)), Level: level, TS: &at}
	jc.mu.Lock()
	switch {
	case jc.ended:
		jc.mu.Unlock()
		return nil
	case jc.logsOff:
		jc.dropped++
		jc.mu.Unlock()
		return nil
	case len(jc.lines) >= maxBufferedLines:
		jc.dropped++
		first := jc.dropped == 1
		jc.mu.Unlock()
		if first {
			jc.log.Warn("queueflow: the job's log buffer is full; dropping its newest lines",
				"buffered", maxBufferedLines)
		}
		return nil
	}
	jc.lines = append(jc.lines, line)
	jc.mu.Unlock()
	signal(jc.logWake)
	return nil
}

// signal wakes the goroutine waiting on c, if it is not already due to wake.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func validLevel(level string) bool {
	if len(level) == 0 || len(level) > MaxLogLevel {
		return false
	}
	for i := 0; i < len(level); i++ {
		if c := level[i]; (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// storable returns s as the server can store it: valid UTF-8 without NUL (PostgreSQL text holds
// none), each offending byte sequence replaced with U+FFFD.
func storable(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

// cutMessage cuts a valid UTF-8 message to at most MaxLogCallBytes bytes, at a character boundary.
func cutMessage(s string) string {
	if len(s) <= MaxLogCallBytes {
		return s
	}
	end := MaxLogCallBytes
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}

// nextLogCall returns how many lines from the front of lines one call takes: at most
// MaxLogLinesPerCall whose messages add up to at most MaxLogCallBytes (at least one, since a
// buffered message is at most MaxLogCallBytes).
func nextLogCall(lines []LogLineRequest) int {
	n, size := 0, 0
	for n < len(lines) && n < MaxLogLinesPerCall {
		size += len(lines[n].Message)
		if size > MaxLogCallBytes && n > 0 {
			break
		}
		n++
	}
	return n
}

// takeLogs removes the next call's lines from the front of the buffer (none when it is empty).
func (jc *JobContext) takeLogs() []LogLineRequest {
	jc.mu.Lock()
	defer jc.mu.Unlock()
	n := nextLogCall(jc.lines)
	if n == 0 {
		return nil
	}
	out := slices.Clone(jc.lines[:n])
	clear(jc.lines[:n])
	jc.lines = jc.lines[n:]
	if len(jc.lines) == 0 {
		jc.lines = nil
	}
	return out
}

func (jc *JobContext) hasLogs() bool {
	jc.mu.Lock()
	defer jc.mu.Unlock()
	return len(jc.lines) > 0
}

// putBack returns lines a call could not deliver to the front of the buffer, to be sent again.
func (jc *JobContext) putBack(lines []LogLineRequest) {
	jc.mu.Lock()
	defer jc.mu.Unlock()
	jc.lines = append(slices.Clone(lines), jc.lines...)
}

// drop counts n lines as never sent.
func (jc *JobContext) drop(n int) {
	jc.mu.Lock()
	jc.dropped += n
	jc.mu.Unlock()
}

// stopLogs drops the buffer, and every line logged from now on, after the server refused the job's
// lines for good.
func (jc *JobContext) stopLogs() {
	jc.mu.Lock()
	defer jc.mu.Unlock()
	jc.logsOff = true
	jc.dropped += len(jc.lines)
	jc.lines = nil
}

// end marks the handler returned: later calls record nothing.
func (jc *JobContext) end() {
	jc.mu.Lock()
	jc.ended = true
	jc.mu.Unlock()
}

// pendingProgress returns the latest report when no heartbeat delivered it yet, and its number.
func (jc *JobContext) pendingProgress() (*Progress, uint64) {
	jc.mu.Lock()
	defer jc.mu.Unlock()
	if jc.progress == nil || jc.progressSent >= jc.progressVer {
		return nil, 0
	}
	p := *jc.progress
	return &p, jc.progressVer
}

// progressDelivered records that a heartbeat delivered report ver (and every earlier one).
func (jc *JobContext) progressDelivered(ver uint64) {
	jc.mu.Lock()
	jc.progressSent = max(jc.progressSent, ver)
	jc.mu.Unlock()
}

// postLogs sends one call of the job's lines (final: the flush after the handler returned) and
// reports whether to go on posting. A 409 or 404 (the lease is lost, the job is gone, or the
// server has no such route) stops the job's logs for good; a transport error or a 5xx puts the
// lines back for the next post, except in the final flush, which sends nothing more; any other
// refusal drops this call's lines only.
func (w *Worker) postLogs(ctx context.Context, log *slog.Logger, jc *JobContext, lj *LeasedJob,
	lines []LogLineRequest, final bool) bool {
	_, err := w.client.PostJobLogs(ctx, lj.Job.ID, lj.LeaseToken, lines)
	switch {
	case err == nil:
		return true
	case IsConflict(err) || IsNotFound(err):
		jc.drop(len(lines))
		jc.stopLogs()
		log.Warn("queueflow: the server refused the job's log lines; posting none of them any more", "error", err)
		return false
	case IsTransient(err) && !final:
		jc.putBack(lines)
		log.Warn("queueflow: posting the job's log lines failed; sending them again later", "error", err,
			"lines", len(lines))
		return true
	case IsTransient(err):
		jc.drop(len(lines))
		log.Warn("queueflow: posting the job's last log lines failed", "error", err, "lines", len(lines))
		return false
	default:
		jc.drop(len(lines))
		log.Warn("queueflow: the server refused a call of the job's log lines", "error", err, "lines", len(lines))
		return true
	}
}

// postLogsEverySecond posts the job's buffered lines while its handler runs, one call at most every
// reportInterval, the first one reportInterval after the handler started (so a burst of lines at
// the start goes in one call), until stop is closed. A call in flight is finished first.
func (w *Worker) postLogsEverySecond(ctx context.Context, log *slog.Logger, jc *JobContext, lj *LeasedJob,
	stop <-chan struct{}) {
	last := time.Now()
	for {
		if !jc.hasLogs() {
			select {
			case <-stop:
				return
			case <-jc.logWake:
			}
			continue
		}
		if wait := time.Until(last.Add(reportInterval)); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-stop:
				timer.Stop()
				return
			case <-timer.C:
			}
		}
		lines := jc.takeLogs()
		if len(lines) == 0 {
			continue
		}
		last = time.Now()
		if !w.postLogs(ctx, log, jc, lj, lines, false) {
			return
		}
	}
}

// beat sends one heartbeat of the job, carrying its progress when a report waits for delivery. A
// server that refuses the progress (400: one without the extension) gets a plain heartbeat at once,
// and no progress from this Run any more: the lease matters more than the report.
func (w *Worker) beat(ctx context.Context, log *slog.Logger, jc *JobContext, lj *LeasedJob) (*HeartbeatResponse, error) {
	jc.beatMu.Lock()
	defer jc.beatMu.Unlock()
	var progress *Progress
	var ver uint64
	if !w.progressOff.Load() {
		progress, ver = jc.pendingProgress()
	}
	resp, err := w.client.HeartbeatWithProgress(ctx, lj.Job.ID, lj.LeaseToken, w.opts.LeaseSecs, progress)
	if progress != nil && IsBadRequest(err) {
		if w.progressOff.CompareAndSwap(false, true) {
			log.Warn("queueflow: the server refused a heartbeat with progress; sending no progress from now on",
				"error", err)
		}
		return w.client.Heartbeat(ctx, lj.Job.ID, lj.LeaseToken, w.opts.LeaseSecs)
	}
	if progress != nil && err == nil {
		jc.progressDelivered(ver)
	}
	return resp, err
}

// progressPending reports a progress report that a heartbeat should deliver.
func (w *Worker) progressPending(jc *JobContext) bool {
	if w.progressOff.Load() {
		return false
	}
	p, _ := jc.pendingProgress()
	return p != nil
}

// flushReports sends what the job's handler left unsent, after it returned and before the outcome
// is reported: the buffered log lines (one call after another, not waiting for the second), then,
// with progress, the latest progress report in one heartbeat if none delivered it (extended is
// told when that heartbeat extended the lease). Failures are logged; they never change the outcome.
func (w *Worker) flushReports(ctx context.Context, log *slog.Logger, jc *JobContext, lj *LeasedJob, progress bool,
	extended func(sent time.Time)) {
	jc.end()
	for {
		lines := jc.takeLogs()
		if len(lines) == 0 || !w.postLogs(ctx, log, jc, lj, lines, true) {
			break
		}
	}
	jc.mu.Lock()
	jc.dropped += len(jc.lines)
	jc.lines = nil
	dropped := jc.dropped
	jc.mu.Unlock()
	if dropped > 0 {
		log.Warn("queueflow: some of the job's log lines were not stored", "dropped", dropped)
	}
	if !progress || !w.progressPending(jc) {
		return
	}
	sent := time.Now()
	resp, err := w.beat(ctx, log, jc, lj)
	switch {
	case err != nil:
		log.Warn("queueflow: the job's last progress report was not delivered", "error", err)
	case resp.Status == StatusRunning:
		extended(sent)
	default:
		log.Debug("queueflow: the job's last progress report found it no longer running", "status", resp.Status)
	}
}

// --- the worker's identity ---

// defaultWorkerID is "<hostname>:<process id>", kept to the characters and length a worker id
// may have.
func defaultWorkerID() string {
	suffix := fmt.Sprintf(":%d", os.Getpid())
	host := visibleASCII(hostname())
	if host == "" {
		host = "unofficial-queueflow-client-go"
	}
	if len(host)+len(suffix) > MaxWorkerIDBytes {
		host = host[:MaxWorkerIDBytes-len(suffix)]
	}
	return host + suffix
}

func hostname() string {
	host, err := os.Hostname()
	if err != nil {
		return ""
	}
	return host
}

// visibleASCII replaces every character of s that a worker id cannot hold with '-'.
func visibleASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if r < '!' || r > '~' {
			return '-'
		}
		return r
	}, s)
}

// checkWorkerID reports a worker id the server would refuse: 1 to MaxWorkerIDBytes visible ASCII
// characters.
func checkWorkerID(id string) error {
	if id == "" || len(id) > MaxWorkerIDBytes || visibleASCII(id) != id {
		return fmt.Errorf("%w: worker id %q is not 1 to %d visible ASCII characters", ErrInvalidArgument, id,
			MaxWorkerIDBytes)
	}
	return nil
}

// workerInfo is what the loop says of itself on lease until a lease succeeded: the host, the SDK,
// its version and the handlers' task names, sorted (those the server takes: at most
// MaxWorkerTasks names of 1 to 255 bytes).
func (w *Worker) workerInfo() *WorkerInfo {
	w.mu.RLock()
	tasks := make([]string, 0, len(w.handler))
	for name := range w.handler {
		if name != "" && len(name) <= MaxWorkerText {
			tasks = append(tasks, name)
		}
	}
	w.mu.RUnlock()
	slices.Sort(tasks)
	if len(tasks) > MaxWorkerTasks {
		tasks = tasks[:MaxWorkerTasks]
	}
	host := []rune(storable(hostname()))
	if len(host) > MaxWorkerText {
		host = host[:MaxWorkerText]
	}
	return &WorkerInfo{Hostname: string(host), SDK: "go", Version: Version, Tasks: tasks}
}
