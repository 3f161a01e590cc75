package queueflow

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"
)

// The worker loop acknowledges successes through POST /api/v1/jobs/complete when the server offers
// it (sdks/conformance/README.md, "Batch acknowledgement"): a job whose handler returned puts its
// completion in the loop's buffer and waits, still held and heartbeated, for its answer; one
// flusher goroutine sends the buffer, up to MaxCompletions items a call, one call at a time, while
// the next batch builds up behind it. Without the route every job completes with its own call,
// as it always did.

// batchCompleteRoute is the path of the batch acknowledgement, listed in /openapi.json when offered.
const batchCompleteRoute = "/api/v1/jobs/complete"

// ackMode is what the loop knows of the batch route.
type ackMode int

const (
	ackUnknown ackMode = iota // not asked yet, or the last probe got no answer
	ackBatch                  // offered: successes go through the buffer
	ackPerJob                 // not offered, or it answered 404/405: one call per job from now on
)

// ackVerdict tells a held job what became of its buffered completion.
type ackVerdict int

const (
	ackDone ackVerdict = iota // answered (or given up on): nothing more to send
	ackSelf                   // not sent in a batch: the job completes with its own call
)

// pendingAck is one buffered completion.
type pendingAck struct {
	item    CompletionItem
	until   func() time.Time // the lease as the job's heartbeat knows it
	stopAt  time.Time        // the lease when first sent: resending stops there, as a per-job report's does
	log     *slog.Logger
	verdict chan ackVerdict // buffered: the flusher never waits for the job
}

func (p *pendingAck) answer(v ackVerdict) { p.verdict <- v }

// defaultAckLinger is WorkerOptions.AckLinger's default: how long a flush waits for handlers still
// running to add their completions.
const defaultAckLinger = 2 * time.Millisecond

// acker is the buffer and the flusher of one Run.
type acker struct {
	client  *Client
	log     *slog.Logger
	ctx     context.Context // not cancelled by the shutdown: the buffer is flushed while draining
	busy    func() bool     // a handler is running: its completion may join the next call
	decided <-chan struct{} // signalled when a held job settles or ends: busy may have changed
	linger  time.Duration   // how long a flush waits for busy handlers

	mu   sync.Mutex
	mode ackMode
	buf  []*pendingAck

	wake   chan struct{} // buffered 1: something was added to buf
	quit   chan struct{}
	exited chan struct{}
}

func startAcker(ctx context.Context, client *Client, log *slog.Logger, linger time.Duration,
	busy func() bool, decided <-chan struct{}) *acker {
	a := &acker{client: client, log: log, ctx: ctx, busy: busy, decided: decided, linger: linger,
		wake: make(chan struct{}, 1), quit: make(chan struct{}), exited: make(chan struct{})}
	go a.run()
	return a
}

// stop ends the flusher. Call it once no job can submit any more (every hold has returned), so the
// buffer is empty.
func (a *acker) stop() {
	close(a.quit)
	<-a.exited
}

// submit buffers a completion and waits for its verdict. Once the batch route is known to be
// missing it answers ackSelf at once.
func (a *acker) submit(p *pendingAck) ackVerdict {
	a.mu.Lock()
	if a.mode == ackPerJob {
		a.mu.Unlock()
		return ackSelf
	}
	a.buf = append(a.buf, p)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default: // the flusher is already due to look at the buffer
	}
	return <-p.verdict
}

func (a *acker) run() {
	defer close(a.exited)
	for {
		select {
		case <-a.quit:
			return
		case <-a.wake:
		}
		for a.flush() {
		}
	}
}

// take removes up to n completions from the front of the buffer.
func (a *acker) take(n int) []*pendingAck {
	a.mu.Lock()
	defer a.mu.Unlock()
	n = min(n, len(a.buf))
	if n <= 0 {
		return nil
	}
	out := append([]*pendingAck(nil), a.buf[:n]...)
	clear(a.buf[:n])
	a.buf = a.buf[n:]
	if len(a.buf) == 0 {
		a.buf = nil
	}
	return out
}

func (a *acker) setMode(m ackMode) {
	a.mu.Lock()
	a.mode = m
	a.mu.Unlock()
}

// flush sends what the buffer holds, as one batch call or, without the route, by handing every
// completion back to its job; it reports false when the buffer was empty.
func (a *acker) flush() bool {
	a.mu.Lock()
	empty, mode := len(a.buf) == 0, a.mode
	a.mu.Unlock()
	if empty {
		return false
	}
	if mode == ackUnknown {
		mode = a.probe()
	}
	if mode != ackBatch {
		handBack(a.takeAll())
		return true
	}
	a.gather()
	a.send(a.take(MaxCompletions))
	return true
}

// gather lets the handlers still running add their completions before a call goes out, for
// WorkerOptions.AckLinger at most and never past a full call. Handlers run in parallel with the
// flusher: sent at once, the first success of a lease went almost alone (17 jobs a call on
// average against 50 leased, in the benchmark's drain), and every call costs the server as much
// as a lease.
func (a *acker) gather() {
	runtime.Gosched()
	waitUntil(func() bool { return !a.busy() || a.size() >= MaxCompletions }, a.decided, a.linger, nil)
}

func (a *acker) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.buf)
}

// takeAll empties the buffer.
func (a *acker) takeAll() []*pendingAck {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.buf
	a.buf = nil
	return out
}

func handBack(items []*pendingAck) {
	for _, p := range items {
		p.answer(ackSelf)
	}
}

// probe reads /openapi.json. An answer settles the mode for the rest of the loop's life; a
// transport error or a 5xx leaves it unknown (this flush goes one call per job, the next asks again).
func (a *acker) probe() ackMode {
	doc, err := a.client.OpenAPI(a.ctx)
	mode := ackPerJob
	switch {
	case err == nil:
		if doc.Offers(http.MethodPost, batchCompleteRoute) {
			mode = ackBatch
		}
	case unanswered(err):
		a.log.Warn("queueflow: could not learn whether the server takes batch acknowledgements; "+
			"completing one call per job for now", "error", err)
		return ackUnknown
	}
	a.setMode(mode)
	switch {
	case mode == ackBatch:
		a.log.Debug("queueflow: the server takes batch acknowledgements")
	case err != nil:
		a.log.Info("queueflow: /openapi.json did not list batch acknowledgements; completing one call per job",
			"error", err)
	default:
		a.log.Info("queueflow: the server does not offer batch acknowledgements; completing one call per job")
	}
	return mode
}

// unanswered reports an error that is no answer from the server: a transport failure or a 5xx.
func unanswered(err error) bool {
	if e, ok := AsAPIError(err); ok {
		return e.Status >= 500
	}
	return !unreadable(err) && !errors.Is(err, context.Canceled)
}

// unreadable reports a 2xx answer whose body is not the JSON expected.
func unreadable(err error) bool {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	return errors.As(err, &syntax) || errors.As(err, &typ)
}

// send delivers one batch. Each item's answer is final unless it is transient; an unanswered call
// (transport error, 5xx, 408, 429) is sent again with backoff, topped up from the buffer, for as
// long as each item's lease (as known when it was first sent) allows. A 404 or 405 means the
// server has no batch route after all: one call per job from now on, starting with these.
func (a *acker) send(items []*pendingAck) {
	backoff := NewBackoff(100*time.Millisecond, time.Second)
	for len(items) > 0 {
		req := make([]CompletionItem, len(items))
		for i, p := range items {
			if p.stopAt.IsZero() {
				p.stopAt = p.until()
			}
			req[i] = p.item
		}
		resp, err := a.client.CompleteMany(a.ctx, req)
		switch status := StatusOf(err); {
		case err == nil:
			items, err = a.settle(items, resp.Results)
			if len(items) == 0 {
				return
			}
		case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
			a.setMode(ackPerJob)
			a.log.Warn("queueflow: the server refused the batch acknowledgement route; completing one call per job "+
				"from now on", "error", err, "jobs", len(items))
			handBack(items)
			return
		case !IsTransient(err) || unreadable(err):
			a.log.Warn("queueflow: batch acknowledgement rejected; completing these jobs one call each",
				"error", err, "jobs", len(items))
			handBack(items)
			return
		}
		wait := backoff.Next()
		next := time.Now().Add(wait)
		kept := make([]*pendingAck, 0, len(items))
		for _, p := range items {
			if next.After(p.stopAt) {
				p.log.Error("queueflow: complete not delivered before the lease ran out; the server will redeliver the job",
					"error", err)
				p.answer(ackDone)
				continue
			}
			kept = append(kept, p)
		}
		if len(kept) == 0 {
			return
		}
		a.log.Warn("queueflow: batch acknowledgement got no answer; sending it again", "error", err, "wait", wait,
			"jobs", len(kept))
		sleepCtx(a.ctx, wait)
		items = append(kept, a.take(MaxCompletions-len(kept))...)
	}
}

// settle hands each item its answer, as the per-job route's would be handled: 2xx completed, 409
// or 404 rejected and never sent again. It returns the items to send again (a transient status)
// and one of their errors. An item the answer does not account for completes with its own call.
func (a *acker) settle(items []*pendingAck, results []CompletionAnswer) ([]*pendingAck, error) {
	var again []*pendingAck
	var lastErr error
	for i, p := range items {
		if i >= len(results) || results[i].ID != p.item.ID {
			p.log.Warn("queueflow: the batch acknowledgement did not answer for this job; completing it on its own")
			p.answer(ackSelf)
			continue
		}
		err := results[i].Err()
		switch {
		case err == nil:
			p.log.Debug("queueflow: reported", "what", "complete", "batch", len(items))
			p.answer(ackDone)
		case IsTransient(err):
			again = append(again, p)
			lastErr = err
		default:
			p.log.Error("queueflow: complete rejected; not reporting again", "error", err)
			p.answer(ackDone)
		}
	}
	return again, lastErr
}
