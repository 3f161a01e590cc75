package queueflow

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// --- jobs ---

// CreateJob enqueues a job (POST /api/v1/jobs). A non-empty idempotencyKey is sent as the
// Idempotency-Key header: creating again with the same key returns the same job id.
func (c *Client) CreateJob(ctx context.Context, req CreateJobRequest, idempotencyKey string) (*CreateJobResponse, error) {
	o := callOpts{}
	if idempotencyKey != "" {
		o.headers = map[string]string{"Idempotency-Key": idempotencyKey}
	}
	var out CreateJobResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs", nil, req, &out, o); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateBatch enqueues many jobs at once (POST /api/v1/jobs/batch).
func (c *Client) CreateBatch(ctx context.Context, jobs []CreateJobRequest) (*CreateBatchJobsResponse, error) {
	var out CreateBatchJobsResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs/batch", nil, CreateBatchJobsRequest{Jobs: jobs}, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListJobs lists the tenant's jobs (GET /api/v1/jobs). Page on with p.Cursor = *resp.NextCursor.
func (c *Client) ListJobs(ctx context.Context, p ListJobsParams) (*ListJobsResponse, error) {
	q := p.ListParams.values()
	setIf(q, "status", p.Status)
	setIf(q, "queue", p.Queue)
	setIf(q, "task_name", p.TaskName)
	var out ListJobsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/jobs", q, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetJob fetches one job (GET /api/v1/jobs/{id}).
func (c *Client) GetJob(ctx context.Context, id string) (*Job, error) {
	var out Job
	if err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+seg(id), nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelJob cancels one job (POST /api/v1/jobs/{id}/cancel); a finished job is a 409.
func (c *Client) CancelJob(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/v1/jobs/"+seg(id)+"/cancel", nil, nil, nil, callOpts{})
}

// CancelJobs cancels the tenant's jobs matching the filter (POST /api/v1/jobs/cancel).
func (c *Client) CancelJobs(ctx context.Context, filter CancelJobsRequest) (*CancelJobsResponse, error) {
	var out CancelJobsResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs/cancel", nil, filter, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// JobLogs reads a page of a job's log lines, oldest first (GET /api/v1/jobs/{id}/logs, an
// extension). Page on with p.After set to the last line's Seq while HasMore.
func (c *Client) JobLogs(ctx context.Context, id string, p JobLogsParams) (*JobLogsResponse, error) {
	q := url.Values{}
	if p.After > 0 {
		q.Set("after", fmt.Sprint(p.After))
	}
	if p.Limit > 0 {
		q.Set("limit", fmt.Sprint(p.Limit))
	}
	var out JobLogsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+seg(id)+"/logs", q, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// JobAttempts lists every attempt (lease) of a job, in order (GET /api/v1/jobs/{id}/attempts, an
// extension).
func (c *Client) JobAttempts(ctx context.Context, id string) (*JobAttemptsResponse, error) {
	var out JobAttemptsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/jobs/"+seg(id)+"/attempts", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// JobEvents opens the job's server-sent event stream (GET /api/v1/jobs/{id}/events): one Job
// per status change, ending after a terminal status. Close the stream when done with it.
func (c *Client) JobEvents(ctx context.Context, id string) (*Stream[Job], error) {
	return openStream[Job](ctx, c, "/api/v1/jobs/"+seg(id)+"/events")
}

// --- worker protocol (worker token) ---

// Lease claims up to req.MaxJobs jobs from queue (POST /api/v1/queues/{queue}/lease), waiting up
// to req.WaitSecs for one to arrive. The request's timeout is extended by the wait.
func (c *Client) Lease(ctx context.Context, queue string, req LeaseRequest) (*LeaseResponse, error) {
	var out LeaseResponse
	o := callOpts{worker: true, extra: time.Duration(req.WaitSecs) * time.Second}
	if err := c.do(ctx, http.MethodPost, "/api/v1/queues/"+seg(queue)+"/lease", nil, req, &out, o); err != nil {
		return nil, err
	}
	return &out, nil
}

// Heartbeat extends a lease by extendSecs from now and returns the job's status. Anything but
// "running" (and a 409, IsConflict) means the worker must stop and report nothing.
func (c *Client) Heartbeat(ctx context.Context, jobID, leaseToken string, extendSecs int) (*HeartbeatResponse, error) {
	return c.HeartbeatWithProgress(ctx, jobID, leaseToken, extendSecs, nil)
}

// HeartbeatWithProgress is Heartbeat that also reports the job's progress (an extension,
// docs/visibility.md; nil sends none): the job shows it until its next claim. A percent outside
// 0..100 or a message over MaxProgressMessage characters is a 400.
func (c *Client) HeartbeatWithProgress(ctx context.Context, jobID, leaseToken string, extendSecs int,
	progress *Progress) (*HeartbeatResponse, error) {
	var out HeartbeatResponse
	body := HeartbeatRequest{LeaseToken: leaseToken, ExtendSecs: extendSecs, Progress: progress}
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs/"+seg(jobID)+"/heartbeat", nil, body, &out, callOpts{worker: true}); err != nil {
		return nil, err
	}
	return &out, nil
}

// PostJobLogs appends log lines to a job the caller holds (POST /api/v1/jobs/{id}/logs, an
// extension, worker token): at most MaxLogLinesPerCall lines whose messages take at most
// MaxLogCallBytes, else a 400. Another lease's token (the job was reclaimed or leased again) is a
// 409; lines posted by the holder after its attempt ended are kept. A server without the route
// answers 404. The Worker loop posts what handlers log through JobContext; this is the raw call.
func (c *Client) PostJobLogs(ctx context.Context, jobID, leaseToken string, lines []LogLineRequest) (*PostJobLogsResponse, error) {
	if lines == nil {
		lines = []LogLineRequest{}
	}
	var out PostJobLogsResponse
	body := PostJobLogsRequest{LeaseToken: leaseToken, Lines: lines}
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs/"+seg(jobID)+"/logs", nil, body, &out, callOpts{worker: true}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Complete records success with result (nil is sent as {}). A 409 means the lease was lost.
func (c *Client) Complete(ctx context.Context, jobID, leaseToken string, result map[string]any) error {
	if result == nil {
		result = map[string]any{}
	}
	body := CompleteRequest{LeaseToken: leaseToken, Result: result}
	return c.do(ctx, http.MethodPost, "/api/v1/jobs/"+seg(jobID)+"/complete", nil, body, nil, callOpts{worker: true})
}

// CompleteMany records the success of up to MaxCompletions jobs in one call
// (POST /api/v1/jobs/complete, an extension: see OpenAPIDocument.Offers). A nil result is sent as
// {}. Each item gets, in request order, the answer the per-job route would have given it
// (CompletionAnswer.Err); an error is returned only when the call as a whole failed: a server
// without the route answers 404 (or 405).
func (c *Client) CompleteMany(ctx context.Context, items []CompletionItem) (*CompleteJobsResponse, error) {
	body := CompleteJobsRequest{Jobs: make([]CompletionItem, len(items))}
	for i, item := range items {
		if item.Result == nil {
			item.Result = map[string]any{}
		}
		body.Jobs[i] = item
	}
	var out CompleteJobsResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/jobs/complete", nil, body, &out, callOpts{worker: true}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Fail records a failure. retryable=false dead-letters the job at once; true lets the engine
// retry while budget remains. A 409 means the lease was lost.
func (c *Client) Fail(ctx context.Context, jobID, leaseToken, message string, retryable bool) error {
	body := FailRequest{LeaseToken: leaseToken, Error: message, Retryable: &retryable}
	return c.do(ctx, http.MethodPost, "/api/v1/jobs/"+seg(jobID)+"/fail", nil, body, nil, callOpts{worker: true})
}

// --- workflows ---

// CreateWorkflow creates a workflow, a DAG of steps (POST /api/v1/workflows).
func (c *Client) CreateWorkflow(ctx context.Context, req CreateWorkflowRequest) (*CreateWorkflowResponse, error) {
	var out CreateWorkflowResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/workflows", nil, req, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListWorkflows lists the tenant's workflows (GET /api/v1/workflows).
func (c *Client) ListWorkflows(ctx context.Context, p ListWorkflowsParams) (*ListWorkflowsResponse, error) {
	q := p.ListParams.values()
	setIf(q, "status", p.Status)
	var out ListWorkflowsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/workflows", q, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetWorkflow fetches one workflow.
func (c *Client) GetWorkflow(ctx context.Context, id string) (*Workflow, error) {
	var out Workflow
	if err := c.do(ctx, http.MethodGet, "/api/v1/workflows/"+seg(id), nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// WorkflowSteps returns the live state of every step, in declaration order.
func (c *Client) WorkflowSteps(ctx context.Context, id string) (*WorkflowStepsResponse, error) {
	var out WorkflowStepsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/workflows/"+seg(id)+"/steps", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// WorkflowDiagram returns the workflow's DAG as a Mermaid diagram.
func (c *Client) WorkflowDiagram(ctx context.Context, id string) (*WorkflowDiagram, error) {
	var out WorkflowDiagram
	if err := c.do(ctx, http.MethodGet, "/api/v1/workflows/"+seg(id)+"/diagram", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelWorkflow cancels a workflow; a finished one is a 409.
func (c *Client) CancelWorkflow(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/v1/workflows/"+seg(id)+"/cancel", nil, nil, nil, callOpts{})
}

// RetryWorkflow re-runs what did not complete of a failed, partially failed or cancelled workflow.
func (c *Client) RetryWorkflow(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/v1/workflows/"+seg(id)+"/retry", nil, nil, nil, callOpts{})
}

// WorkflowEvents opens the workflow's server-sent event stream: one WorkflowEvent per change of
// the workflow or a step, ending after a terminal status.
func (c *Client) WorkflowEvents(ctx context.Context, id string) (*Stream[WorkflowEvent], error) {
	return openStream[WorkflowEvent](ctx, c, "/api/v1/workflows/"+seg(id)+"/events")
}

// --- events ---

// SendEvent sends an event (POST /api/v1/events): every step of the tenant waiting for its key
// completes with its payload (Delivered says how many), and it is kept for steps that start waiting
// later. Each call is a new event.
func (c *Client) SendEvent(ctx context.Context, req PostEventRequest) (*PostEventResponse, error) {
	var out PostEventResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/events", nil, req, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListEvents lists the tenant's kept events, newest first (GET /api/v1/events).
func (c *Client) ListEvents(ctx context.Context, p ListEventsParams) (*ListEventsResponse, error) {
	q := url.Values{}
	setIf(q, "key", p.Key)
	if p.Limit > 0 {
		q.Set("limit", fmt.Sprint(p.Limit))
	}
	var out ListEventsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/events", q, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// --- worker keys ---

// CreateWorkerKey mints a key for this tenant's own workers. The answer's Token is shown only here;
// pass it as WithWorkerToken to act for this tenant's jobs, on the key's queues only.
func (c *Client) CreateWorkerKey(ctx context.Context, req CreateWorkerKeyRequest) (*CreateWorkerKeyResponse, error) {
	var out CreateWorkerKeyResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/worker-keys", nil, req, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListWorkerKeys lists the tenant's worker keys (without their tokens).
func (c *Client) ListWorkerKeys(ctx context.Context) (*ListWorkerKeysResponse, error) {
	var out ListWorkerKeysResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/worker-keys", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteWorkerKey revokes a worker key.
func (c *Client) DeleteWorkerKey(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/worker-keys/"+seg(id), nil, nil, nil, callOpts{})
}

// --- limits (flow control) ---

// PutLimit sets (replaces) a limit key's policy; a key ending in "*" is a wildcard for every key
// with that prefix that has no policy of its own.
func (c *Client) PutLimit(ctx context.Context, key string, req PutLimitRequest) (*LimitPolicy, error) {
	var out LimitPolicy
	if err := c.do(ctx, http.MethodPut, "/api/v1/limits/"+seg(key), nil, req, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetLimit reads a key's own policy with its live figures (a 404 when it has none).
func (c *Client) GetLimit(ctx context.Context, key string) (*LimitPolicy, error) {
	var out LimitPolicy
	if err := c.do(ctx, http.MethodGet, "/api/v1/limits/"+seg(key), nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListLimits lists every policy of the tenant, by key.
func (c *Client) ListLimits(ctx context.Context) (*ListLimitsResponse, error) {
	var out ListLimitsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/limits", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteLimit deletes a key's policy (a 404 when there was none).
func (c *Client) DeleteLimit(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/limits/"+seg(key), nil, nil, nil, callOpts{})
}

// --- cron ---

// CreateCron creates a cron schedule; a duplicate name is a 409.
func (c *Client) CreateCron(ctx context.Context, req CreateCronRequest) (*CreateCronResponse, error) {
	var out CreateCronResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/cron", nil, req, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListCrons lists the tenant's cron schedules.
func (c *Client) ListCrons(ctx context.Context, p ListParams) (*ListCronsResponse, error) {
	var out ListCronsResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/cron", p.values(), nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetCron fetches one cron schedule.
func (c *Client) GetCron(ctx context.Context, id string) (*CronSchedule, error) {
	var out CronSchedule
	if err := c.do(ctx, http.MethodGet, "/api/v1/cron/"+seg(id), nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteCron deletes a cron schedule (the jobs it enqueued stay).
func (c *Client) DeleteCron(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/cron/"+seg(id), nil, nil, nil, callOpts{})
}

// PauseCron stops a schedule firing.
func (c *Client) PauseCron(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/v1/cron/"+seg(id)+"/pause", nil, nil, nil, callOpts{})
}

// ResumeCron resumes a schedule from its next future occurrence.
func (c *Client) ResumeCron(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/v1/cron/"+seg(id)+"/resume", nil, nil, nil, callOpts{})
}

// --- dead letters ---

// ListDeadLetters lists the tenant's dead letters.
func (c *Client) ListDeadLetters(ctx context.Context, p ListDeadLettersParams) (*ListDeadLettersResponse, error) {
	q := p.ListParams.values()
	setIf(q, "queue", p.Queue)
	setIf(q, "task_name", p.TaskName)
	if p.Replayed != nil {
		q.Set("replayed", fmt.Sprint(*p.Replayed))
	}
	var out ListDeadLettersResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/dlq", q, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetDeadLetter fetches one dead letter.
func (c *Client) GetDeadLetter(ctx context.Context, id int64) (*DeadLetter, error) {
	var out DeadLetter
	if err := c.do(ctx, http.MethodGet, fmt.Sprintf("/api/v1/dlq/%d", id), nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplayDeadLetter re-enqueues a dead letter as a fresh job; replaying twice is a 409.
func (c *Client) ReplayDeadLetter(ctx context.Context, id int64) (*ReplayDeadLetterResponse, error) {
	var out ReplayDeadLetterResponse
	if err := c.do(ctx, http.MethodPost, fmt.Sprintf("/api/v1/dlq/%d/replay", id), nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplayDeadLetters replays the dead letters matching the filter.
func (c *Client) ReplayDeadLetters(ctx context.Context, filter ReplayDeadLettersRequest) (*ReplayDeadLettersResponse, error) {
	var out ReplayDeadLettersResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/dlq/replay", nil, filter, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// --- queues and system ---

// ListQueues returns the caller's backlog per queue.
func (c *Client) ListQueues(ctx context.Context) (*QueuesResponse, error) {
	var out QueuesResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/queues", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseQueue stops claims of the caller's jobs on queue.
func (c *Client) PauseQueue(ctx context.Context, queue string) (*QueueControlResponse, error) {
	return c.queueControl(ctx, queue, "pause")
}

// ResumeQueue lets claims of the caller's jobs on queue resume.
func (c *Client) ResumeQueue(ctx context.Context, queue string) (*QueueControlResponse, error) {
	return c.queueControl(ctx, queue, "resume")
}

func (c *Client) queueControl(ctx context.Context, queue, action string) (*QueueControlResponse, error) {
	var out QueueControlResponse
	if err := c.do(ctx, http.MethodPost, "/api/v1/queues/"+seg(queue)+"/"+action, nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stats returns the tenant's durable counters.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var out Stats
	if err := c.do(ctx, http.MethodGet, "/api/v1/stats", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Tasks lists the tasks live in-process workers handle.
func (c *Client) Tasks(ctx context.Context) (*TasksResponse, error) {
	var out TasksResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/tasks", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListWorkers lists the workers the tenant may see, most recently seen first (GET /api/v1/workers,
// an extension).
func (c *Client) ListWorkers(ctx context.Context) (*ListWorkersResponse, error) {
	var out ListWorkersResponse
	if err := c.do(ctx, http.MethodGet, "/api/v1/workers", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// WhoAmI returns the caller's tenant and access.
func (c *Client) WhoAmI(ctx context.Context) (*WhoAmI, error) {
	var out WhoAmI
	if err := c.do(ctx, http.MethodGet, "/api/v1/whoami", nil, nil, &out, callOpts{}); err != nil {
		return nil, err
	}
	return &out, nil
}

// OpenAPI reads the server's route list (GET /openapi.json), e.g. to learn whether it offers an
// extension. It is sent with the worker token (the server itself does not ask for one).
func (c *Client) OpenAPI(ctx context.Context) (*OpenAPIDocument, error) {
	var out OpenAPIDocument
	if err := c.do(ctx, http.MethodGet, "/openapi.json", nil, nil, &out, callOpts{worker: true}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Health checks liveness (GET /health, unauthenticated); a 503 is an *APIError.
func (c *Client) Health(ctx context.Context) (*HealthStatus, error) {
	var out HealthStatus
	if err := c.do(ctx, http.MethodGet, "/health", nil, nil, &out, callOpts{noAuth: true}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Ready checks readiness (GET /ready, unauthenticated); a 503 is an *APIError.
func (c *Client) Ready(ctx context.Context) (*ReadyStatus, error) {
	var out ReadyStatus
	if err := c.do(ctx, http.MethodGet, "/ready", nil, nil, &out, callOpts{noAuth: true}); err != nil {
		return nil, err
	}
	return &out, nil
}
