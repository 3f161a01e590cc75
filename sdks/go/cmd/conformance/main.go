// Command conformance is the Go SDK's runner of the SDK conformance suite
// (sdks/conformance/README.md): conformance <scenario.json>, configured by QF_BASE_URL,
// QF_TENANT_TOKEN, QF_WORKER_TOKEN and QF_QUEUE; events on stdout, commands on stdin.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	qf "github.com/unofficial-queueflow/client-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

type scenario struct {
	Name   string `json:"name"`
	Worker struct {
		Mode          string            `json:"mode"`
		Handlers      map[string]string `json:"handlers"`
		LeaseSecs     int               `json:"lease_secs"`
		Concurrency   int               `json:"concurrency"`
		BatchSize     int               `json:"batch_size"`
		StopAfterJobs int               `json:"stop_after_jobs"`
		WorkerID      string            `json:"worker_id"`
		Tracing       bool              `json:"tracing"`
		UniqueKey     string            `json:"unique_key"`
		WindowSecs    int               `json:"window_secs"`
		Context       map[string]any    `json:"context"`
		KeyTemplate   string            `json:"key_template"`
		TimeoutSecs   int               `json:"timeout_secs"`
		SleepSecs     int               `json:"sleep_secs"`
		EventKey      string            `json:"event_key"`
		Payload       map[string]any    `json:"payload"`
		Name          string            `json:"name"`
		CronExpr      string            `json:"cron_expr"`
	} `json:"worker"`
}

type env struct {
	baseURL, tenantToken, workerToken, queue string
}

var stdoutMu sync.Mutex

// emit writes one event line to stdout (unbuffered: every line is flushed as written).
func emit(name string, fields map[string]any) {
	event := map[string]any{"event": name}
	for k, v := range fields {
		event[k] = v
	}
	line, err := json.Marshal(event)
	if err != nil {
		panic(err)
	}
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	os.Stdout.Write(append(line, '\n'))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: conformance <scenario.json>")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fail(err)
	}
	var sc scenario
	if err := json.Unmarshal(raw, &sc); err != nil {
		fail(fmt.Errorf("reading the scenario: %w", err))
	}
	e := env{os.Getenv("QF_BASE_URL"), os.Getenv("QF_TENANT_TOKEN"), os.Getenv("QF_WORKER_TOKEN"), os.Getenv("QF_QUEUE")}
	if e.baseURL == "" || e.queue == "" {
		fail(errors.New("QF_BASE_URL and QF_QUEUE are required"))
	}
	var logTo io.Writer = os.Stderr
	if path := os.Getenv("QF_GO_RUNNER_LOG"); path != "" { // a copy of the log, for debugging runs
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			defer f.Close()
			logTo = io.MultiWriter(os.Stderr, f)
		}
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	switch sc.Worker.Mode {
	case "loop":
		err = runLoop(ctx, e, &sc)
	case "raw_stale_lease":
		err = runStaleLease(ctx, e, &sc)
	case "auth_errors":
		err = runAuthErrors(ctx, e)
	case "raw_calls":
		err = runRawCalls(ctx, e)
	case "raw_unique":
		err = runUnique(ctx, e, &sc)
	case "raw_durable_time":
		err = runDurableTime(ctx, e, &sc)
	case "raw_cron_workflow":
		err = runCronWorkflow(ctx, e, &sc)
	default:
		err = fmt.Errorf("unknown worker mode %q", sc.Worker.Mode)
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "conformance:", err)
	os.Exit(1)
}

// --- loop ----------------------------------------------------------------------------------------

func handlerFor(behaviour string) (qf.HandlerFunc, error) {
	sleepThenPayload := func(d time.Duration) qf.HandlerFunc {
		return func(ctx context.Context, job *qf.Job) (map[string]any, error) {
			emit("handler_started", map[string]any{"job_id": job.ID})
			if d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return job.Payload, nil
		}
	}
	switch behaviour {
	case "return_payload":
		return sleepThenPayload(0), nil
	case "sleep_200ms_then_return_payload":
		return sleepThenPayload(200 * time.Millisecond), nil
	case "sleep_1500ms_then_return_payload":
		return sleepThenPayload(1500 * time.Millisecond), nil
	case "fail_retryable":
		return func(ctx context.Context, job *qf.Job) (map[string]any, error) {
			emit("handler_started", map[string]any{"job_id": job.ID})
			return nil, errors.New("boom")
		}, nil
	case "fail_permanent":
		return func(ctx context.Context, job *qf.Job) (map[string]any, error) {
			emit("handler_started", map[string]any{"job_id": job.ID})
			return nil, qf.Permanent(errors.New("invalid input"))
		}, nil
	case "report_progress_and_logs":
		return func(ctx context.Context, job *qf.Job) (map[string]any, error) {
			emit("handler_started", map[string]any{"job_id": job.ID})
			jc := qf.JobContextFrom(ctx)
			if err := jc.Progress(40, "loading"); err != nil {
				return nil, err
			}
			for i := 1; i <= 120; i++ {
				jc.Log(fmt.Sprintf("line %d", i))
			}
			span := trace.SpanFromContext(ctx).SpanContext()
			emit("handler_span", map[string]any{"job_id": job.ID, "trace_id": span.TraceID().String(),
				"span_id": span.SpanID().String()})
			if err := jc.Progress(100, "done"); err != nil {
				return nil, err
			}
			return job.Payload, nil
		}, nil
	case "log_then_fail_retryable":
		return func(ctx context.Context, job *qf.Job) (map[string]any, error) {
			emit("handler_started", map[string]any{"job_id": job.ID})
			if err := qf.JobContextFrom(ctx).LogAt(qf.LevelError, "failing on purpose"); err != nil {
				return nil, err
			}
			return nil, errors.New("boom")
		}, nil
	case "wait_for_cancel":
		return func(ctx context.Context, job *qf.Job) (map[string]any, error) {
			emit("handler_started", map[string]any{"job_id": job.ID})
			select {
			case <-ctx.Done():
				emit("handler_observed_cancel", map[string]any{"job_id": job.ID})
				return nil, context.Cause(ctx)
			case <-time.After(20 * time.Second):
				return nil, errors.New("no cancellation within 20 s")
			}
		}, nil
	}
	return nil, fmt.Errorf("unknown handler behaviour %q", behaviour)
}

func runLoop(ctx context.Context, e env, sc *scenario) error {
	client := qf.NewClient(e.baseURL, e.tenantToken, qf.WithWorkerToken(e.workerToken))
	w := sc.Worker
	lease := w.LeaseSecs
	if lease <= 0 {
		lease = 30
	}
	stopAfter := w.StopAfterJobs
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var spans *tracetest.InMemoryExporter
	if w.Tracing {
		// The OpenTelemetry SDK as the application would install it, exporting to memory at once.
		spans = tracetest.NewInMemoryExporter()
		provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		defer provider.Shutdown(context.Background())
		otel.SetTracerProvider(provider)
	}
	var finished atomic.Int64
	worker := qf.NewWorker(client, e.queue, qf.WorkerOptions{
		LeaseSecs:   lease,
		WaitSecs:    1,
		Concurrency: w.Concurrency,
		BatchSize:   w.BatchSize,
		WorkerID:    w.WorkerID, // "" takes the SDK's default
		OnJobDone: func(job *qf.Job, outcome qf.Outcome, err error) {
			emit("job_done", map[string]any{"job_id": job.ID, "outcome": string(outcome)})
			if stopAfter > 0 && finished.Add(1) >= int64(stopAfter) {
				stop() // graceful: the worker stops leasing and drains what it holds
			}
		},
	})
	for task, behaviour := range w.Handlers {
		fn, err := handlerFor(behaviour)
		if err != nil {
			return err
		}
		worker.Handle(task, fn)
	}
	if err := worker.Run(runCtx); err != nil {
		return fmt.Errorf("worker loop: %w", err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("gave up after %d of %d jobs: %w", finished.Load(), stopAfter, ctx.Err())
	}
	if spans != nil {
		emitWorkerSpans(spans.GetSpans())
	}
	return nil
}

// emitWorkerSpans emits one worker_span event per finished span of the worker loop ("process ..."),
// in the order they ended.
func emitWorkerSpans(spans tracetest.SpanStubs) {
	for _, span := range spans {
		if !strings.HasPrefix(span.Name, "process ") {
			continue
		}
		attributes := map[string]any{}
		for _, kv := range span.Attributes {
			attributes[string(kv.Key)] = kv.Value.AsInterface()
		}
		parent := ""
		if span.Parent.IsValid() {
			parent = span.Parent.SpanID().String()
		}
		status := map[codes.Code]string{codes.Unset: "unset", codes.Ok: "ok", codes.Error: "error"}[span.Status.Code]
		emit("worker_span", map[string]any{
			"job_id":         attributes[qf.AttrMessagingMessageID],
			"name":           span.Name,
			"trace_id":       span.SpanContext.TraceID().String(),
			"span_id":        span.SpanContext.SpanID().String(),
			"parent_span_id": parent,
			"kind":           span.SpanKind.String(),
			"status":         status,
			"attributes":     attributes,
		})
	}
}

// --- raw_stale_lease -----------------------------------------------------------------------------

func runStaleLease(ctx context.Context, e env, sc *scenario) error {
	client := qf.NewClient(e.baseURL, e.tenantToken, qf.WithWorkerToken(e.workerToken))
	lease := sc.Worker.LeaseSecs
	if lease <= 0 {
		lease = 30
	}
	var leased qf.LeasedJob
	for {
		resp, err := client.Lease(ctx, e.queue, qf.LeaseRequest{MaxJobs: 1, LeaseSecs: lease, WaitSecs: 5})
		if err != nil {
			return fmt.Errorf("lease: %w", err)
		}
		if len(resp.Jobs) > 0 {
			leased = resp.Jobs[0]
			break
		}
	}
	emit("leased", map[string]any{"job_id": leased.Job.ID, "lease_token": leased.LeaseToken})
	if err := waitForContinue(ctx); err != nil {
		return err
	}
	_, hbErr := client.Heartbeat(ctx, leased.Job.ID, leased.LeaseToken, 30)
	cErr := client.Complete(ctx, leased.Job.ID, leased.LeaseToken, map[string]any{"late": true})
	if hbErr == nil || cErr == nil {
		return fmt.Errorf("a stale token was accepted: heartbeat error %v, complete error %v", hbErr, cErr)
	}
	emit("stale_rejected", map[string]any{
		"heartbeat_status": qf.StatusOf(hbErr),
		"complete_status":  qf.StatusOf(cErr),
		"error_body_ok":    bodyOK(hbErr) && bodyOK(cErr),
	})
	return nil
}

func waitForContinue(ctx context.Context) error {
	lines := make(chan string)
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			lines <- strings.TrimSpace(scanner.Text())
		}
		close(lines)
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return io.ErrUnexpectedEOF
			}
			if line == "continue" {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for continue: %w", ctx.Err())
		}
	}
}

func bodyOK(err error) bool {
	apiErr, ok := qf.AsAPIError(err)
	return ok && apiErr.HasBody()
}

// --- auth_errors ---------------------------------------------------------------------------------

func runAuthErrors(ctx context.Context, e env) error {
	loop := func(workerToken string) error {
		client := qf.NewClient(e.baseURL, e.tenantToken, qf.WithWorkerToken(workerToken))
		w := qf.NewWorker(client, e.queue, qf.WorkerOptions{LeaseSecs: 10, WaitSecs: 1})
		w.Handle("conf.never", func(ctx context.Context, job *qf.Job) (map[string]any, error) { return nil, nil })
		runCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		err := w.Run(runCtx)
		if err == nil {
			return errors.New("the worker loop kept going instead of stopping with an error")
		}
		return err
	}
	err := loop("not-the-token")
	emit("loop_bad_token", map[string]any{"status": qf.StatusOf(err), "error_body_ok": bodyOK(err)})
	err = loop(e.tenantToken)
	emit("loop_tenant_token", map[string]any{"status": qf.StatusOf(err), "error_body_ok": bodyOK(err)})
	client := qf.NewClient(e.baseURL, e.workerToken)
	_, err = client.CreateJob(ctx, qf.CreateJobRequest{TaskName: "conf.raw", Config: &qf.JobConfigRequest{Queue: e.queue}}, "")
	emit("raw_worker_token_on_tenant_route", map[string]any{"status": qf.StatusOf(err), "error_body_ok": bodyOK(err)})
	return nil
}

// --- raw_unique ----------------------------------------------------------------------------------

// runUnique creates two jobs with one unique key (the typed config, OnConflict left to the
// server's default) and different payloads, then reads the first back.
func runUnique(ctx context.Context, e env, sc *scenario) error {
	client := qf.NewClient(e.baseURL, e.tenantToken, qf.WithWorkerToken(e.workerToken))
	config := &qf.JobConfigRequest{Queue: e.queue, Unique: &qf.UniquePolicy{Key: sc.Worker.UniqueKey, WindowSecs: sc.Worker.WindowSecs}}
	first, err := client.CreateJob(ctx, qf.CreateJobRequest{TaskName: "conf.unique", Payload: map[string]any{"n": 1}, Config: config}, "")
	if err != nil {
		return fmt.Errorf("first create: %w", err)
	}
	second, err := client.CreateJob(ctx, qf.CreateJobRequest{TaskName: "conf.unique", Payload: map[string]any{"n": 2}, Config: config}, "")
	if err != nil {
		return fmt.Errorf("second create: %w", err)
	}
	job, err := client.GetJob(ctx, first.JobID)
	if err != nil {
		return fmt.Errorf("get: %w", err)
	}
	policy, err := job.Unique()
	if err != nil {
		return err
	}
	emit("unique_done", map[string]any{"same": first.JobID == second.JobID, "unique": policy, "payload": job.Payload})
	return nil
}

// --- raw_durable_time ----------------------------------------------------------------------------

// runDurableTime creates a wait-for-event step (its key a context placeholder) and a sleep after it,
// sees the step waiting, sends its event, follows the workflow to its end, then reads the event back.
func runDurableTime(ctx context.Context, e env, sc *scenario) error {
	w := sc.Worker
	client := qf.NewClient(e.baseURL, e.tenantToken, qf.WithWorkerToken(e.workerToken))
	steps := []qf.WorkflowStep{
		qf.WaitForEventStep("approve", w.KeyTemplate, w.TimeoutSecs),
		qf.SleepStep("nap", w.SleepSecs, "approve"),
	}
	created, err := client.CreateWorkflow(ctx, qf.CreateWorkflowRequest{Name: "conf-durable", Steps: steps, Context: w.Context})
	if err != nil {
		return fmt.Errorf("create workflow: %w", err)
	}
	id := created.WorkflowID
	var waiting *qf.WorkflowStepState
	for deadline := time.Now().Add(20 * time.Second); waiting == nil && time.Now().Before(deadline); {
		states, err := client.WorkflowSteps(ctx, id)
		if err != nil {
			return fmt.Errorf("steps: %w", err)
		}
		for i, s := range states.Steps {
			if s.Name == "approve" && s.Status == qf.StatusRunning && s.EventKey != nil {
				waiting = &states.Steps[i]
			}
		}
		if waiting == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	sent, err := client.SendEvent(ctx, qf.PostEventRequest{Key: w.EventKey, Payload: w.Payload})
	if err != nil {
		return fmt.Errorf("send event: %w", err)
	}
	terminal := []string{"completed", "failed", "partially_failed", "cancelled"}
	got, err := client.GetWorkflow(ctx, id)
	for deadline := time.Now().Add(20 * time.Second); err == nil && !slices.Contains(terminal, got.Status) && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		got, err = client.GetWorkflow(ctx, id)
	}
	if err != nil {
		return fmt.Errorf("get workflow: %w", err)
	}
	listed, err := client.ListEvents(ctx, qf.ListEventsParams{Key: w.EventKey, Limit: 10})
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	var mine any
	for _, ev := range listed.Events {
		if ev.EventID == sent.EventID {
			mine = map[string]any{"key": ev.Key, "delivered": ev.Delivered, "payload": ev.Payload}
		}
	}
	var waitingKey any
	if waiting != nil {
		waitingKey = *waiting.EventKey
	}
	nap, _ := got.Context["nap"].(map[string]any)
	_, slept := nap["slept_until"].(string)
	emit("durable_done", map[string]any{
		"waiting_key": waitingKey,
		"wake_at_set": waiting != nil && waiting.WakeAt != nil,
		"delivered":   sent.Delivered,
		"status":      got.Status,
		"approval":    got.Context["approve"],
		"slept":       slept,
		"listed":      mine,
	})
	return nil
}

// --- raw_cron_workflow ---------------------------------------------------------------------------

// orNull is v, or nil (JSON null) when it is the zero value: a field the SDK decoded as absent.
func orNull[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// scheduleSummary is a workflow schedule as this SDK decoded it, in the contract's summary shape.
func scheduleSummary(s *qf.CronSchedule, queue string) any {
	if s == nil {
		return nil
	}
	summary := map[string]any{"task_name": nil, "name": nil, "context": nil, "steps": nil}
	if s.TaskName != nil {
		summary["task_name"] = *s.TaskName
	}
	if wf := s.Workflow; wf != nil {
		steps := []any{}
		for _, step := range wf.Steps {
			var dependsOn, payload any // nil (null) when absent
			if step.DependsOn != nil {
				dependsOn = step.DependsOn
			}
			if step.Payload != nil {
				payload = step.Payload
			}
			steps = append(steps, map[string]any{
				"name":       step.Name,
				"task_name":  orNull(step.TaskName),
				"depends_on": dependsOn,
				"payload":    payload,
				"sleep_secs": orNull(step.SleepSecs),
				"on_failure": orNull(step.OnFailure),
				"our_queue":  step.Queue == queue,
			})
		}
		summary["name"] = wf.Name
		if wf.Context != nil {
			summary["context"] = wf.Context
		}
		summary["steps"] = steps
	}
	return summary
}

// runCronWorkflow creates a schedule that starts a workflow beside a task schedule, reads it back
// by get and by list, waits for it to fire, and deletes both.
func runCronWorkflow(ctx context.Context, e env, sc *scenario) error {
	w := sc.Worker
	client := qf.NewClient(e.baseURL, e.tenantToken, qf.WithWorkerToken(e.workerToken))
	workflow := qf.CreateWorkflowRequest{
		Name:    w.Name,
		Context: w.Context,
		Steps: []qf.WorkflowStep{
			{Name: "extract", TaskName: "conf.cron", Payload: w.Payload, Queue: e.queue},
			qf.SleepStep("nap", w.SleepSecs, "extract"),
		},
	}
	created, err := client.CreateCron(ctx, qf.CreateCronRequest{Name: w.Name, CronExpr: w.CronExpr, Workflow: &workflow})
	if err != nil {
		return fmt.Errorf("create workflow schedule: %w", err)
	}
	task, err := client.CreateCron(ctx, qf.CreateCronRequest{Name: "conf-cron-task", CronExpr: "0 0 1 1 *",
		TaskName: "conf.cron", Queue: e.queue})
	if err != nil {
		return fmt.Errorf("create task schedule: %w", err)
	}
	got, err := client.GetCron(ctx, created.CronID)
	if err != nil {
		return fmt.Errorf("get schedule: %w", err)
	}
	listed, err := client.ListCrons(ctx, qf.ListParams{Limit: 100})
	if err != nil {
		return fmt.Errorf("list schedules: %w", err)
	}
	var firedContext any
	for deadline := time.Now().Add(20 * time.Second); firedContext == nil && time.Now().Before(deadline); {
		workflows, err := client.ListWorkflows(ctx, qf.ListWorkflowsParams{ListParams: qf.ListParams{Limit: 100}})
		if err != nil {
			return fmt.Errorf("list workflows: %w", err)
		}
		for _, wf := range workflows.Workflows {
			if firedContext == nil && strings.HasPrefix(wf.Name, w.Name+"@") {
				firedContext = wf.Context
			}
		}
		if firedContext == nil {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := client.DeleteCron(ctx, created.CronID); err != nil {
		return fmt.Errorf("delete workflow schedule: %w", err)
	}
	if err := client.DeleteCron(ctx, task.CronID); err != nil {
		return fmt.Errorf("delete task schedule: %w", err)
	}
	var goneStatus any
	if _, err := client.GetCron(ctx, created.CronID); err != nil {
		goneStatus = qf.StatusOf(err)
	}
	var mine *qf.CronSchedule
	var plain any
	for i, s := range listed.Crons {
		switch s.ID {
		case created.CronID:
			mine = &listed.Crons[i]
		case task.CronID:
			var taskName any
			if s.TaskName != nil {
				taskName = *s.TaskName
			}
			plain = map[string]any{"task_name": taskName, "has_workflow": s.Workflow != nil}
		}
	}
	emit("cron_workflow_done", map[string]any{
		"got":           scheduleSummary(got, e.queue),
		"listed":        scheduleSummary(mine, e.queue),
		"plain":         plain,
		"fired_context": firedContext,
		"gone_status":   goneStatus,
	})
	return nil
}

// --- raw_calls -----------------------------------------------------------------------------------

type checker struct{ failures []string }

func (c *checker) check(ok bool, format string, args ...any) bool {
	if !ok {
		c.failures = append(c.failures, fmt.Sprintf(format, args...))
	}
	return ok
}

// noErr records err as a failure and reports whether there was none.
func (c *checker) noErr(err error, what string) bool {
	return c.check(err == nil, "%s: %v", what, err)
}

// wantStatus records a failure unless err is an API error with status and the server's body.
func (c *checker) wantStatus(err error, status int, what string) {
	if c.check(qf.StatusOf(err) == status, "%s: expected status %d, got %v", what, status, err) {
		c.check(bodyOK(err), "%s: the error carries no {error, timestamp} body: %v", what, err)
	}
}

func runRawCalls(ctx context.Context, e env) error {
	client := qf.NewClient(e.baseURL, e.tenantToken, qf.WithWorkerToken(e.workerToken))
	c := &checker{}
	rawCalls(ctx, client, e.queue, c)
	emit("raw_calls_done", map[string]any{"ok": len(c.failures) == 0, "failures": append([]string{}, c.failures...)})
	return nil
}

func rawCalls(ctx context.Context, client *qf.Client, queue string, c *checker) {
	// 1. whoami
	if me, err := client.WhoAmI(ctx); c.noErr(err, "whoami") {
		c.check(me.Tenant == "conformance" && me.Access == "read_write", "whoami: %+v", *me)
	}

	// 2. create with an idempotency key, twice
	create := qf.CreateJobRequest{TaskName: "conf.raw", Payload: map[string]any{"a": 1},
		Config: &qf.JobConfigRequest{Queue: queue, Priority: qf.Int(5)}}
	first, err := client.CreateJob(ctx, create, "raw-1")
	if !c.noErr(err, "create job") {
		return
	}
	again, err := client.CreateJob(ctx, create, "raw-1")
	if c.noErr(err, "create job again") {
		c.check(again.JobID == first.JobID, "idempotency key: %s != %s", again.JobID, first.JobID)
	}

	// 3. get it
	if job, err := client.GetJob(ctx, first.JobID); c.noErr(err, "get job") {
		c.check(job.TaskName == "conf.raw", "get job: task_name %q", job.TaskName)
		c.check(fmt.Sprint(job.Payload["a"]) == "1" && len(job.Payload) == 1, "get job: payload %v", job.Payload)
		c.check(job.QueueName == queue, "get job: queue_name %q", job.QueueName)
		c.check(job.Status == qf.StatusPending, "get job: status %q", job.Status)
		c.check(fmt.Sprint(job.Config["priority"]) == "5", "get job: config.priority %v", job.Config["priority"])
	}

	// 4. batch
	batch := make([]qf.CreateJobRequest, 3)
	for i := range batch {
		batch[i] = qf.CreateJobRequest{TaskName: "conf.raw", Payload: map[string]any{"i": i},
			Config: &qf.JobConfigRequest{Queue: queue}}
	}
	if resp, err := client.CreateBatch(ctx, batch); c.noErr(err, "batch") {
		c.check(resp.Count == 3 && len(resp.JobIDs) == 3, "batch: %+v", *resp)
	}

	// 5. list with a cursor
	page1, err := client.ListJobs(ctx, qf.ListJobsParams{Queue: queue, ListParams: qf.ListParams{Limit: 2, IncludeTotal: true}})
	if c.noErr(err, "list jobs") {
		c.check(len(page1.Jobs) == 2, "list jobs: %d jobs", len(page1.Jobs))
		c.check(page1.HasMore, "list jobs: has_more false")
		c.check(page1.Total != nil && *page1.Total == 4, "list jobs: total %v", page1.Total)
		if c.check(page1.NextCursor != nil && *page1.NextCursor != "", "list jobs: no next_cursor") {
			page2, err := client.ListJobs(ctx, qf.ListJobsParams{Queue: queue,
				ListParams: qf.ListParams{Limit: 2, Cursor: *page1.NextCursor}})
			if c.noErr(err, "list jobs page 2") {
				seen := map[string]bool{}
				for _, j := range append(page1.Jobs, page2.Jobs...) {
					seen[j.ID] = true
				}
				c.check(len(page2.Jobs) == 2 && len(seen) == 4, "list jobs page 2: %d jobs, %d distinct in all",
					len(page2.Jobs), len(seen))
			}
		}
	}

	// 6. cancel one, twice
	if c.noErr(client.CancelJob(ctx, first.JobID), "cancel job") {
		c.wantStatus(client.CancelJob(ctx, first.JobID), http.StatusConflict, "cancel job again")
	}

	// 7. cancel by filter
	if resp, err := client.CancelJobs(ctx, qf.CancelJobsRequest{Queue: queue}); c.noErr(err, "cancel jobs") {
		c.check(resp.Cancelled == 3, "cancel jobs: cancelled %d", resp.Cancelled)
	}

	// 8. unknown job
	_, err = client.GetJob(ctx, randomUUID())
	c.wantStatus(err, http.StatusNotFound, "get unknown job")

	// 9. workflow
	wfReq := qf.CreateWorkflowRequest{Name: "conf-wf", Steps: []qf.WorkflowStep{
		{Name: "a", TaskName: "conf.raw", Queue: queue},
		{Name: "b", TaskName: "conf.raw", DependsOn: []string{"a"}, Queue: queue},
	}}
	if wf, err := client.CreateWorkflow(ctx, wfReq); c.noErr(err, "create workflow") {
		id := wf.WorkflowID
		if got, err := client.GetWorkflow(ctx, id); c.noErr(err, "get workflow") {
			c.check(got.Status == "created" || got.Status == "running", "get workflow: status %q", got.Status)
		}
		if steps, err := client.WorkflowSteps(ctx, id); c.noErr(err, "workflow steps") {
			names := []string{}
			for _, s := range steps.Steps {
				names = append(names, s.Name)
			}
			c.check(slices.Equal(names, []string{"a", "b"}), "workflow steps: %v", names)
		}
		if d, err := client.WorkflowDiagram(ctx, id); c.noErr(err, "workflow diagram") {
			c.check(d.Format == "mermaid" && strings.Contains(d.Diagram, "a --> b"), "workflow diagram: %+v", *d)
		}
		if c.noErr(client.CancelWorkflow(ctx, id), "cancel workflow") &&
			c.noErr(client.RetryWorkflow(ctx, id), "retry workflow") {
			c.noErr(client.CancelWorkflow(ctx, id), "cancel workflow again")
		}
	}

	// 10. a cycle
	_, err = client.CreateWorkflow(ctx, qf.CreateWorkflowRequest{Name: "conf-cycle", Steps: []qf.WorkflowStep{
		{Name: "a", TaskName: "conf.raw", DependsOn: []string{"b"}, Queue: queue},
		{Name: "b", TaskName: "conf.raw", DependsOn: []string{"a"}, Queue: queue},
	}})
	c.wantStatus(err, http.StatusBadRequest, "workflow with a cycle")

	// 11. cron
	if cr, err := client.CreateCron(ctx, qf.CreateCronRequest{Name: "conf-cron", CronExpr: "*/5 * * * *",
		TaskName: "conf.raw", Queue: queue}); c.noErr(err, "create cron") {
		id := cr.CronID
		if got, err := client.GetCron(ctx, id); c.noErr(err, "get cron") {
			c.check(got.Name == "conf-cron" && got.Enabled, "get cron: %+v", *got)
			c.check(got.Timezone == nil && got.NextRunLocal == nil, "get cron: a zone on %+v", *got)
		}
		var zonedID string
		var local *time.Time
		if zoned, err := client.CreateCron(ctx, qf.CreateCronRequest{Name: "conf-cron-tz", CronExpr: "0 9 * * *",
			TaskName: "conf.raw", Queue: queue, Timezone: "Europe/Berlin"}); c.noErr(err, "create zoned cron") {
			zonedID = zoned.CronID
			if got, err := client.GetCron(ctx, zonedID); c.noErr(err, "get zoned cron") {
				c.check(got.Timezone != nil && *got.Timezone == "Europe/Berlin", "get zoned cron: timezone %v", got.Timezone)
				local = got.NextRunLocal
				ok := local != nil
				if ok {
					_, offset := local.Zone()
					ok = local.Hour() == 9 && local.Minute() == 0 && local.Second() == 0 &&
						(offset == 3600 || offset == 7200) && local.Equal(got.NextRunAt)
				}
				c.check(ok, "get zoned cron: next_run_local %v, next_run_at %s", local, got.NextRunAt)
			}
		}
		if list, err := client.ListCrons(ctx, qf.ListParams{Limit: 100}); c.noErr(err, "list crons") {
			c.check(slices.ContainsFunc(list.Crons, func(s qf.CronSchedule) bool { return s.ID == id }),
				"list crons: %s not listed", id)
			if zonedID != "" {
				c.check(slices.ContainsFunc(list.Crons, func(s qf.CronSchedule) bool {
					return s.ID == zonedID && s.Timezone != nil && *s.Timezone == "Europe/Berlin" &&
						s.NextRunLocal != nil && local != nil && s.NextRunLocal.Equal(*local)
				}), "list crons: %s not listed with its zone and local next run", zonedID)
			}
		}
		if zonedID != "" {
			c.noErr(client.DeleteCron(ctx, zonedID), "delete zoned cron")
		}
		if c.noErr(client.PauseCron(ctx, id), "pause cron") {
			if got, err := client.GetCron(ctx, id); c.noErr(err, "get paused cron") {
				c.check(!got.Enabled, "paused cron is enabled")
			}
		}
		if c.noErr(client.ResumeCron(ctx, id), "resume cron") {
			if got, err := client.GetCron(ctx, id); c.noErr(err, "get resumed cron") {
				c.check(got.Enabled, "resumed cron is not enabled")
			}
		}
		if c.noErr(client.DeleteCron(ctx, id), "delete cron") {
			_, err := client.GetCron(ctx, id)
			c.wantStatus(err, http.StatusNotFound, "get deleted cron")
		}
	}

	// 12. dlq, stats, queues, tasks
	if dl, err := client.ListDeadLetters(ctx, qf.ListDeadLettersParams{ListParams: qf.ListParams{Limit: 5}}); c.noErr(err, "list dlq") {
		c.check(dl.DeadLetters != nil, "list dlq: no dead_letters list")
	}
	var stats map[string]any
	if c.noErr(client.Do(ctx, http.MethodGet, "/api/v1/stats", nil, nil, &stats), "stats (raw)") {
		for _, field := range []string{"jobs_created", "jobs_completed", "jobs_failed", "jobs_retried",
			"jobs_dead_lettered", "workflows_created", "workflows_completed", "workflows_failed"} {
			n, ok := stats[field].(float64)
			c.check(ok && n >= 0, "stats: %s = %v", field, stats[field])
		}
	}
	if s, err := client.Stats(ctx); c.noErr(err, "stats") {
		c.check(s.JobsCreated >= 4, "stats: jobs_created %d", s.JobsCreated)
	}
	if qs, err := client.ListQueues(ctx); c.noErr(err, "queues") {
		c.check(slices.ContainsFunc(qs.Queues, func(q qf.QueueStats) bool { return q.Queue == queue }),
			"queues: %s not listed", queue)
	}
	if r, err := client.PauseQueue(ctx, queue); c.noErr(err, "pause queue") {
		c.check(r.Paused && r.Queue == queue, "pause queue: %+v", *r)
	}
	if r, err := client.ResumeQueue(ctx, queue); c.noErr(err, "resume queue") {
		c.check(!r.Paused && r.Queue == queue, "resume queue: %+v", *r)
	}
	if t, err := client.Tasks(ctx); c.noErr(err, "tasks") {
		c.check(t.Tasks != nil, "tasks: no list")
	}
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
