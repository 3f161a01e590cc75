package queueflow

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Job statuses.
const (
	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusRetrying  = "retrying"
	StatusCancelled = "cancelled"
)

// What a create does when its unique key is held (UniquePolicy.OnConflict).
const (
	UniqueSkip    = "skip"
	UniqueReplace = "replace"
)

// UniquePolicy is a job's config.unique (an extension): within WindowSecs (1 to 31536000) of the
// job accepted with Key (1 to 255 bytes, no control characters; per tenant), another create with
// the key inserts nothing. UniqueSkip (the server's default when OnConflict is empty) answers the
// holder's id; UniqueReplace gives a holder that has not started the newcomer's payload and
// schedule (answering its id), and enqueues the newcomer when the holder has started.
type UniquePolicy struct {
	Key        string `json:"key"`
	WindowSecs int    `json:"window_secs"`
	OnConflict string `json:"on_conflict,omitempty"`
}

// JobConfigRequest is the per-job execution policy on create. Every field is optional.
type JobConfigRequest struct {
	Priority          *int     `json:"priority,omitempty"`
	MaxRetries        *int     `json:"max_retries,omitempty"`
	Timeout           *int     `json:"timeout,omitempty"`
	Queue             string   `json:"queue,omitempty"`
	RetryBackoff      string   `json:"retry_backoff,omitempty"`
	RetryDelaySecs    *int     `json:"retry_delay_secs,omitempty"`
	RetryMaxDelaySecs *int     `json:"retry_max_delay_secs,omitempty"`
	JitterFactor      *float64 `json:"jitter_factor,omitempty"`
	// Limits names the job's flow-control keys (up to 4): it starts only when each key's policy
	// has room. Left out when empty.
	Limits []string `json:"limits,omitempty"`
	// Unique makes the job unique over a window; left out when nil. Only jobs created directly
	// take one: a workflow step's or a cron schedule's config does not.
	Unique *UniquePolicy `json:"unique,omitempty"`
}

// JobConfig is the stored execution policy (stored field names), used by workflow steps and cron
// schedules.
type JobConfig struct {
	Priority          *int     `json:"priority,omitempty"`
	MaxRetries        *int     `json:"max_retries,omitempty"`
	TimeoutSecs       *int     `json:"timeout_secs,omitempty"`
	RetryBackoff      string   `json:"retry_backoff,omitempty"`
	RetryDelaySecs    *int     `json:"retry_delay_secs,omitempty"`
	RetryMaxDelaySecs *int     `json:"retry_max_delay_secs,omitempty"`
	JitterFactor      *float64 `json:"jitter_factor,omitempty"`
	// Limits names the job's flow-control keys (up to 4): it starts only when each key's policy
	// has room. Left out when empty.
	Limits []string `json:"limits,omitempty"`
}

// Int returns a pointer to v, for the optional integer fields.
func Int(v int) *int { return &v }

// Float returns a pointer to v, for the optional float fields.
func Float(v float64) *float64 { return &v }

// Bool returns a pointer to v, for the optional boolean fields.
func Bool(v bool) *bool { return &v }

// CreateJobRequest is the body of POST /api/v1/jobs (and one item of a batch).
type CreateJobRequest struct {
	TaskName string            `json:"task_name"`
	Payload  map[string]any    `json:"payload,omitempty"`
	Config   *JobConfigRequest `json:"config,omitempty"`
	RunAt    *time.Time        `json:"run_at,omitempty"`
	Metadata map[string]any    `json:"metadata,omitempty"`
	// IdempotencyKey in the body; CreateJob's idempotency-key argument (sent as the
	// Idempotency-Key header) takes precedence. In a batch this is the per-item key.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// CreateBatchJobsRequest is the body of POST /api/v1/jobs/batch.
type CreateBatchJobsRequest struct {
	Jobs []CreateJobRequest `json:"jobs"`
}

// CreateJobResponse answers a job creation.
type CreateJobResponse struct {
	JobID string `json:"job_id"`
}

// CreateBatchJobsResponse answers a batch creation.
type CreateBatchJobsResponse struct {
	JobIDs []string `json:"job_ids"`
	Count  int      `json:"count"`
}

// Job is a job as the server reports it.
type Job struct {
	ID             string         `json:"id"`
	QueueName      string         `json:"queue_name"`
	TaskName       string         `json:"task_name"`
	Payload        map[string]any `json:"payload"`
	Config         map[string]any `json:"config"`
	Status         string         `json:"status"`
	RetryCount     int            `json:"retry_count"`
	DeliveryCount  int            `json:"delivery_count"`
	CreatedAt      time.Time      `json:"created_at"`
	ScheduledAt    time.Time      `json:"scheduled_at"`
	Metadata       map[string]any `json:"metadata"`
	StartedAt      *time.Time     `json:"started_at,omitempty"`
	CompletedAt    *time.Time     `json:"completed_at,omitempty"`
	NextRetryAt    *time.Time     `json:"next_retry_at,omitempty"`
	ErrorMessage   *string        `json:"error_message,omitempty"`
	Result         map[string]any `json:"result,omitempty"`
	IdempotencyKey *string        `json:"idempotency_key,omitempty"`
	TenantID       *string        `json:"tenant_id,omitempty"`
	WorkflowID     *string        `json:"workflow_id,omitempty"`
	WorkflowStepID *string        `json:"workflow_step_id,omitempty"`
	// Progress is what the job's worker last reported (an extension, docs/visibility.md): nil
	// when it reported none, or when the server does not have the extension.
	Progress *Progress `json:"progress,omitempty"`
}

// Unique decodes the job's config.unique (the server sends all three fields): nil, and no error,
// when the job has no unique policy; an error when config.unique is not a policy.
func (j *Job) Unique() (*UniquePolicy, error) {
	raw, ok := j.Config["unique"]
	if !ok || raw == nil {
		return nil, nil
	}
	encoded, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var policy UniquePolicy
	if err := json.Unmarshal(encoded, &policy); err != nil {
		return nil, fmt.Errorf("queueflow: job %s: config.unique: %w", j.ID, err)
	}
	return &policy, nil
}

// Page holds the paging fields every list response carries.
type Page struct {
	Limit      int     `json:"limit"`
	Offset     int     `json:"offset"`
	HasMore    bool    `json:"has_more"`
	Total      *int    `json:"total,omitempty"`
	NextCursor *string `json:"next_cursor,omitempty"`
}

// ListJobsResponse answers GET /api/v1/jobs.
type ListJobsResponse struct {
	Jobs []Job `json:"jobs"`
	Page
}

// ListParams are the query parameters every list route shares. Zero values are not sent.
type ListParams struct {
	Limit         int
	Offset        int
	OrderBy       string // "created_at DESC" (default) or "created_at ASC"
	IncludeTotal  bool
	Cursor        string
	CreatedAfter  *time.Time
	CreatedBefore *time.Time
}

// ListJobsParams filters GET /api/v1/jobs.
type ListJobsParams struct {
	ListParams
	Status   string
	Queue    string
	TaskName string
}

// ListWorkflowsParams filters GET /api/v1/workflows.
type ListWorkflowsParams struct {
	ListParams
	Status string
}

// ListDeadLettersParams filters GET /api/v1/dlq.
type ListDeadLettersParams struct {
	ListParams
	Queue    string
	TaskName string
	Replayed *bool
}

// CancelJobsRequest is the filter of POST /api/v1/jobs/cancel.
type CancelJobsRequest struct {
	Queue         string     `json:"queue,omitempty"`
	TaskName      string     `json:"task_name,omitempty"`
	Status        string     `json:"status,omitempty"`
	CreatedAfter  *time.Time `json:"created_after,omitempty"`
	CreatedBefore *time.Time `json:"created_before,omitempty"`
	Limit         int        `json:"limit,omitempty"`
}

// CancelJobsResponse answers a cancel by filter.
type CancelJobsResponse struct {
	Cancelled int `json:"cancelled"`
}

// --- worker protocol ---

// LeaseRequest is the body of POST /api/v1/queues/{queue}/lease.
type LeaseRequest struct {
	MaxJobs   int `json:"max_jobs,omitempty"`
	LeaseSecs int `json:"lease_secs,omitempty"`
	WaitSecs  int `json:"wait_secs,omitempty"`
	// WorkerID names the worker (an extension, docs/visibility.md): 1 to MaxWorkerIDBytes visible
	// ASCII characters, recorded on every job the call leases and in the worker registry. Left out
	// when empty.
	WorkerID string `json:"worker_id,omitempty"`
	// Worker is what the worker says of itself (an extension); left out when nil, and the server
	// keeps what it said last.
	Worker *WorkerInfo `json:"worker,omitempty"`
}

// LeasedJob is one leased job and the token proving ownership of it.
type LeasedJob struct {
	Job        Job    `json:"job"`
	LeaseToken string `json:"lease_token"`
	// Traceparent and Tracestate are the W3C trace context the job was created in (an extension,
	// docs/tracing.md), empty when it has none: the worker's span is a child of it.
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
}

// LeaseResponse answers a lease; Jobs may be empty.
type LeaseResponse struct {
	Jobs []LeasedJob `json:"jobs"`
}

// HeartbeatRequest is the body of POST /api/v1/jobs/{id}/heartbeat.
type HeartbeatRequest struct {
	LeaseToken string `json:"lease_token"`
	ExtendSecs int    `json:"extend_secs"`
	// Progress reports how far the job got (an extension); left out when nil.
	Progress *Progress `json:"progress,omitempty"`
}

// HeartbeatResponse carries the job's current status; anything but "running" means stop.
type HeartbeatResponse struct {
	Status string `json:"status"`
}

// CompleteRequest is the body of POST /api/v1/jobs/{id}/complete.
type CompleteRequest struct {
	LeaseToken string         `json:"lease_token"`
	Result     map[string]any `json:"result"`
}

// MaxCompletions is the most items one POST /api/v1/jobs/complete takes.
const MaxCompletions = 100

// CompletionItem is one job of a batch acknowledgement: its id, its lease token and its result
// (nil is sent as {}).
type CompletionItem struct {
	ID         string         `json:"id"`
	LeaseToken string         `json:"lease_token"`
	Result     map[string]any `json:"result"`
}

// CompleteJobsRequest is the body of POST /api/v1/jobs/complete: 1 to MaxCompletions items.
type CompleteJobsRequest struct {
	Jobs []CompletionItem `json:"jobs"`
}

// Outcomes of one item of a batch acknowledgement.
const (
	CompletionCompleted = "completed" // status 204
	CompletionConflict  = "conflict"  // status 409: the lease was lost
	CompletionNotFound  = "not_found" // status 404: the job is gone
)

// CompletionAnswer is the answer for one item, in request order: Status is what
// POST /api/v1/jobs/{id}/complete would have answered for it (204, 409 or 404), Error its message.
type CompletionAnswer struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
	Status  int    `json:"status"`
	Error   string `json:"error,omitempty"`
}

// Err returns nil for a completed item, else the *APIError the per-job route would have returned.
func (a CompletionAnswer) Err() error {
	if a.Status >= 200 && a.Status < 300 {
		return nil
	}
	return &APIError{Status: a.Status, Body: ErrorBody{Error: a.Error}, Method: "POST",
		Path: "/api/v1/jobs/" + seg(a.ID) + "/complete"}
}

// CompleteJobsResponse answers a batch acknowledgement: one answer per item, in request order.
type CompleteJobsResponse struct {
	Results []CompletionAnswer `json:"results"`
}

// OpenAPIDocument is the part of GET /openapi.json the SDK reads: the routes the server offers.
type OpenAPIDocument struct {
	Paths map[string]map[string]json.RawMessage `json:"paths"`
}

// Offers reports whether the document lists the route, e.g. Offers("POST", "/api/v1/jobs/complete").
func (d *OpenAPIDocument) Offers(method, path string) bool {
	if d == nil {
		return false
	}
	_, ok := d.Paths[path][strings.ToLower(method)]
	return ok
}

// FailRequest is the body of POST /api/v1/jobs/{id}/fail.
type FailRequest struct {
	LeaseToken string `json:"lease_token"`
	Error      string `json:"error"`
	Retryable  *bool  `json:"retryable,omitempty"`
}

// --- dead letters ---

// DeadLetter is a dead-lettered job's record.
type DeadLetter struct {
	ID           int64      `json:"id"`
	JobID        string     `json:"job_id"`
	Reason       string     `json:"reason"`
	CreatedAt    time.Time  `json:"created_at"`
	ErrorMessage *string    `json:"error_message,omitempty"`
	QueueName    *string    `json:"queue_name,omitempty"`
	TaskName     *string    `json:"task_name,omitempty"`
	ReplayedAt   *time.Time `json:"replayed_at,omitempty"`
	ReplayJobID  *string    `json:"replay_job_id,omitempty"`
	TenantID     *string    `json:"tenant_id,omitempty"`
}

// ListDeadLettersResponse answers GET /api/v1/dlq.
type ListDeadLettersResponse struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	Page
}

// ReplayDeadLetterResponse answers a single replay.
type ReplayDeadLetterResponse struct {
	JobID string `json:"job_id"`
}

// ReplayDeadLettersRequest filters POST /api/v1/dlq/replay.
type ReplayDeadLettersRequest struct {
	Queue         string     `json:"queue,omitempty"`
	TaskName      string     `json:"task_name,omitempty"`
	CreatedAfter  *time.Time `json:"created_after,omitempty"`
	CreatedBefore *time.Time `json:"created_before,omitempty"`
	Limit         int        `json:"limit,omitempty"`
}

// ReplayedDeadLetter is one dead letter's replay outcome.
type ReplayedDeadLetter struct {
	DeadLetterID int64   `json:"dead_letter_id"`
	JobID        *string `json:"job_id,omitempty"`
	Error        *string `json:"error,omitempty"`
}

// ReplayDeadLettersResponse answers a replay by filter.
type ReplayDeadLettersResponse struct {
	Replayed int                  `json:"replayed"`
	Results  []ReplayedDeadLetter `json:"results"`
}

// --- system ---

// Stats are the tenant's durable counters.
type Stats struct {
	JobsCreated        int64 `json:"jobs_created"`
	JobsCompleted      int64 `json:"jobs_completed"`
	JobsFailed         int64 `json:"jobs_failed"`
	JobsRetried        int64 `json:"jobs_retried"`
	JobsDeadLettered   int64 `json:"jobs_dead_lettered"`
	WorkflowsCreated   int64 `json:"workflows_created"`
	WorkflowsCompleted int64 `json:"workflows_completed"`
	WorkflowsFailed    int64 `json:"workflows_failed"`
}

// TasksResponse lists the tasks live in-process workers handle.
type TasksResponse struct {
	Tasks []string `json:"tasks"`
}

// WhoAmI is the caller's tenant and access.
type WhoAmI struct {
	Tenant string `json:"tenant"`
	Access string `json:"access"` // read_write or read_only
}

// HealthStatus answers GET /health.
type HealthStatus struct {
	Status    string    `json:"status"`
	Timestamp time.Time `json:"timestamp"`
	Version   string    `json:"version"`
}

// ReadyStatus answers GET /ready.
type ReadyStatus struct {
	Status string `json:"status"`
}

// QueueStats is the caller's backlog on one queue.
type QueueStats struct {
	Queue                string `json:"queue"`
	Pending              int    `json:"pending"`
	Scheduled            int    `json:"scheduled"`
	Running              int    `json:"running"`
	Paused               bool   `json:"paused"`
	OldestPendingAgeSecs *int64 `json:"oldest_pending_age_secs,omitempty"`
}

// QueuesResponse answers GET /api/v1/queues.
type QueuesResponse struct {
	Queues []QueueStats `json:"queues"`
}

// QueueControlResponse answers a queue pause or resume.
type QueueControlResponse struct {
	Queue   string `json:"queue"`
	Paused  bool   `json:"paused"`
	Pending int    `json:"pending"`
	Running int    `json:"running"`
}

// --- workflows ---

// StepCondition is a leaf (Path compared with Value by Op) or a combination (All, Any, Not).
type StepCondition struct {
	Op    string          `json:"op,omitempty"`
	Path  string          `json:"path,omitempty"`
	Value json.RawMessage `json:"value,omitempty"` // absent when empty; use json.RawMessage("null") for null
	All   []StepCondition `json:"all,omitempty"`
	Any   []StepCondition `json:"any,omitempty"`
	Not   *StepCondition  `json:"not,omitempty"`
}

// FanOut runs a step once per item of the array at Path in the workflow context.
type FanOut struct {
	Path     string `json:"path"`
	ItemKey  string `json:"item_key,omitempty"`
	MaxItems *int   `json:"max_items,omitempty"`
}

// MaxSleepSecs is the longest SleepSecs and TimeoutSecs (a year).
const MaxSleepSecs = 31_536_000

// MaxEventKeyBytes is the longest event key, in bytes (a wait step's key template too).
const MaxEventKeyBytes = 256

// WaitForEvent is a wait-for-event step's event: Key (1 to 256 bytes) may hold {{context.path}}
// placeholders, which the server resolves from the workflow context when the step starts.
type WaitForEvent struct {
	Key string `json:"key"`
}

// WorkflowStep declares one step of a workflow: a task (TaskName), a sub-workflow (Workflow), or,
// as extensions, a sleep (SleepSecs or SleepUntil) or a wait for an event (WaitForEvent, with an
// optional TimeoutSecs). SleepStep, SleepUntilStep and WaitForEventStep declare the last two.
type WorkflowStep struct {
	Name      string                 `json:"name"`
	TaskName  string                 `json:"task_name,omitempty"`
	DependsOn []string               `json:"depends_on,omitempty"`
	Payload   map[string]any         `json:"payload,omitempty"`
	Config    *JobConfig             `json:"config,omitempty"`
	OnFailure string                 `json:"on_failure,omitempty"` // halt, skip, continue
	OnSuccess string                 `json:"on_success,omitempty"`
	Metadata  map[string]any         `json:"metadata,omitempty"`
	Queue     string                 `json:"queue,omitempty"`
	When      *StepCondition         `json:"when,omitempty"`
	FanOut    *FanOut                `json:"fan_out,omitempty"`
	Workflow  *CreateWorkflowRequest `json:"workflow,omitempty"`
	// SleepSecs makes the step a sleep of 1 to MaxSleepSecs seconds; it runs no job and completes
	// with {"slept_until": <instant>}.
	SleepSecs int `json:"sleep_secs,omitempty"`
	// SleepUntil makes the step a sleep until that instant (it completes at once when that has
	// passed).
	SleepUntil *time.Time `json:"sleep_until,omitempty"`
	// WaitForEvent makes the step a wait for an event (Client.SendEvent); it completes with the
	// event's payload.
	WaitForEvent *WaitForEvent `json:"wait_for_event,omitempty"`
	// TimeoutSecs is a wait's time-out (1 to MaxSleepSecs; 0 for none): the step then fails with
	// event_timeout.
	TimeoutSecs int `json:"timeout_secs,omitempty"`
}

// SleepStep declares a step that runs no job and completes secs seconds (1 to MaxSleepSecs) after
// it starts, after the steps named in dependsOn.
func SleepStep(name string, secs int, dependsOn ...string) WorkflowStep {
	return WorkflowStep{Name: name, SleepSecs: secs, DependsOn: dependsOn}
}

// SleepUntilStep declares a step that runs no job and completes at until (at once when that has
// passed when it starts), after the steps named in dependsOn.
func SleepUntilStep(name string, until time.Time, dependsOn ...string) WorkflowStep {
	return WorkflowStep{Name: name, SleepUntil: &until, DependsOn: dependsOn}
}

// WaitForEventStep declares a step that runs no job and waits for an event with key (which may
// hold {{context.path}} placeholders), after the steps named in dependsOn. It completes with the
// event's payload, also when the event was sent (and is still kept) before the step started. With
// timeoutSecs > 0 it fails with event_timeout when no event came in time; 0 waits for ever.
func WaitForEventStep(name, key string, timeoutSecs int, dependsOn ...string) WorkflowStep {
	return WorkflowStep{Name: name, WaitForEvent: &WaitForEvent{Key: key}, TimeoutSecs: timeoutSecs, DependsOn: dependsOn}
}

// CreateWorkflowRequest is the body of POST /api/v1/workflows.
type CreateWorkflowRequest struct {
	Name        string         `json:"name"`
	Steps       []WorkflowStep `json:"steps"`
	Context     map[string]any `json:"context,omitempty"`
	Metadata    map[string]any `json:"metadata,omitempty"`
	TimeoutSecs int            `json:"timeout_secs,omitempty"`
}

// CreateWorkflowResponse answers a workflow creation.
type CreateWorkflowResponse struct {
	WorkflowID string `json:"workflow_id"`
}

// Workflow is a workflow as the server reports it.
type Workflow struct {
	ID               string         `json:"id"`
	Name             string         `json:"name"`
	Status           string         `json:"status"`
	Steps            []WorkflowStep `json:"steps"`
	CreatedAt        time.Time      `json:"created_at"`
	Context          map[string]any `json:"context"`
	Metadata         map[string]any `json:"metadata"`
	RetryCount       int            `json:"retry_count"`
	StartedAt        *time.Time     `json:"started_at,omitempty"`
	CompletedAt      *time.Time     `json:"completed_at,omitempty"`
	TenantID         *string        `json:"tenant_id,omitempty"`
	TimeoutSecs      *int           `json:"timeout_secs,omitempty"`
	DeadlineAt       *time.Time     `json:"deadline_at,omitempty"`
	ErrorMessage     *string        `json:"error_message,omitempty"`
	ParentWorkflowID *string        `json:"parent_workflow_id,omitempty"`
	ParentStepName   *string        `json:"parent_step_name,omitempty"`
}

// ListWorkflowsResponse answers GET /api/v1/workflows.
type ListWorkflowsResponse struct {
	Workflows []Workflow `json:"workflows"`
	Page
}

// FanOutProgress counts a fan-out step's children.
type FanOutProgress struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

// WorkflowStepState is the live state of one step.
type WorkflowStepState struct {
	Name            string          `json:"name"`
	Status          string          `json:"status"`
	JobID           *string         `json:"job_id,omitempty"`
	Error           *string         `json:"error,omitempty"`
	StartedAt       *time.Time      `json:"started_at,omitempty"`
	CompletedAt     *time.Time      `json:"completed_at,omitempty"`
	ChildWorkflowID *string         `json:"child_workflow_id,omitempty"`
	FanOut          *FanOutProgress `json:"fan_out,omitempty"`
	// WakeAt is set while a sleep, or a wait with a time-out, runs: when it wakes.
	WakeAt *time.Time `json:"wake_at,omitempty"`
	// EventKey is set while a wait-for-event step waits: the key, its placeholders resolved.
	EventKey *string `json:"event_key,omitempty"`
}

// WorkflowStepsResponse answers GET /api/v1/workflows/{id}/steps.
type WorkflowStepsResponse struct {
	Steps []WorkflowStepState `json:"steps"`
}

// WorkflowDiagram answers GET /api/v1/workflows/{id}/diagram.
type WorkflowDiagram struct {
	Format  string `json:"format"`
	Diagram string `json:"diagram"`
}

// WorkflowEvent is one event of a workflow's SSE stream.
type WorkflowEvent struct {
	WorkflowID   string              `json:"workflow_id"`
	Status       string              `json:"status"`
	Steps        []WorkflowStepState `json:"steps"`
	ErrorMessage *string             `json:"error_message,omitempty"`
}

// --- events ---

// PostEventRequest is the body of POST /api/v1/events: Key 1 to 256 bytes; a nil Payload is left
// out (the server reads {}).
type PostEventRequest struct {
	Key     string         `json:"key"`
	Payload map[string]any `json:"payload,omitempty"`
}

// PostEventResponse answers an event: Delivered is how many waiting steps it completed.
type PostEventResponse struct {
	EventID   string `json:"event_id"`
	Delivered int    `json:"delivered"`
}

// Event is a kept event: Delivered is how many waiting steps it completed when it arrived; it is
// kept until ExpiresAt for steps that start waiting later.
type Event struct {
	EventID   string         `json:"event_id"`
	Key       string         `json:"key"`
	Payload   map[string]any `json:"payload"`
	Delivered int            `json:"delivered"`
	CreatedAt time.Time      `json:"created_at"`
	ExpiresAt time.Time      `json:"expires_at"`
}

// ListEventsParams filters GET /api/v1/events: only Key's events, at most Limit (1 to 100, the
// server's default 50). Zero values are not sent.
type ListEventsParams struct {
	Key   string
	Limit int
}

// ListEventsResponse answers GET /api/v1/events, newest first.
type ListEventsResponse struct {
	Events []Event `json:"events"`
}

// --- worker keys ---

// CreateWorkerKeyRequest is the body of POST /api/v1/worker-keys: no Queues is every queue, no
// ExpiresAt never expires.
type CreateWorkerKeyRequest struct {
	Name      string     `json:"name"`
	Queues    []string   `json:"queues,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// WorkerKey is a worker key as the server lists it (never its token).
type WorkerKey struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Queues    []string   `json:"queues"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// CreateWorkerKeyResponse answers a mint: the key and its token, shown in this answer only.
type CreateWorkerKeyResponse struct {
	WorkerKey
	Token string `json:"token"`
}

// ListWorkerKeysResponse answers GET /api/v1/worker-keys.
type ListWorkerKeysResponse struct {
	WorkerKeys []WorkerKey `json:"worker_keys"`
}

// --- limits (flow control) ---

// LimitRate is at most Count starts in any PerSecs seconds.
type LimitRate struct {
	Count   int     `json:"count"`
	PerSecs float64 `json:"per_secs"`
}

// PutLimitRequest is the body of PUT /api/v1/limits/{key}: the key's whole policy, at least one of
// the two.
type PutLimitRequest struct {
	Concurrency *int       `json:"concurrency,omitempty"`
	Rate        *LimitRate `json:"rate,omitempty"`
}

// LimitPolicy is a key's policy with its live figures: Running, the jobs holding a slot now (for a
// wildcard key "prefix*", summed over the keys it governs); RateAvailable, how many more may start
// now (an exact key with a rate only).
type LimitPolicy struct {
	Key           string     `json:"key"`
	Concurrency   *int       `json:"concurrency"`
	Rate          *LimitRate `json:"rate"`
	Running       int        `json:"running"`
	CreatedAt     time.Time  `json:"created_at"`
	UpdatedAt     time.Time  `json:"updated_at"`
	RateAvailable *int       `json:"rate_available,omitempty"`
}

// ListLimitsResponse answers GET /api/v1/limits.
type ListLimitsResponse struct {
	Limits []LimitPolicy `json:"limits"`
}

// --- cron ---

// CreateCronRequest is the body of POST /api/v1/cron: a schedule of a task (TaskName, with
// optional Payload, Queue and Config) or, an extension, of a workflow (Workflow). Exactly one of
// TaskName and Workflow: the server answers 400 to both or neither.
type CreateCronRequest struct {
	Name     string         `json:"name"`
	CronExpr string         `json:"cron_expr"`
	Payload  map[string]any `json:"payload,omitempty"`
	Queue    string         `json:"queue,omitempty"`
	Config   *JobConfig     `json:"config,omitempty"`
	// Timezone (an extension) is the IANA time zone, e.g. "Europe/Berlin" (1 to 64 characters),
	// whose wall clock CronExpr is read on; left out when empty, and the server reads it in UTC.
	// An unknown name is a 400.
	Timezone string `json:"timezone,omitempty"`
	// TaskName is the task each occurrence enqueues; left out when empty (a workflow schedule).
	TaskName string `json:"task_name,omitempty"`
	// Workflow (an extension) is the workflow each occurrence starts, a definition as
	// CreateWorkflow takes it, named "<Name>@<occurrence>" (nightly@2026-12-04T02:00:00Z); its
	// steps carry their own payload, queue and config, so the schedule has none. Left out when nil
	// (a task schedule).
	Workflow *CreateWorkflowRequest `json:"workflow,omitempty"`
}

// CreateCronResponse answers a cron creation.
type CreateCronResponse struct {
	CronID string `json:"cron_id"`
}

// CronSchedule is a cron schedule as the server reports it: TaskName for a task schedule,
// Workflow for one that starts a workflow; the other is nil.
type CronSchedule struct {
	ID             string         `json:"id"`
	Name           string         `json:"name"`
	CronExpr       string         `json:"cron_expr"`
	Enabled        bool           `json:"enabled"`
	NextRunAt      time.Time      `json:"next_run_at"`
	CreatedAt      time.Time      `json:"created_at"`
	Payload        map[string]any `json:"payload,omitempty"`
	QueueName      *string        `json:"queue_name,omitempty"`
	Config         *JobConfig     `json:"config,omitempty"`
	LastEnqueuedAt *time.Time     `json:"last_enqueued_at,omitempty"`
	TenantID       *string        `json:"tenant_id,omitempty"`
	// Timezone is the IANA time zone the expression is read in (an extension); nil for a schedule
	// read in UTC.
	Timezone *string `json:"timezone,omitempty"`
	// NextRunLocal is NextRunAt on the schedule's zone's clock (09:00 at +02:00, say); nil when the
	// schedule has no time zone. Its Location is a fixed zone with the offset the server sent (or
	// time.Local when that has the same offset then), not the IANA zone: for the zone itself use
	// time.LoadLocation(*Timezone).
	NextRunLocal *time.Time `json:"next_run_local,omitempty"`
	// TaskName is the task each occurrence enqueues; nil for a schedule that starts a workflow.
	TaskName *string `json:"task_name,omitempty"`
	// Workflow is the workflow each occurrence starts (an extension), as the server stored it:
	// each step's defaults filled in (DependsOn [], Payload {}, OnFailure "halt", OnSuccess
	// "continue", Metadata {}), and Context and Metadata {} when none was given. Nil for a task
	// schedule.
	Workflow *CreateWorkflowRequest `json:"workflow,omitempty"`
}

// ListCronsResponse answers GET /api/v1/cron.
type ListCronsResponse struct {
	Crons []CronSchedule `json:"crons"`
	Page
}

// --- visibility (an extension: docs/visibility.md) ---

// Bounds of the visibility extension, as the server checks them.
const (
	MaxProgressMessage = 1024      // characters of a progress message
	MaxLogLinesPerCall = 100       // lines of one POST /api/v1/jobs/{id}/logs
	MaxLogCallBytes    = 64 * 1024 // bytes (UTF-8) of the messages of one call, and of one message
	MaxLogLevel        = 16        // letters of a log level
	MaxWorkerIDBytes   = 128       // a worker id: visible ASCII, no space
	MaxWorkerTasks     = 256       // task names in WorkerInfo.Tasks
	MaxWorkerText      = 255       // characters of WorkerInfo's Hostname, SDK and Version
	MaxLogPage         = 1000      // lines of one GET /api/v1/jobs/{id}/logs
)

// Log levels the SDK names (the server takes any 1 to 16 letters).
const (
	LevelDebug   = "debug"
	LevelInfo    = "info"
	LevelWarning = "warning"
	LevelError   = "error"
)

// Progress is how far a running job got: Percent from 0 to 100 and an optional Message (at most
// MaxProgressMessage characters; left out when empty). The server adds UpdatedAt, the time of the
// report, when it shows the job; a heartbeat leaves it nil.
type Progress struct {
	Percent   float64    `json:"percent"`
	Message   string     `json:"message,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// LogLineRequest is one line of POST /api/v1/jobs/{id}/logs. Level (1 to MaxLogLevel letters) and
// TS (default: when the server stores the line) are left out when zero.
type LogLineRequest struct {
	Message string     `json:"message"`
	Level   string     `json:"level,omitempty"`
	TS      *time.Time `json:"ts,omitempty"`
}

// PostJobLogsRequest is the body of POST /api/v1/jobs/{id}/logs: at most MaxLogLinesPerCall lines
// whose messages take at most MaxLogCallBytes in all.
type PostJobLogsRequest struct {
	LeaseToken string           `json:"lease_token"`
	Lines      []LogLineRequest `json:"lines"`
}

// PostJobLogsResponse answers a log post: the lines stored, this call's lines dropped past the
// job's cap (--job-log-max-bytes), and the job's last seq.
type PostJobLogsResponse struct {
	Stored  int   `json:"stored"`
	Dropped int   `json:"dropped"`
	LastSeq int64 `json:"last_seq"`
}

// LogLine is a stored log line: Seq counts from 1 per job across its attempts; Attempt is the
// attempt that was running. Level is empty when the line was posted without one.
type LogLine struct {
	Seq     int64     `json:"seq"`
	Attempt int       `json:"attempt"`
	TS      time.Time `json:"ts"`
	Level   string    `json:"level,omitempty"`
	Message string    `json:"message"`
}

// JobLogsParams pages GET /api/v1/jobs/{id}/logs: the lines after seq After (0: from the first),
// at most Limit of them (the server's default 100 when 0; at most MaxLogPage).
type JobLogsParams struct {
	After int64
	Limit int
}

// JobLogsResponse is a page of a job's log lines, oldest first. LastSeq is the job's newest line,
// Dropped counts the job's lines refused past its cap, and while HasMore ask again with After set to
// the page's last Seq.
type JobLogsResponse struct {
	Lines   []LogLine `json:"lines"`
	LastSeq int64     `json:"last_seq"`
	Dropped int64     `json:"dropped"`
	HasMore bool      `json:"has_more"`
}

// Attempt outcomes (Attempt.Outcome).
const (
	AttemptRunning      = "running"       // the current attempt: it has not ended
	AttemptCompleted    = "completed"     // the worker's complete
	AttemptRetry        = "retry"         // a retryable failure with budget left: the job was scheduled again
	AttemptFailed       = "failed"        // a failure that failed the job (dead-lettered)
	AttemptLeaseExpired = "lease_expired" // the janitor reclaimed the expired lease
	AttemptCancelled    = "cancelled"     // the job was cancelled while it ran
	AttemptReleased     = "released"      // given back unfinished: no retry spent
)

// Attempt is one lease of a job: its number (the job's delivery_count when it began), how it
// ended, the worker that held it (nil when the lease named none), and its times (EndedAt and
// DurationSecs nil while it runs).
type Attempt struct {
	Attempt      int        `json:"attempt"`
	Outcome      string     `json:"outcome"`
	WorkerID     *string    `json:"worker_id,omitempty"`
	StartedAt    *time.Time `json:"started_at,omitempty"`
	EndedAt      *time.Time `json:"ended_at,omitempty"`
	DurationSecs *float64   `json:"duration_secs,omitempty"`
	ErrorMessage *string    `json:"error_message,omitempty"`
}

// JobAttemptsResponse answers GET /api/v1/jobs/{id}/attempts: every attempt, in order.
type JobAttemptsResponse struct {
	Attempts []Attempt `json:"attempts"`
}

// WorkerInfo is what a worker says of itself on lease; every field is optional (left out when
// empty). The Worker loop sends {Hostname, SDK "go", Version, Tasks: its handlers' names, sorted}.
type WorkerInfo struct {
	Hostname string   `json:"hostname,omitempty"`
	SDK      string   `json:"sdk,omitempty"`
	Version  string   `json:"version,omitempty"`
	Tasks    []string `json:"tasks,omitempty"`
}

// RegisteredWorker is a worker as a tenant sees it (GET /api/v1/workers): the queues it leased the
// tenant's jobs from, how many of them it holds now, when it was first and last seen, whether it is
// live (seen within the last 2 minutes) and what it said of itself (nil when nothing).
type RegisteredWorker struct {
	WorkerID    string      `json:"worker_id"`
	Queues      []string    `json:"queues"`
	InFlight    int         `json:"in_flight"`
	FirstSeenAt time.Time   `json:"first_seen_at"`
	LastSeenAt  time.Time   `json:"last_seen_at"`
	Live        bool        `json:"live"`
	Info        *WorkerInfo `json:"info,omitempty"`
}

// ListWorkersResponse answers GET /api/v1/workers, most recently seen first.
type ListWorkersResponse struct {
	Workers []RegisteredWorker `json:"workers"`
}
