//! The typed REST client: one async method per route.

use std::time::Duration;

use reqwest::{Method, RequestBuilder};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::sse::EventStream;
use crate::types::*;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const BATCH_COMPLETE_PATH: &str = "/api/v1/jobs/complete";

/// A QueueFlow API client. Cheap to clone (the connection pool is shared).
///
/// Tenant routes use the tenant token; the worker-protocol routes (lease, heartbeat, complete,
/// fail) use the worker token, which defaults to the tenant token.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
    worker_token: String,
    timeout: Duration,
}

/// Builds a [`Client`] with a worker token and a request timeout.
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base_url: String,
    token: String,
    worker_token: Option<String>,
    timeout: Duration,
}

impl ClientBuilder {
    /// The credential for the worker routes (the server's `--worker-token`).
    pub fn worker_token(mut self, token: impl Into<String>) -> Self {
        self.worker_token = Some(token.into());
        self
    }

    /// The timeout of one request (default 30 s). A lease's long-poll gets `wait_secs` on top;
    /// SSE streams have none.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn build(self) -> Client {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Client {
            http,
            base: self.base_url.trim_end_matches('/').to_string(),
            worker_token: self.worker_token.unwrap_or_else(|| self.token.clone()),
            token: self.token,
            timeout: self.timeout,
        }
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved characters).
pub(crate) fn seg(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

enum Auth {
    Tenant,
    Worker,
    None,
}

impl Client {
    /// A client for the server at `base_url` (e.g. `http://localhost:8000`) with a tenant API key.
    pub fn new(base_url: impl Into<String>, token: impl Into<String>) -> Client {
        Client::builder(base_url, token).build()
    }

    /// A builder, to set the worker token or the timeout.
    pub fn builder(base_url: impl Into<String>, token: impl Into<String>) -> ClientBuilder {
        ClientBuilder { base_url: base_url.into(), token: token.into(), worker_token: None, timeout: DEFAULT_TIMEOUT }
    }

    /// The server's base URL, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn request(&self, method: Method, path: &str, auth: Auth) -> RequestBuilder {
        let rb = self.http.request(method, format!("{}{}", self.base, path));
        match auth {
            Auth::Tenant => rb.bearer_auth(&self.token),
            Auth::Worker => rb.bearer_auth(&self.worker_token),
            Auth::None => rb,
        }
    }

    async fn send(&self, rb: RequestBuilder) -> Result<reqwest::Response> {
        let response = rb.send().await?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.bytes().await.unwrap_or_default();
        Err(Error::from_response(status.as_u16(), &body))
    }

    async fn json<T: DeserializeOwned>(&self, rb: RequestBuilder) -> Result<T> {
        let response = self.send(rb.timeout(self.timeout)).await?;
        let status = response.status().as_u16();
        let body = response.bytes().await?;
        serde_json::from_slice(&body).map_err(|e| Error::Decode { status, message: e.to_string() })
    }

    async fn empty(&self, rb: RequestBuilder) -> Result<()> {
        let response = self.send(rb.timeout(self.timeout)).await?;
        // Drain the (empty) body so the connection returns to the pool.
        let _ = response.bytes().await?;
        Ok(())
    }

    fn get(&self, path: &str) -> RequestBuilder {
        self.request(Method::GET, path, Auth::Tenant)
    }

    fn post(&self, path: &str) -> RequestBuilder {
        self.request(Method::POST, path, Auth::Tenant)
    }

    fn post_json<B: Serialize + ?Sized>(&self, path: &str, body: &B) -> RequestBuilder {
        self.post(path).json(body)
    }

    // --- jobs -----------------------------------------------------------------------------------

    /// `POST /api/v1/jobs`: enqueue a job.
    pub async fn create_job(&self, req: &CreateJobRequest) -> Result<CreateJobResponse> {
        self.json(self.post_json("/api/v1/jobs", req)).await
    }

    /// `POST /api/v1/jobs` with an `Idempotency-Key` header: creating again with the same key
    /// answers the first job's id.
    pub async fn create_job_with_key(
        &self,
        req: &CreateJobRequest,
        idempotency_key: &str,
    ) -> Result<CreateJobResponse> {
        self.json(self.post_json("/api/v1/jobs", req).header("Idempotency-Key", idempotency_key)).await
    }

    /// `POST /api/v1/jobs/batch`: enqueue many jobs at once.
    pub async fn create_jobs_batch(&self, req: &CreateBatchJobsRequest) -> Result<CreateBatchJobsResponse> {
        self.json(self.post_json("/api/v1/jobs/batch", req)).await
    }

    /// `GET /api/v1/jobs` with `limit`, `offset`, `order_by`, `include_total`, `cursor`,
    /// `created_after`, `created_before`, `status`, `queue`, `task_name`.
    pub async fn list_jobs(&self, params: &ListParams) -> Result<ListJobsResponse> {
        self.json(self.get("/api/v1/jobs").query(&params.to_query())).await
    }

    /// `GET /api/v1/jobs/{id}`.
    pub async fn get_job(&self, id: &str) -> Result<Job> {
        self.json(self.get(&format!("/api/v1/jobs/{}", seg(id)))).await
    }

    /// `POST /api/v1/jobs/{id}/cancel`: 409 when the job already finished.
    pub async fn cancel_job(&self, id: &str) -> Result<()> {
        self.empty(self.post(&format!("/api/v1/jobs/{}/cancel", seg(id)))).await
    }

    /// `POST /api/v1/jobs/cancel`: cancel this tenant's matching jobs.
    pub async fn cancel_jobs(&self, req: &CancelJobsRequest) -> Result<CancelJobsResponse> {
        self.json(self.post_json("/api/v1/jobs/cancel", req)).await
    }

    /// `GET /api/v1/jobs/{id}/events`: a `status` event carrying the whole job on every status
    /// change, until a terminal status.
    pub async fn job_events(&self, id: &str) -> Result<EventStream<Job>> {
        let rb = self.get(&format!("/api/v1/jobs/{}/events", seg(id))).header("Accept", "text/event-stream");
        Ok(EventStream::new(self.send(rb).await?))
    }

    // --- worker protocol ------------------------------------------------------------------------

    /// `POST /api/v1/queues/{queue}/lease` (worker token): claim up to `max_jobs`, waiting up to
    /// `wait_secs` for one to arrive.
    pub async fn lease(&self, queue: &str, req: &LeaseJobsRequest) -> Result<LeaseJobsResponse> {
        let rb = self.request(Method::POST, &format!("/api/v1/queues/{}/lease", seg(queue)), Auth::Worker).json(req);
        let wait = Duration::from_secs(u64::from(req.wait_secs.unwrap_or(0)));
        let response = self.send(rb.timeout(self.timeout + wait)).await?;
        let status = response.status().as_u16();
        let body = response.bytes().await?;
        serde_json::from_slice(&body).map_err(|e| Error::Decode { status, message: e.to_string() })
    }

    /// `POST /api/v1/jobs/{id}/heartbeat` (worker token): extend the lease, and (an extension)
    /// report the job's `progress`; the answer is the job's status (anything but `running` means
    /// stop). 409 when the lease was lost.
    pub async fn heartbeat(&self, id: &str, req: &HeartbeatRequest) -> Result<HeartbeatResponse> {
        self.json(self.request(Method::POST, &format!("/api/v1/jobs/{}/heartbeat", seg(id)), Auth::Worker).json(req))
            .await
    }

    /// `POST /api/v1/jobs/{id}/complete` (worker token): record success (idempotent).
    pub async fn complete(&self, id: &str, req: &CompleteJobRequest) -> Result<()> {
        self.empty(self.request(Method::POST, &format!("/api/v1/jobs/{}/complete", seg(id)), Auth::Worker).json(req))
            .await
    }

    /// `POST /api/v1/jobs/complete` (worker token): acknowledge 1 to [`MAX_COMPLETIONS`] jobs in
    /// one call. Each item is answered as the per-job [`complete`](Self::complete) would be
    /// (`status` 204, 409 or 404), in request order. An extension: a server without it answers
    /// 404 (see [`offers_batch_complete`](Self::offers_batch_complete)). An empty or oversized
    /// batch is refused with [`Error::InvalidArgument`] before any call.
    pub async fn complete_many(&self, req: &CompleteJobsRequest) -> Result<CompleteJobsResponse> {
        if req.jobs.is_empty() || req.jobs.len() > MAX_COMPLETIONS {
            return Err(Error::InvalidArgument(format!(
                "a batch acknowledgement takes 1 to {MAX_COMPLETIONS} jobs, not {}",
                req.jobs.len()
            )));
        }
        self.json(self.request(Method::POST, BATCH_COMPLETE_PATH, Auth::Worker).json(req)).await
    }

    /// `POST /api/v1/jobs/{id}/fail` (worker token): record a failure; `retryable: false`
    /// dead-letters at once.
    pub async fn fail(&self, id: &str, req: &FailJobRequest) -> Result<()> {
        self.empty(self.request(Method::POST, &format!("/api/v1/jobs/{}/fail", seg(id)), Auth::Worker).json(req)).await
    }

    /// `POST /api/v1/jobs/{id}/logs` (worker token, an extension): append log lines to the job
    /// this lease holds. Each line gets the job's next `seq` and the running attempt. 409 when
    /// the token is not the job's latest lease, 404 for an unknown job (or a server without the
    /// route). Refused with [`Error::InvalidArgument`] before any call: no lines, more than
    /// [`MAX_LOG_LINES`], or messages of more than [`MAX_LOG_CALL_BYTES`] bytes in all.
    pub async fn post_job_logs(&self, id: &str, req: &PostJobLogsRequest) -> Result<PostJobLogsResponse> {
        if req.lines.is_empty() || req.lines.len() > MAX_LOG_LINES {
            return Err(Error::InvalidArgument(format!(
                "a log post takes 1 to {MAX_LOG_LINES} lines, not {}",
                req.lines.len()
            )));
        }
        let bytes: usize = req.lines.iter().map(|line| line.message.len()).sum();
        if bytes > MAX_LOG_CALL_BYTES {
            return Err(Error::InvalidArgument(format!(
                "a log post's messages take at most {MAX_LOG_CALL_BYTES} bytes, not {bytes}"
            )));
        }
        self.json(self.request(Method::POST, &format!("/api/v1/jobs/{}/logs", seg(id)), Auth::Worker).json(req)).await
    }

    // --- visibility (tenant routes) ---------------------------------------------------------------

    /// `GET /api/v1/jobs/{id}/logs` (an extension): the job's log lines after `params.after`,
    /// oldest first; page on with `after` = the last `seq` while `has_more`.
    pub async fn job_logs(&self, id: &str, params: &JobLogsParams) -> Result<JobLogsResponse> {
        self.json(self.get(&format!("/api/v1/jobs/{}/logs", seg(id))).query(&params.to_query())).await
    }

    /// `GET /api/v1/jobs/{id}/attempts` (an extension): every attempt (lease) of the job, in order.
    pub async fn job_attempts(&self, id: &str) -> Result<JobAttemptsResponse> {
        self.json(self.get(&format!("/api/v1/jobs/{}/attempts", seg(id)))).await
    }

    /// `GET /api/v1/workers` (an extension): the workers that leased this tenant's jobs, most
    /// recently seen first.
    pub async fn list_workers(&self) -> Result<ListWorkersResponse> {
        self.json(self.get("/api/v1/workers")).await
    }

    // --- workflows ------------------------------------------------------------------------------

    /// `POST /api/v1/workflows`: create a workflow (a DAG of steps); 400 for a cycle.
    pub async fn create_workflow(&self, req: &CreateWorkflowRequest) -> Result<CreateWorkflowResponse> {
        self.json(self.post_json("/api/v1/workflows", req)).await
    }

    /// `GET /api/v1/workflows` (`status` filter and the shared list parameters).
    pub async fn list_workflows(&self, params: &ListParams) -> Result<ListWorkflowsResponse> {
        self.json(self.get("/api/v1/workflows").query(&params.to_query())).await
    }

    /// `GET /api/v1/workflows/{id}`.
    pub async fn get_workflow(&self, id: &str) -> Result<Workflow> {
        self.json(self.get(&format!("/api/v1/workflows/{}", seg(id)))).await
    }

    /// `GET /api/v1/workflows/{id}/steps`: live state of every step, in declaration order.
    pub async fn workflow_steps(&self, id: &str) -> Result<WorkflowStepStatesResponse> {
        self.json(self.get(&format!("/api/v1/workflows/{}/steps", seg(id)))).await
    }

    /// `GET /api/v1/workflows/{id}/diagram`: a Mermaid diagram of the DAG.
    pub async fn workflow_diagram(&self, id: &str) -> Result<WorkflowDiagramResponse> {
        self.json(self.get(&format!("/api/v1/workflows/{}/diagram", seg(id)))).await
    }

    /// `POST /api/v1/workflows/{id}/cancel`.
    pub async fn cancel_workflow(&self, id: &str) -> Result<()> {
        self.empty(self.post(&format!("/api/v1/workflows/{}/cancel", seg(id)))).await
    }

    /// `POST /api/v1/workflows/{id}/retry`: re-run what did not complete.
    pub async fn retry_workflow(&self, id: &str) -> Result<()> {
        self.empty(self.post(&format!("/api/v1/workflows/{}/retry", seg(id)))).await
    }

    /// `GET /api/v1/workflows/{id}/events`: a `status` event on every workflow or step change.
    pub async fn workflow_events(&self, id: &str) -> Result<EventStream<WorkflowEvent>> {
        let rb = self.get(&format!("/api/v1/workflows/{}/events", seg(id))).header("Accept", "text/event-stream");
        Ok(EventStream::new(self.send(rb).await?))
    }

    // --- events ---------------------------------------------------------------------------------

    /// `POST /api/v1/events`: every step of the tenant waiting for the key completes with the
    /// payload (`delivered` says how many); the event is kept for steps that start waiting later.
    /// Each call is a new event.
    pub async fn send_event(&self, req: &PostEventRequest) -> Result<PostEventResponse> {
        self.json(self.post_json("/api/v1/events", req)).await
    }

    /// `GET /api/v1/events`: the tenant's kept events, newest first (`key`, `limit`).
    pub async fn list_events(&self, params: &ListEventsParams) -> Result<ListEventsResponse> {
        self.json(self.get("/api/v1/events").query(&params.to_query())).await
    }

    // --- worker keys ----------------------------------------------------------------------------

    /// `POST /api/v1/worker-keys`: the answer's `token` is shown only here; it works as a
    /// `worker_token` for this tenant's jobs, on the key's queues only.
    pub async fn create_worker_key(&self, req: &CreateWorkerKeyRequest) -> Result<CreateWorkerKeyResponse> {
        self.json(self.post_json("/api/v1/worker-keys", req)).await
    }

    /// `GET /api/v1/worker-keys` (without tokens).
    pub async fn list_worker_keys(&self) -> Result<ListWorkerKeysResponse> {
        self.json(self.get("/api/v1/worker-keys")).await
    }

    /// `DELETE /api/v1/worker-keys/{id}`: revokes the key.
    pub async fn delete_worker_key(&self, id: &str) -> Result<()> {
        self.empty(self.request(Method::DELETE, &format!("/api/v1/worker-keys/{}", seg(id)), Auth::Tenant)).await
    }

    // --- limits (flow control) -------------------------------------------------------------------

    /// `PUT /api/v1/limits/{key}`: sets (replaces) the key's policy; a key ending in `*` is a
    /// wildcard for every key with that prefix that has no policy of its own.
    pub async fn put_limit(&self, key: &str, req: &PutLimitRequest) -> Result<LimitPolicy> {
        self.json(self.request(Method::PUT, &format!("/api/v1/limits/{}", seg(key)), Auth::Tenant).json(req)).await
    }

    /// `GET /api/v1/limits/{key}`: the key's own policy with its live figures (404 when it has none).
    pub async fn get_limit(&self, key: &str) -> Result<LimitPolicy> {
        self.json(self.get(&format!("/api/v1/limits/{}", seg(key)))).await
    }

    /// `GET /api/v1/limits`: every policy of the tenant, by key.
    pub async fn list_limits(&self) -> Result<ListLimitsResponse> {
        self.json(self.get("/api/v1/limits")).await
    }

    /// `DELETE /api/v1/limits/{key}` (404 when there was none).
    pub async fn delete_limit(&self, key: &str) -> Result<()> {
        self.empty(self.request(Method::DELETE, &format!("/api/v1/limits/{}", seg(key)), Auth::Tenant)).await
    }

    // --- cron -----------------------------------------------------------------------------------

    /// `POST /api/v1/cron`: a task schedule ([`CreateCronRequest::for_task`]) or, an extension, a
    /// workflow schedule ([`CreateCronRequest::for_workflow`]); 409 when the name is taken.
    pub async fn create_cron(&self, req: &CreateCronRequest) -> Result<CreateCronResponse> {
        self.json(self.post_json("/api/v1/cron", req)).await
    }

    /// `GET /api/v1/cron`.
    pub async fn list_crons(&self, params: &ListParams) -> Result<ListCronsResponse> {
        self.json(self.get("/api/v1/cron").query(&params.to_query())).await
    }

    /// `GET /api/v1/cron/{id}`.
    pub async fn get_cron(&self, id: &str) -> Result<CronSchedule> {
        self.json(self.get(&format!("/api/v1/cron/{}", seg(id)))).await
    }

    /// `DELETE /api/v1/cron/{id}` (jobs it enqueued stay).
    pub async fn delete_cron(&self, id: &str) -> Result<()> {
        self.empty(self.request(Method::DELETE, &format!("/api/v1/cron/{}", seg(id)), Auth::Tenant)).await
    }

    /// `POST /api/v1/cron/{id}/pause`.
    pub async fn pause_cron(&self, id: &str) -> Result<()> {
        self.empty(self.post(&format!("/api/v1/cron/{}/pause", seg(id)))).await
    }

    /// `POST /api/v1/cron/{id}/resume`: resumes from the next future occurrence.
    pub async fn resume_cron(&self, id: &str) -> Result<()> {
        self.empty(self.post(&format!("/api/v1/cron/{}/resume", seg(id)))).await
    }

    // --- dead letters ---------------------------------------------------------------------------

    /// `GET /api/v1/dlq` (`queue`, `task_name`, `replayed` and the shared list parameters).
    pub async fn list_dead_letters(&self, params: &ListParams) -> Result<ListDeadLettersResponse> {
        self.json(self.get("/api/v1/dlq").query(&params.to_query())).await
    }

    /// `GET /api/v1/dlq/{id}`.
    pub async fn get_dead_letter(&self, id: i64) -> Result<DeadLetter> {
        self.json(self.get(&format!("/api/v1/dlq/{id}"))).await
    }

    /// `POST /api/v1/dlq/{id}/replay`: replay as a fresh job; 409 if replayed before.
    pub async fn replay_dead_letter(&self, id: i64) -> Result<ReplayDeadLetterResponse> {
        self.json(self.post(&format!("/api/v1/dlq/{id}/replay"))).await
    }

    /// `POST /api/v1/dlq/replay`: replay matching dead letters.
    pub async fn replay_dead_letters(&self, req: &ReplayDeadLettersRequest) -> Result<ReplayDeadLettersResponse> {
        self.json(self.post_json("/api/v1/dlq/replay", req)).await
    }

    // --- queues and system ----------------------------------------------------------------------

    /// `GET /api/v1/queues`: the caller's backlog per queue.
    pub async fn list_queues(&self) -> Result<QueuesResponse> {
        self.json(self.get("/api/v1/queues")).await
    }

    /// `POST /api/v1/queues/{queue}/pause`: stop claims of the caller's jobs on `queue`.
    pub async fn pause_queue(&self, queue: &str) -> Result<QueueControlResponse> {
        self.json(self.post(&format!("/api/v1/queues/{}/pause", seg(queue)))).await
    }

    /// `POST /api/v1/queues/{queue}/resume`.
    pub async fn resume_queue(&self, queue: &str) -> Result<QueueControlResponse> {
        self.json(self.post(&format!("/api/v1/queues/{}/resume", seg(queue)))).await
    }

    /// `GET /api/v1/stats`: durable counts for the tenant.
    pub async fn stats(&self) -> Result<StatsSnapshot> {
        self.json(self.get("/api/v1/stats")).await
    }

    /// `GET /api/v1/tasks`: tasks that live in-process workers handle.
    pub async fn tasks(&self) -> Result<TasksResponse> {
        self.json(self.get("/api/v1/tasks")).await
    }

    /// `GET /api/v1/whoami`: the caller's tenant and access.
    pub async fn whoami(&self) -> Result<WhoAmIResponse> {
        self.json(self.get("/api/v1/whoami")).await
    }

    /// `GET /health` (no credential): liveness.
    pub async fn health(&self) -> Result<HealthStatus> {
        self.json(self.request(Method::GET, "/health", Auth::None)).await
    }

    /// `GET /openapi.json` (no credential): the server's OpenAPI document, as JSON.
    pub async fn openapi(&self) -> Result<serde_json::Value> {
        self.json(self.request(Method::GET, "/openapi.json", Auth::None)).await
    }

    /// Whether the server offers the batch acknowledgement ([`complete_many`](Self::complete_many)):
    /// reads `GET /openapi.json` and looks for `paths["/api/v1/jobs/complete"].post`. `Ok(false)`
    /// for any answer without it (a 404, a document of another shape); an `Err` only when no
    /// answer came: a transport error or a 5xx, after which the question is still open.
    pub async fn offers_batch_complete(&self) -> Result<bool> {
        match self.openapi().await {
            Ok(doc) => {
                Ok(doc.get("paths").and_then(|p| p.get(BATCH_COMPLETE_PATH)).and_then(|r| r.get("post")).is_some())
            }
            Err(err) if matches!(err, Error::Transport(_)) || err.status().is_some_and(|s| s >= 500) => Err(err),
            Err(_) => Ok(false),
        }
    }

    /// `GET /ready` (no credential): readiness; an [`Error::Api`] with 503 when not ready.
    pub async fn ready(&self) -> Result<ReadyStatus> {
        self.json(self.request(Method::GET, "/ready", Auth::None)).await
    }
}
