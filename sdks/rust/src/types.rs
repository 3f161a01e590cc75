//! Wire types: every request and response body of the QueueFlow API (shared/wire.py).
//!
//! Requests leave absent optional fields out (the server rejects unknown fields and treats absent
//! ones as defaults). Timestamps are kept as the RFC 3339 strings the server sends.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON object.
pub type Object = Map<String, Value>;

// --- configuration ------------------------------------------------------------------------------

/// What a create does when its unique key is held: see [`UniquePolicy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UniqueConflict {
    /// Answer the holder's id and insert nothing (the server's default).
    Skip,
    /// Give a holder that has not started this job's payload and schedule (answering its id), or
    /// enqueue this job when the holder has started.
    Replace,
}

/// A job's `config.unique` (an extension): within `window_secs` (1 to 31536000) of the job
/// accepted with `key` (1 to 255 bytes, no control characters; per tenant), another create with the
/// key inserts nothing, as `on_conflict` says ([`UniqueConflict::Skip`] when left out).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UniquePolicy {
    pub key: String,
    pub window_secs: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_conflict: Option<UniqueConflict>,
}

impl UniquePolicy {
    /// `key` held for `window_secs` seconds, `on_conflict` left to the server's default (skip).
    pub fn new(key: impl Into<String>, window_secs: i64) -> Self {
        UniquePolicy { key: key.into(), window_secs, on_conflict: None }
    }

    /// Sets what a create does when the key is held.
    pub fn on_conflict(mut self, on_conflict: UniqueConflict) -> Self {
        self.on_conflict = Some(on_conflict);
        self
    }
}

/// Per-job execution policy on create; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobConfigRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i32>,
    /// Timeout in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// `fixed`, `linear` or `exponential`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_delay_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_max_delay_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_factor: Option<f64>,
    /// Flow-control keys (up to 4): the job starts only when each key's policy has room. Absent
    /// when the job has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Vec<String>>,
    /// Unique over a window (jobs created directly only: a workflow step's or a cron schedule's
    /// config does not take one). Absent when the job has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<UniquePolicy>,
}

/// The stored execution policy (stored field names), as used by workflow steps and cron schedules.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_backoff: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_delay_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_max_delay_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_factor: Option<f64>,
    /// Flow-control keys (up to 4): the job starts only when each key's policy has room. Absent
    /// when the job has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Vec<String>>,
}

// --- jobs ---------------------------------------------------------------------------------------

/// `POST /api/v1/jobs` (and each item of a batch).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateJobRequest {
    pub task_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Object>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<JobConfigRequest>,
    /// RFC 3339 time before which the job is not leased.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    /// Per-item key (batches); for a single job prefer the `Idempotency-Key` header
    /// ([`crate::Client::create_job_with_key`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
}

impl CreateJobRequest {
    /// A job of `task_name` with no payload and the default configuration.
    pub fn new(task_name: impl Into<String>) -> Self {
        CreateJobRequest { task_name: task_name.into(), ..Default::default() }
    }

    /// Sets the payload.
    pub fn payload(mut self, payload: Object) -> Self {
        self.payload = Some(payload);
        self
    }

    /// Sets the configuration.
    pub fn config(mut self, config: JobConfigRequest) -> Self {
        self.config = Some(config);
        self
    }

    /// Routes the job to `queue` (keeping any other configuration).
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.config.get_or_insert_with(Default::default).queue = Some(queue.into());
        self
    }

    /// Makes the job unique over a window (keeping any other configuration).
    pub fn unique(mut self, policy: UniquePolicy) -> Self {
        self.config.get_or_insert_with(Default::default).unique = Some(policy);
        self
    }
}

/// `POST /api/v1/jobs/batch`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateBatchJobsRequest {
    pub jobs: Vec<CreateJobRequest>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateJobResponse {
    pub job_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateBatchJobsResponse {
    pub job_ids: Vec<String>,
    pub count: i64,
}

/// A job as the server reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub queue_name: String,
    pub task_name: String,
    #[serde(default)]
    pub payload: Object,
    #[serde(default)]
    pub config: Object,
    /// `pending`, `running`, `completed`, `failed`, `retrying` or `cancelled`.
    pub status: String,
    pub retry_count: i64,
    pub delivery_count: i64,
    pub created_at: String,
    pub scheduled_at: String,
    #[serde(default)]
    pub metadata: Object,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_step_id: Option<String>,
    /// How far the job got, as its worker last reported it (an extension: absent when no
    /// progress was reported, and from an upstream server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

impl Job {
    /// The job's `config.unique` decoded (the server sends all three fields): `Ok(None)` when the
    /// job has no unique policy, an error when `config.unique` is not a policy.
    pub fn unique(&self) -> serde_json::Result<Option<UniquePolicy>> {
        match self.config.get("unique") {
            None | Some(Value::Null) => Ok(None),
            Some(raw) => UniquePolicy::deserialize(raw).map(Some),
        }
    }
}

/// Query parameters shared by the list routes. Each route reads the ones it knows and ignores
/// the rest: `status` (jobs, workflows), `queue` and `task_name` (jobs, dead letters),
/// `replayed` (dead letters).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListParams {
    /// 1 to 100 (the server clamps).
    pub limit: Option<i64>,
    pub offset: Option<i64>,
    /// `created_at ASC` for oldest first; newest first otherwise.
    pub order_by: Option<String>,
    pub include_total: Option<bool>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
    /// RFC 3339.
    pub created_after: Option<String>,
    /// RFC 3339.
    pub created_before: Option<String>,
    pub status: Option<String>,
    pub queue: Option<String>,
    pub task_name: Option<String>,
    pub replayed: Option<bool>,
}

impl ListParams {
    /// The query string pairs for the parameters that are set.
    pub fn to_query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        let mut put = |k: &'static str, v: Option<String>| {
            if let Some(v) = v {
                q.push((k, v));
            }
        };
        put("limit", self.limit.map(|v| v.to_string()));
        put("offset", self.offset.map(|v| v.to_string()));
        put("order_by", self.order_by.clone());
        put("include_total", self.include_total.map(|v| v.to_string()));
        put("cursor", self.cursor.clone());
        put("created_after", self.created_after.clone());
        put("created_before", self.created_before.clone());
        put("status", self.status.clone());
        put("queue", self.queue.clone());
        put("task_name", self.task_name.clone());
        put("replayed", self.replayed.map(|v| v.to_string()));
        q
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListJobsResponse {
    pub jobs: Vec<Job>,
    pub limit: i64,
    pub offset: i64,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /api/v1/jobs/cancel`: cancel this tenant's matching jobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CancelJobsRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    /// `pending`, `retrying` or `running`; all three when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelJobsResponse {
    pub cancelled: i64,
}

// --- worker protocol ----------------------------------------------------------------------------

/// `POST /api/v1/queues/{queue}/lease`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaseJobsRequest {
    /// 1 to 100 (server default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_jobs: Option<u32>,
    /// 1 to 3600 (server default 30).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u32>,
    /// Long-poll: 0 to 30 (server default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_secs: Option<u32>,
    /// The worker's name (an extension): 1 to 128 visible ASCII characters, no space. Recorded
    /// on the jobs the call leases (their attempts' worker) and in the worker registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// What the worker says of itself (an extension; with `worker_id`). Left out, the server
    /// keeps what the worker reported last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerInfo>,
}

/// One leased job and its lease token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeasedJob {
    pub job: Job,
    pub lease_token: String,
    /// The W3C `traceparent` the job was created in (an extension, absent when it has none): the
    /// worker's span continues this trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that came with `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseJobsResponse {
    pub jobs: Vec<LeasedJob>,
}

/// `POST /api/v1/jobs/{id}/heartbeat`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatRequest {
    pub lease_token: String,
    /// 1 to 3600.
    pub extend_secs: u32,
    /// How far the job got (an extension): shown on the job until its next claim. Left out, the
    /// last report stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressReport>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeartbeatResponse {
    /// The job's current status; anything but `running` means: stop, report nothing.
    pub status: String,
}

/// `POST /api/v1/jobs/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteJobRequest {
    pub lease_token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Object>,
}

/// The most completions one `POST /api/v1/jobs/complete` call takes.
pub const MAX_COMPLETIONS: usize = 100;

/// One job of a batch acknowledgement (`POST /api/v1/jobs/complete`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionItem {
    pub id: String,
    pub lease_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Object>,
}

/// `POST /api/v1/jobs/complete`: 1 to [`MAX_COMPLETIONS`] completions in one call (an extension
/// of the worker protocol; a server without it answers 404 and its `/openapi.json` omits it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompleteJobsRequest {
    pub jobs: Vec<CompletionItem>,
}

/// How one item of a batch acknowledgement went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionOutcome {
    /// Recorded (`status` 204).
    Completed,
    /// The lease is no longer held (`status` 409).
    Conflict,
    /// No such job (`status` 404).
    NotFound,
    /// An outcome this SDK does not know; go by `status`.
    #[serde(other)]
    Other,
}

/// The answer for one item, in request order: `status` is what the per-job route
/// (`POST /api/v1/jobs/{id}/complete`) would have answered, `error` its error message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionAnswer {
    pub id: String,
    pub outcome: CompletionOutcome,
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompleteJobsResponse {
    pub results: Vec<CompletionAnswer>,
}

/// `POST /api/v1/jobs/{id}/fail`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailJobRequest {
    pub lease_token: String,
    pub error: String,
    /// `false` dead-letters at once; the server's default is `true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}

// --- visibility: progress, job logs, attempts, workers (docs/visibility.md) ---------------------

/// The most characters of a progress message.
pub const MAX_PROGRESS_MESSAGE: usize = 1024;
/// The most lines one `POST /api/v1/jobs/{id}/logs` call takes.
pub const MAX_LOG_LINES: usize = 100;
/// The most bytes (UTF-8) of messages one `POST /api/v1/jobs/{id}/logs` call takes, in all.
pub const MAX_LOG_CALL_BYTES: usize = 64 * 1024;
/// The most characters of a log level (letters only).
pub const MAX_LOG_LEVEL: usize = 16;
/// The most characters of a worker id (visible ASCII, no space).
pub const MAX_WORKER_ID: usize = 128;
/// The most task names a worker's [`WorkerInfo`] may list.
pub const MAX_WORKER_TASKS: usize = 256;
/// The most characters of a [`WorkerInfo`]'s `hostname`, `sdk` and `version`.
pub const MAX_WORKER_TEXT: usize = 255;

/// A heartbeat's `progress`: `percent` 0 to 100, `message` at most [`MAX_PROGRESS_MESSAGE`]
/// characters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgressReport {
    pub percent: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A job's progress as the server shows it: the last report and when it arrived.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    pub percent: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// RFC 3339: the server's time of the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
}

/// One line a worker posts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLineRequest {
    pub message: String,
    /// 1 to [`MAX_LOG_LEVEL`] letters (`info`, `warning`, `error`, ...); the server stores none
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// RFC 3339: when it was logged; the server's time of storing it when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<String>,
}

/// `POST /api/v1/jobs/{id}/logs` (worker routes): 1 to [`MAX_LOG_LINES`] lines whose messages take
/// at most [`MAX_LOG_CALL_BYTES`] bytes in all, with the lease token of the job's latest lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostJobLogsRequest {
    pub lease_token: String,
    pub lines: Vec<LogLineRequest>,
}

/// The answer to a log post: lines stored, lines of this call dropped past the job's cap, and the
/// job's newest `seq`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostJobLogsResponse {
    pub stored: i64,
    pub dropped: i64,
    pub last_seq: i64,
}

/// A stored line: `seq` counts from 1 per job across its attempts; `attempt` is the attempt that
/// was running.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    pub seq: i64,
    pub attempt: i64,
    /// RFC 3339.
    pub ts: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
}

/// The query of `GET /api/v1/jobs/{id}/logs`: lines after `after` (a `seq`; default 0, from the
/// first), at most `limit` (1 to 1000, the server's default 100).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobLogsParams {
    pub after: Option<i64>,
    pub limit: Option<i64>,
}

impl JobLogsParams {
    /// The query string pairs for the parameters that are set.
    pub fn to_query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(after) = self.after {
            q.push(("after", after.to_string()));
        }
        if let Some(limit) = self.limit {
            q.push(("limit", limit.to_string()));
        }
        q
    }
}

/// A page of a job's lines, oldest first. `dropped` counts the job's lines refused past its cap;
/// while `has_more`, ask again with `after` set to the page's last `seq`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobLogsResponse {
    pub lines: Vec<LogLine>,
    pub last_seq: i64,
    #[serde(default)]
    pub dropped: i64,
    #[serde(default)]
    pub has_more: bool,
}

/// How an attempt (one lease of a job) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The current attempt: it has not ended.
    Running,
    Completed,
    /// A retryable failure with retry budget left: the job was scheduled again.
    Retry,
    /// A failure that failed the job (non-retryable, or the budget spent).
    Failed,
    /// The janitor reclaimed the expired lease.
    LeaseExpired,
    /// The job was cancelled while it ran.
    Cancelled,
    /// The worker gave the job back unfinished (no retry spent).
    Released,
    /// An outcome this SDK does not know.
    #[serde(other)]
    Other,
}

/// One attempt of a job: its number (the job's `delivery_count` when it began), its worker when
/// the lease named one, when its lease began and ended, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobAttempt {
    pub attempt: i64,
    pub outcome: AttemptOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_secs: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

/// `GET /api/v1/jobs/{id}/attempts`: every attempt, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobAttemptsResponse {
    pub attempts: Vec<JobAttempt>,
}

/// What a worker says of itself on lease; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `python`, `typescript`, `go`, `rust`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The task names it handles (at most [`MAX_WORKER_TASKS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<String>>,
}

/// A worker as a tenant sees it: the queues it leased the tenant's jobs from, how many of them it
/// holds, when it was first and last seen, whether it is live (seen within the last 2 minutes) and
/// what it reported of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisteredWorker {
    pub worker_id: String,
    #[serde(default)]
    pub queues: Vec<String>,
    #[serde(default)]
    pub in_flight: i64,
    pub first_seen_at: String,
    pub last_seen_at: String,
    pub live: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<WorkerInfo>,
}

/// `GET /api/v1/workers`: most recently seen first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListWorkersResponse {
    pub workers: Vec<RegisteredWorker>,
}

// --- dead letters -------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub id: i64,
    pub job_id: String,
    /// e.g. `max_attempts_exceeded`, `non_retryable`.
    pub reason: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListDeadLettersResponse {
    pub dead_letters: Vec<DeadLetter>,
    pub limit: i64,
    pub offset: i64,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayDeadLetterResponse {
    pub job_id: String,
}

/// `POST /api/v1/dlq/replay`: replay matching dead letters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayDeadLettersRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayedDeadLetter {
    pub dead_letter_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayDeadLettersResponse {
    pub replayed: i64,
    pub results: Vec<ReplayedDeadLetter>,
}

// --- system -------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    pub jobs_created: i64,
    pub jobs_completed: i64,
    pub jobs_failed: i64,
    pub jobs_retried: i64,
    pub jobs_dead_lettered: i64,
    pub workflows_created: i64,
    pub workflows_completed: i64,
    pub workflows_failed: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TasksResponse {
    pub tasks: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhoAmIResponse {
    pub tenant: String,
    /// `read_write` or `read_only`.
    pub access: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthStatus {
    pub status: String,
    pub timestamp: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadyStatus {
    pub status: String,
}

// --- workflows ----------------------------------------------------------------------------------

/// A step condition: a leaf (`path` compared with `value` by `op`) or a combination (`all`,
/// `any`, `not`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepCondition {
    /// `eq`, `ne`, `gt`, `gte`, `lt`, `lte`, `exists`, `contains` or `in`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<Vec<StepCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub any: Option<Vec<StepCondition>>,
    #[serde(rename = "not", default, skip_serializing_if = "Option::is_none")]
    pub not_: Option<Box<StepCondition>>,
}

/// Run a step once per item of an array in the workflow context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FanOut {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<i64>,
}

/// The longest `sleep_secs` and `timeout_secs` (a year).
pub const MAX_SLEEP_SECS: i64 = 31_536_000;

/// The longest event key, in bytes (a wait step's key template too).
pub const MAX_EVENT_KEY_BYTES: usize = 256;

/// A wait-for-event step's event: `key` (1 to 256 bytes) may hold `{{context.path}}` placeholders,
/// which the server resolves from the workflow context when the step starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitForEvent {
    pub key: String,
}

/// One step of a workflow DAG: a task (`task_name`), a sub-workflow (`workflow`), or, as
/// extensions, a sleep (`sleep_secs` or `sleep_until`) or a wait for an event (`wait_for_event`,
/// with an optional `timeout_secs`), which [`WorkflowStep::sleep`], [`WorkflowStep::sleep_until`]
/// and [`WorkflowStep::wait_for_event`] declare.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkflowStep {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<JobConfig>,
    /// `halt`, `skip` or `continue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<String>,
    /// `continue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_success: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<StepCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOut>,
    /// A child workflow run as this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<Box<CreateWorkflowRequest>>,
    /// A sleep of 1 to [`MAX_SLEEP_SECS`] seconds: the step runs no job and completes with
    /// `{"slept_until": ...}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep_secs: Option<i64>,
    /// A sleep until this RFC 3339 instant (it completes at once when that has passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sleep_until: Option<String>,
    /// A wait for an event ([`crate::Client::send_event`]): the step completes with its payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_event: Option<WaitForEvent>,
    /// A wait's time-out in seconds (1 to [`MAX_SLEEP_SECS`]): the step then fails with
    /// `event_timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<i64>,
}

impl WorkflowStep {
    /// A step `name` running `task_name`.
    pub fn new(name: impl Into<String>, task_name: impl Into<String>) -> Self {
        WorkflowStep { name: name.into(), task_name: Some(task_name.into()), ..Default::default() }
    }

    /// Sets the steps this one waits for.
    pub fn depends_on<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.depends_on = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Routes the step's job to `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// A step `name` that runs no job and completes `secs` seconds (1 to [`MAX_SLEEP_SECS`]) after
    /// it starts.
    pub fn sleep(name: impl Into<String>, secs: i64) -> Self {
        WorkflowStep { name: name.into(), sleep_secs: Some(secs), ..Default::default() }
    }

    /// A step `name` that runs no job and completes at `instant` (RFC 3339, with an offset), at
    /// once when that has passed when it starts.
    pub fn sleep_until(name: impl Into<String>, instant: impl Into<String>) -> Self {
        WorkflowStep { name: name.into(), sleep_until: Some(instant.into()), ..Default::default() }
    }

    /// A step `name` that runs no job and waits for an event with `key` (which may hold
    /// `{{context.path}}` placeholders); it completes with the event's payload, also when the event
    /// was sent (and is still kept) before the step started. No time-out unless
    /// [`timeout_secs`](Self::timeout_secs) sets one.
    pub fn wait_for_event(name: impl Into<String>, key: impl Into<String>) -> Self {
        WorkflowStep { name: name.into(), wait_for_event: Some(WaitForEvent { key: key.into() }), ..Default::default() }
    }

    /// A wait's time-out (1 to [`MAX_SLEEP_SECS`] seconds): the step then fails with `event_timeout`.
    pub fn timeout_secs(mut self, secs: i64) -> Self {
        self.timeout_secs = Some(secs);
        self
    }
}

/// `POST /api/v1/workflows`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateWorkflowRequest {
    pub name: String,
    pub steps: Vec<WorkflowStep>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateWorkflowResponse {
    pub workflow_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    pub id: String,
    pub name: String,
    /// `created`, `running`, `completed`, `failed`, `partially_failed` or `cancelled`.
    pub status: String,
    pub steps: Vec<WorkflowStep>,
    pub created_at: String,
    #[serde(default)]
    pub context: Object,
    #[serde(default)]
    pub metadata: Object,
    pub retry_count: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_workflow_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_step_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListWorkflowsResponse {
    pub workflows: Vec<Workflow>,
    pub limit: i64,
    pub offset: i64,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FanOutProgress {
    pub total: i64,
    pub completed: i64,
    pub failed: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowStepState {
    pub name: String,
    /// `pending`, `running`, `completed`, `failed`, `cancelled` or `skipped`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_workflow_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOutProgress>,
    /// While a sleep, or a wait with a time-out, runs: when it wakes (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<String>,
    /// While a wait-for-event step waits: the key it waits for, its placeholders resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_key: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowStepStatesResponse {
    pub steps: Vec<WorkflowStepState>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowDiagramResponse {
    /// `mermaid`.
    pub format: String,
    pub diagram: String,
}

/// One `status` event of a workflow's SSE stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkflowEvent {
    pub workflow_id: String,
    pub status: String,
    pub steps: Vec<WorkflowStepState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

// --- events (what wait-for-event steps wait for) ------------------------------------------------

/// `POST /api/v1/events`: `key` 1 to 256 bytes; `payload` absent is `{}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PostEventRequest {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Object>,
}

impl PostEventRequest {
    /// An event with `key` and no payload.
    pub fn new(key: impl Into<String>) -> Self {
        PostEventRequest { key: key.into(), payload: None }
    }

    /// Sets the payload: the result of every step it completes.
    pub fn payload(mut self, payload: Object) -> Self {
        self.payload = Some(payload);
        self
    }
}

/// The answer to an event: `delivered` is how many waiting steps it completed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostEventResponse {
    pub event_id: String,
    pub delivered: i64,
}

/// A kept event: `delivered` is how many waiting steps it completed when it arrived; it is kept
/// until `expires_at` for steps that start waiting later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub event_id: String,
    pub key: String,
    #[serde(default)]
    pub payload: Object,
    pub delivered: i64,
    pub created_at: String,
    pub expires_at: String,
}

/// The query of `GET /api/v1/events`: only `key`'s events, at most `limit` (1 to 100, the server's
/// default 50).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListEventsParams {
    pub key: Option<String>,
    pub limit: Option<i64>,
}

impl ListEventsParams {
    /// The query string pairs for the parameters that are set.
    pub fn to_query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        if let Some(key) = &self.key {
            q.push(("key", key.clone()));
        }
        if let Some(limit) = self.limit {
            q.push(("limit", limit.to_string()));
        }
        q
    }
}

/// `GET /api/v1/events`: newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListEventsResponse {
    pub events: Vec<Event>,
}

// --- queues -------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    pub queue: String,
    pub pending: i64,
    pub scheduled: i64,
    pub running: i64,
    pub paused: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_pending_age_secs: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuesResponse {
    pub queues: Vec<QueueStats>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueControlResponse {
    pub queue: String,
    pub paused: bool,
    pub pending: i64,
    pub running: i64,
}

// --- worker keys --------------------------------------------------------------------------------

/// `POST /api/v1/worker-keys`: `queues` None is every queue, `expires_at` (RFC 3339, in the
/// future) None never expires.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateWorkerKeyRequest {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queues: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// A worker key as the server lists it (never its token).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerKey {
    pub id: String,
    pub name: String,
    pub queues: Option<Vec<String>>,
    pub created_at: String,
    pub expires_at: Option<String>,
}

/// The answer to a mint: the key and its token, shown in this answer only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateWorkerKeyResponse {
    #[serde(flatten)]
    pub key: WorkerKey,
    pub token: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListWorkerKeysResponse {
    pub worker_keys: Vec<WorkerKey>,
}

// --- limits (flow control) ---------------------------------------------------------------------

/// At most `count` starts in any `per_secs` seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitRate {
    pub count: i64,
    pub per_secs: f64,
}

/// `PUT /api/v1/limits/{key}`: the key's whole policy (it replaces what was there), at least one of
/// the two.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PutLimitRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<LimitRate>,
}

/// A key's policy with its live figures: `running`, the jobs holding a slot now (for a wildcard key
/// `prefix*`, summed over the keys it governs); `rate_available`, how many more may start now (an
/// exact key with a rate only).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LimitPolicy {
    pub key: String,
    pub concurrency: Option<i64>,
    pub rate: Option<LimitRate>,
    pub running: i64,
    pub created_at: String,
    pub updated_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_available: Option<i64>,
}

/// `GET /api/v1/limits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListLimitsResponse {
    pub limits: Vec<LimitPolicy>,
}

// --- cron ---------------------------------------------------------------------------------------

/// `POST /api/v1/cron`: a schedule of a task (`task_name`, with optional `payload`, `queue` and
/// `config`) or, an extension, of a workflow (`workflow`). Exactly one of `task_name` and
/// `workflow`: the server answers 400 to both or neither. [`CreateCronRequest::for_task`] and
/// [`CreateCronRequest::for_workflow`] build either.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateCronRequest {
    pub name: String,
    /// Five-field cron expression, e.g. `*/5 * * * *` (or six and seven fields with a leading
    /// seconds field).
    pub cron_expr: String,
    /// The task each occurrence enqueues; None for a workflow schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    /// An extension: the workflow each occurrence starts, a definition as
    /// [`crate::Client::create_workflow`] takes it, named `<name>@<occurrence>`
    /// (`nightly@2026-12-04T02:00:00Z`). Its steps carry their own payload, queue and config, so
    /// the schedule has none. None for a task schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<CreateWorkflowRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<JobConfig>,
    /// An extension: the IANA time zone (e.g. `Europe/Berlin`, 1 to 64 characters) whose wall
    /// clock the expression is read on; None leaves it out and the server reads it in UTC. An
    /// unknown name is a 400.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}

impl CreateCronRequest {
    /// A schedule `name` that enqueues a job of `task_name` at each occurrence of `cron_expr`.
    pub fn for_task(name: impl Into<String>, cron_expr: impl Into<String>, task_name: impl Into<String>) -> Self {
        CreateCronRequest {
            name: name.into(),
            cron_expr: cron_expr.into(),
            task_name: Some(task_name.into()),
            ..Default::default()
        }
    }

    /// A schedule `name` that starts `workflow` at each occurrence of `cron_expr` (an extension).
    pub fn for_workflow(
        name: impl Into<String>,
        cron_expr: impl Into<String>,
        workflow: CreateWorkflowRequest,
    ) -> Self {
        CreateCronRequest {
            name: name.into(),
            cron_expr: cron_expr.into(),
            workflow: Some(workflow),
            ..Default::default()
        }
    }

    /// Reads the expression on the wall clock of the IANA zone `timezone` (an extension).
    pub fn timezone(mut self, timezone: impl Into<String>) -> Self {
        self.timezone = Some(timezone.into());
        self
    }

    /// A task schedule's payload, given to every job it enqueues.
    pub fn payload(mut self, payload: Object) -> Self {
        self.payload = Some(payload);
        self
    }

    /// Routes a task schedule's jobs to `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateCronResponse {
    pub cron_id: String,
}

/// A schedule as the server shows it: `task_name` for a task schedule, `workflow` for one that
/// starts a workflow (an extension); the other is None.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronSchedule {
    pub id: String,
    pub name: String,
    pub cron_expr: String,
    /// The task each occurrence enqueues; None for a schedule that starts a workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_name: Option<String>,
    /// The workflow each occurrence starts (an extension), as the server stored it: each step's
    /// defaults filled in (`depends_on` `[]`, `payload` `{}`, `on_failure` `halt`, ...), and the
    /// workflow's `context` and `metadata` (`{}` when none was given). None for a task schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<CreateWorkflowRequest>,
    pub enabled: bool,
    pub next_run_at: String,
    pub created_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Object>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<JobConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_enqueued_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The IANA time zone the expression is read in (an extension); None for a schedule read in
    /// UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// `next_run_at` on the schedule's zone's clock, RFC 3339 with the zone's offset
    /// (`2026-03-30T09:00:00+02:00`); None when the schedule has no time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_local: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListCronsResponse {
    pub crons: Vec<CronSchedule>,
    pub limit: i64,
    pub offset: i64,
    pub has_more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}
