//! The remote worker runtime: lease with long-poll, run handlers concurrently, heartbeat every
//! held job at half the lease, obey the heartbeat's answer, report the outcome (successes in
//! batches through `POST /api/v1/jobs/complete` when the server offers it, one call per job
//! otherwise; failures one call per job). Beside the outcome: the worker's name on every lease,
//! each handler's progress and log lines (see [`crate::reports`]), and its OpenTelemetry span
//! (see [`crate::trace`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::context::FutureExt as _;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backoff::{backoff_delay, XorShift};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::reports::{JobReports, DEFAULT_LOG_LEVEL, REPORT_INTERVAL};
use crate::trace::HandlerSpan;
use crate::types::{
    CompleteJobRequest, CompleteJobsRequest, CompletionAnswer, CompletionItem, FailJobRequest, HeartbeatRequest, Job,
    LeaseJobsRequest, LeasedJob, WorkerInfo, MAX_COMPLETIONS, MAX_WORKER_ID, MAX_WORKER_TASKS, MAX_WORKER_TEXT,
};

/// The name this SDK gives itself in a lease's [`WorkerInfo`].
pub const SDK_NAME: &str = "rust";
/// This SDK's version, as a lease's [`WorkerInfo`] says it.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

// --- cancellation -------------------------------------------------------------------------------

/// A cancellation signal: cheap to clone, fired once with [`cancel`](Self::cancel), awaited with
/// [`cancelled`](Self::cancelled) by any number of tasks.
#[derive(Clone, Default)]
pub struct CancellationToken {
    inner: Arc<TokenInner>,
}

#[derive(Default)]
struct TokenInner {
    cancelled: AtomicBool,
    notify: Notify,
}

impl fmt::Debug for CancellationToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancellationToken").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl CancellationToken {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal (idempotent) and wakes every waiter.
    pub fn cancel(&self) {
        if !self.inner.cancelled.swap(true, Ordering::SeqCst) {
            self.inner.notify.notify_waiters();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the signal has fired (at once if it already has).
    pub async fn cancelled(&self) {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Registered before the check: a cancel between the check and the await still wakes us.
            notified.as_mut().enable();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

// --- handler types ------------------------------------------------------------------------------

/// What a handler fails with. Ordinary errors are retryable (the engine retries while budget
/// remains, then dead-letters); [`HandlerError::permanent`] dead-letters at once.
///
/// Any `std::error::Error` converts into a retryable `HandlerError`, so `?` works in handlers.
pub struct HandlerError {
    pub message: String,
    pub retryable: bool,
}

impl HandlerError {
    /// A retryable failure.
    pub fn new(message: impl Into<String>) -> Self {
        HandlerError { message: message.into(), retryable: true }
    }

    /// A retryable failure (same as [`HandlerError::new`]).
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::new(message)
    }

    /// A permanent failure: reported with `retryable: false`, the job is dead-lettered at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        HandlerError { message: message.into(), retryable: false }
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError").field("message", &self.message).field("retryable", &self.retryable).finish()
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for HandlerError {
    fn from(err: E) -> Self {
        HandlerError::new(err.to_string())
    }
}

/// What a handler returns: the job's result object, or a failure.
pub type HandlerResult = std::result::Result<Map<String, Value>, HandlerError>;

/// Per-job context handed to a handler: ids, the cancellation signal that fires when the server
/// says the job is no longer this worker's (cancelled, finished elsewhere, lease lost), and the
/// job's progress and log lines. After the signal fires the runtime reports nothing for the job;
/// a handler that ignores it is dropped after [`WorkerOptions::cancel_grace`].
///
/// [`progress`](Self::progress) and [`log`](Self::log) only record: the loop sends the latest
/// progress on the job's next heartbeat (early, at most once a second, when there is a newer
/// report) and posts the log lines at most once a second in batches; what is left when the
/// handler ends is sent before its outcome. A failure to send them is written to stderr and never
/// fails the job. Calls made after the handler ended (from a task it left behind) are ignored.
#[derive(Clone)]
pub struct JobContext {
    job_id: String,
    lease_token: String,
    cancel: CancellationToken,
    reports: Arc<JobReports>,
    otel: opentelemetry::Context,
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("job_id", &self.job_id)
            .field("cancelled", &self.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl JobContext {
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    pub fn lease_token(&self) -> &str {
        &self.lease_token
    }

    /// The cancellation token (clone it into sub-tasks).
    pub fn cancellation(&self) -> &CancellationToken {
        &self.cancel
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Resolves when the job is cancelled or the lease is lost.
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await
    }

    /// Reports how far the job got: `percent` 0 to 100, an optional `message` of at most 1,024
    /// characters (no NUL). The latest report is shown on the job (`Job::progress`). Out of range
    /// is an [`Error::InvalidArgument`] and records nothing.
    ///
    /// ```no_run
    /// # fn demo(ctx: &unofficial_queueflow_client::JobContext) -> Result<(), unofficial_queueflow_client::Error> {
    /// ctx.progress(42.5, Some("frames 425/1000"))?;
    /// ctx.progress(100.0, None)?;
    /// # Ok(()) }
    /// ```
    pub fn progress(&self, percent: f64, message: Option<&str>) -> Result<()> {
        self.reports.progress(percent, message)
    }

    /// Logs `message` at level `info` to the job's log (`GET /api/v1/jobs/{id}/logs`). A message
    /// longer than 64 KiB is cut to 64 KiB at a character boundary; a NUL becomes U+FFFD.
    pub fn log(&self, message: impl Into<String>) {
        // The default level is valid, so this cannot fail.
        let _ = self.reports.log(DEFAULT_LOG_LEVEL, message.into());
    }

    /// Logs `message` at `level`: 1 to 16 ASCII letters (`debug`, `info`, `warning`, `error`,
    /// any name), else an [`Error::InvalidArgument`] and nothing is recorded.
    pub fn log_at(&self, level: &str, message: impl Into<String>) -> Result<()> {
        self.reports.log(level, message.into())
    }

    /// The OpenTelemetry context the handler runs in: its active span is the handler's
    /// `process <queue>` span. It is current while the handler's future is polled; pass it to
    /// tasks the handler spawns (`FutureExt::with_context`) to keep their spans in the job's trace.
    pub fn otel_context(&self) -> &opentelemetry::Context {
        &self.otel
    }
}

type HandlerFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send + 'static>>;
type Handler = Arc<dyn Fn(Job, JobContext) -> HandlerFuture + Send + Sync + 'static>;

// --- options ------------------------------------------------------------------------------------

/// Worker loop settings.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Lease length, 1 to 3600 s (default 60). Heartbeats go every `lease_secs / 2`.
    pub lease_secs: u32,
    /// Long-poll wait of one lease call, 0 to 30 s (default 20).
    pub wait_secs: u32,
    /// Handlers running at once (default 1).
    pub concurrency: usize,
    /// Jobs asked for per lease, 1 to 100 (default: `concurrency`). Jobs beyond `concurrency`
    /// wait their turn, heartbeated all the while.
    pub batch_size: Option<usize>,
    /// How long a handler may run on after its cancellation fired before it is dropped
    /// (default 5 s).
    pub cancel_grace: Duration,
    /// The worker's name on every lease call, recorded on the jobs it leases (their attempts)
    /// and in the server's worker registry: 1 to 128 visible ASCII characters, no space.
    /// Default ([`None`]): [`default_worker_id`], `<hostname>:<process id>`.
    pub worker_id: Option<String>,
    /// How long a batch acknowledgement waits, while other held jobs are still running, for
    /// their successes to join the same call (default 2 ms; zero sends at once). A success with
    /// no other job running goes at once whatever this is.
    pub ack_linger: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            lease_secs: 60,
            wait_secs: 20,
            concurrency: 1,
            batch_size: None,
            cancel_grace: Duration::from_secs(5),
            worker_id: None,
            ack_linger: DEFAULT_ACK_LINGER,
        }
    }
}

/// The default worker id: `<hostname>:<process id>`, the host name's characters outside visible
/// ASCII replaced with `-` and cut so that the id keeps to 128 characters.
pub fn default_worker_id() -> String {
    let pid = format!(":{}", std::process::id());
    let host: String = hostname()
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '-' })
        .take(MAX_WORKER_ID.saturating_sub(pid.len()))
        .collect();
    format!("{host}{pid}")
}

/// This machine's host name (`localhost` when it cannot be read).
pub fn hostname() -> String {
    system_hostname().filter(|name| !name.is_empty()).unwrap_or_else(|| "localhost".to_string())
}

#[cfg(unix)]
fn system_hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for writes of `buf.len()` bytes, which is the length passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).trim().to_string())
}

#[cfg(not(unix))]
fn system_hostname() -> Option<String> {
    std::env::var("COMPUTERNAME").ok().map(|name| name.trim().to_string())
}

/// A worker id the server takes: 1 to [`MAX_WORKER_ID`] visible ASCII characters.
fn valid_worker_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_WORKER_ID && id.bytes().all(|b| b.is_ascii_graphic())
}

/// What the loop says of itself on its first lease calls: the host, this SDK and its version, and
/// the task names it handles (sorted; those the server could not take are left out).
fn worker_info<'a>(tasks: impl Iterator<Item = &'a String>) -> WorkerInfo {
    let mut tasks: Vec<String> =
        tasks.filter(|task| !task.is_empty() && task.chars().count() <= MAX_WORKER_TEXT).cloned().collect();
    tasks.sort();
    tasks.truncate(MAX_WORKER_TASKS);
    WorkerInfo {
        hostname: Some(hostname().chars().take(MAX_WORKER_TEXT).collect()),
        sdk: Some(SDK_NAME.to_string()),
        version: Some(SDK_VERSION.to_string()),
        tasks: Some(tasks),
    }
}

// --- the worker ---------------------------------------------------------------------------------

/// A worker for one queue. Register a handler per task name, then [`run`](Worker::run).
///
/// ```no_run
/// use unofficial_queueflow_client::{Client, Map, Worker, WorkerOptions};
/// # async fn demo() -> Result<(), unofficial_queueflow_client::Error> {
/// let client = Client::builder("http://localhost:8000", "tenant-key").worker_token("worker-token").build();
/// Worker::new(client, "images", WorkerOptions::default())
///     .register("resize-image", |job| async move { Ok(job.payload) })
///     .run()
///     .await
/// # }
/// ```
pub struct Worker {
    client: Client,
    queue: String,
    options: WorkerOptions,
    handlers: HashMap<String, Handler>,
    shutdown: CancellationToken,
}

impl Worker {
    pub fn new(client: Client, queue: impl Into<String>, options: WorkerOptions) -> Self {
        Worker { client, queue: queue.into(), options, handlers: HashMap::new(), shutdown: CancellationToken::new() }
    }

    /// Handles `task` with `handler(job)`.
    pub fn register<F, Fut>(self, task: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Job) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.register_with_context(task, move |job, _ctx| handler(job))
    }

    /// Handles `task` with `handler(job, ctx)`; `ctx` carries the cancellation signal.
    pub fn register_with_context<F, Fut>(mut self, task: impl Into<String>, handler: F) -> Self
    where
        F: Fn(Job, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |job, ctx| Box::pin(handler(job, ctx)) as HandlerFuture);
        self.handlers.insert(task.into(), handler);
        self
    }

    /// The token that stops the loop: once cancelled, `run` leases no more, lets the handlers
    /// it holds finish and report, then returns `Ok(())`. A lease call in flight is let finish
    /// (at most `wait_secs`) so no claimed job is stranded.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    fn check_options(&self) -> Result<()> {
        let o = &self.options;
        if !(1..=3600).contains(&o.lease_secs) {
            return Err(Error::InvalidArgument(format!("lease_secs must be 1 to 3600, not {}", o.lease_secs)));
        }
        if o.wait_secs > 30 {
            return Err(Error::InvalidArgument(format!("wait_secs must be 0 to 30, not {}", o.wait_secs)));
        }
        if o.concurrency == 0 {
            return Err(Error::InvalidArgument("concurrency must be at least 1".into()));
        }
        if let Some(b) = o.batch_size {
            if !(1..=100).contains(&b) {
                return Err(Error::InvalidArgument(format!("batch_size must be 1 to 100, not {b}")));
            }
        }
        if let Some(id) = &o.worker_id {
            if !valid_worker_id(id) {
                return Err(Error::InvalidArgument(format!(
                    "worker_id must be 1 to {MAX_WORKER_ID} visible ASCII characters (no space), not {id:?}"
                )));
            }
        }
        Ok(())
    }

    /// Runs the loop until the shutdown token fires (then `Ok(())`, after draining), or until a
    /// lease call fails for good: 401/403 (a wrong or tenant credential) and other 4xx answers
    /// end the loop with that error instead of retrying. Transport errors and 5xx back off with
    /// jitter (capped at 5 s) and the loop carries on.
    ///
    /// Every lease call names the worker (`worker_id`); until one has succeeded it also says what
    /// the worker is (`worker`: host name, SDK, version, task names).
    pub async fn run(self) -> Result<()> {
        self.check_options()?;
        let opts = self.options.clone();
        let worker_id = opts.worker_id.clone().unwrap_or_else(default_worker_id);
        let mut info = Some(worker_info(self.handlers.keys()));
        let queue: Arc<str> = Arc::from(self.queue.as_str());
        let batch = opts.batch_size.unwrap_or(opts.concurrency).clamp(1, 100);
        let max_held = batch.max(opts.concurrency);
        // Lease once there is room for half a batch (at least one job): with acknowledgements
        // answered a few at a time, leasing at every freed place made most leases a job or two.
        // A job whose outcome is decided and whose report is not answered yet takes no handler
        // slot, so leasing goes on while reports are sent, up to `max_held` such jobs.
        let room = (batch.min(opts.concurrency) / 2).max(1);
        let slots = Arc::new(Semaphore::new(opts.concurrency));
        let handlers = Arc::new(self.handlers);
        let mut held: JoinSet<()> = JoinSet::new();
        let mut rng = XorShift::from_entropy();
        let mut failures = 0u32;
        let mut outcome = Ok(());
        let (acks, buffered) = Acks::new();
        let unsettled = acks.unsettled.clone();
        let mut flusher = AbortOnDrop(tokio::spawn(flush_acks(
            self.client.clone(),
            acks.mode.clone(),
            acks.unsettled.clone(),
            buffered,
            opts.lease_secs,
            opts.ack_linger,
        )));

        loop {
            while held.try_join_next().is_some() {}
            if self.shutdown.is_cancelled() {
                break;
            }
            // Registered before the counts are read: a job decided in between still wakes us.
            let changed = unsettled.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let undecided = unsettled.running();
            let settling = held.len().saturating_sub(undecided);
            if undecided + room > opts.concurrency || settling >= max_held {
                tokio::select! {
                    _ = held.join_next() => {}
                    () = &mut changed => {}
                    _ = self.shutdown.cancelled() => {}
                }
                continue;
            }
            // Handlers finishing in parallel free the rest of the batch within moments: wait for
            // them (briefly) rather than lease a part of it now and the rest in a call of its own.
            unsettled
                .wait_until(Instant::now() + LEASE_LINGER, |undecided| {
                    undecided == 0 || opts.concurrency - undecided >= batch
                })
                .await;
            let undecided = unsettled.running();
            let want = batch.min(opts.concurrency.saturating_sub(undecided).max(batch.saturating_sub(undecided)));
            let request = LeaseJobsRequest {
                max_jobs: Some(want as u32),
                lease_secs: Some(opts.lease_secs),
                wait_secs: Some(opts.wait_secs),
                worker_id: Some(worker_id.clone()),
                worker: info.clone(),
            };
            match self.client.lease(&self.queue, &request).await {
                Ok(leased) => {
                    failures = 0;
                    info = None; // the server keeps what the worker said last
                    acks.unsettled.add(leased.jobs.len());
                    for item in leased.jobs {
                        let handler = handlers.get(&item.job.task_name).cloned();
                        let job = hold_job(
                            self.client.clone(),
                            item,
                            handler,
                            slots.clone(),
                            acks.clone(),
                            opts.clone(),
                            queue.clone(),
                        );
                        held.spawn(job);
                    }
                }
                Err(err) if err.is_transient() => {
                    failures = failures.saturating_add(1);
                    let delay = backoff_delay(failures, rng.next_f64());
                    eprintln!("queueflow worker [{}]: lease failed ({err}); retrying in {delay:?}", self.queue);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.shutdown.cancelled() => {}
                    }
                }
                Err(err) => {
                    eprintln!("queueflow worker [{}]: lease refused ({err}); stopping", self.queue);
                    outcome = Err(err);
                    break;
                }
            }
        }
        // Every held job waits for its acknowledgement's answer, so once they are all done the
        // buffer is empty; closing the channel then ends the flusher.
        while held.join_next().await.is_some() {}
        drop(acks);
        let _ = (&mut flusher.0).await;
        outcome
    }
}

/// Heartbeats a held job every `lease_secs / 2` until it is no longer this worker's, and returns
/// why. Each heartbeat carries the handler's progress when its latest report was not sent yet; a
/// newer report brings the next heartbeat forward, to at most one such per [`REPORT_INTERVAL`].
async fn heartbeat_until_lost(
    client: &Client,
    job_id: &str,
    lease_token: &str,
    lease_secs: u32,
    reports: &JobReports,
) -> String {
    let interval = Duration::from_millis(u64::from(lease_secs) * 500).max(Duration::from_millis(200));
    let mut due = Instant::now() + interval;
    let mut last_with_progress: Option<Instant> = None;
    loop {
        let wake = if reports.progress_untried() {
            due.min(last_with_progress.map_or_else(Instant::now, |at| at + REPORT_INTERVAL))
        } else {
            due
        };
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            () = reports.progress_reported() => continue,
        }
        let progress = reports.take_progress();
        if progress.is_some() {
            last_with_progress = Some(Instant::now());
        }
        let number = progress.as_ref().map(|(number, _)| *number);
        let request = HeartbeatRequest {
            lease_token: lease_token.to_string(),
            extend_secs: lease_secs,
            progress: progress.map(|(_, report)| report),
        };
        match client.heartbeat(job_id, &request).await {
            Ok(answer) if answer.status == "running" => {
                if let Some(number) = number {
                    reports.progress_sent(number);
                }
                due = Instant::now() + interval;
            }
            Ok(answer) => return format!("the job is {}", answer.status),
            Err(err) if matches!(err.status(), Some(404) | Some(409)) => return err.to_string(),
            Err(err) if number.is_some() && !err.is_transient() && !err.is_auth() => {
                eprintln!(
                    "queueflow worker: a heartbeat of job {job_id} with progress was refused ({err}); sending no more progress for it"
                );
                reports.refuse_progress();
                due = Instant::now();
            }
            Err(err) => {
                eprintln!("queueflow worker: heartbeat of job {job_id} failed ({err}); retrying");
                due = Instant::now() + (interval / 2).max(Duration::from_millis(100));
            }
        }
    }
}

/// One leased job, from the lease to the report: heartbeated from the start (while it waits for
/// a slot too), run when a slot frees (inside its span, its log lines posted as it goes), its
/// last log lines and progress sent when it ends, then its outcome; abandoned without a report
/// when the server takes it back.
async fn hold_job(
    client: Client,
    leased: LeasedJob,
    handler: Option<Handler>,
    slots: Arc<Semaphore>,
    acks: Acks,
    opts: WorkerOptions,
    queue: Arc<str>,
) {
    // Counted by the lease loop before this job could start; given back on every way out.
    let mut unsettled = UnsettledGuard(Some(acks.unsettled.clone()));
    let LeasedJob { job, lease_token, traceparent, tracestate } = leased;
    let job_id = job.id.clone();
    let reports = Arc::new(JobReports::new(&job_id));
    let heartbeat = heartbeat_until_lost(&client, &job_id, &lease_token, opts.lease_secs, &reports);
    tokio::pin!(heartbeat);

    let slot = tokio::select! {
        slot = slots.acquire_owned() => match slot {
            Ok(slot) => slot,
            Err(_) => return,
        },
        why = &mut heartbeat => {
            eprintln!("queueflow worker: job {job_id} dropped before it ran: {why}");
            return;
        }
    };

    let Some(handler) = handler else {
        drop(slot);
        let error = format!("no worker handler for task '{}'", job.task_name);
        report(
            &client,
            &job_id,
            Err(HandlerError::permanent(error)),
            &lease_token,
            opts.lease_secs,
            heartbeat.as_mut(),
        )
        .await;
        return;
    };

    let cancel = CancellationToken::new();
    let span = HandlerSpan::start(&queue, &job, traceparent.as_deref(), tracestate.as_deref());
    let otel = span.context().clone();
    let ctx = JobContext {
        job_id: job_id.clone(),
        lease_token: lease_token.clone(),
        cancel: cancel.clone(),
        reports: reports.clone(),
        otel: otel.clone(),
    };
    // The span is current while the handler runs: when it is called, and at every poll of its
    // future. The handler runs as its own task so that a panic is caught; the guard aborts it if
    // this future is dropped (the run() future dropped by its caller), so no handler outlives its
    // worker.
    let running = {
        let _current = otel.clone().attach();
        handler(job, ctx)
    };
    let mut task = AbortOnDrop(tokio::spawn(running.with_context(otel)));
    let pump = reports.pump_logs(&client, &lease_token);
    tokio::pin!(pump);
    let mut pumped = false;
    let finished = loop {
        tokio::select! {
            finished = &mut task.0 => break finished,
            why = &mut heartbeat => {
                cancel.cancel();
                reports.abandon();
                eprintln!("queueflow worker: job {job_id} taken back by the server ({why}); cancelling its handler, reporting nothing");
                // Past the grace period the guard aborts the handler.
                let ended = tokio::time::timeout(opts.cancel_grace, &mut task.0).await;
                span.end(match &ended {
                    Ok(Ok(Err(err))) => Some(err.message.as_str()),
                    _ => None,
                });
                return;
            }
            // The pump returns only once the handler ended; this keeps it posting meanwhile.
            () = &mut pump, if !pumped => pumped = true,
        }
    };
    drop(slot);
    let outcome = match finished {
        Ok(result) => result,
        Err(err) if err.is_panic() => Err(HandlerError::new(format!("handler panicked: {}", panic_message(err)))),
        Err(_) => {
            span.end(None);
            return;
        }
    };
    span.end(outcome.as_ref().err().map(|err| err.message.as_str()));

    // What the handler left: its log lines, then its progress, before its outcome.
    reports.end();
    let flushed = tokio::select! {
        () = async {
            if !pumped {
                (&mut pump).await;
            }
            reports.flush_progress(&client, &lease_token, opts.lease_secs).await;
        } => true,
        why = &mut heartbeat => {
            eprintln!("queueflow worker: job {job_id} taken back by the server ({why}) as it ended; reporting nothing");
            false
        }
    };
    if !flushed {
        return;
    }
    match outcome {
        Ok(result) => {
            acknowledge(
                &client,
                &acks,
                &job_id,
                result,
                &lease_token,
                opts.lease_secs,
                heartbeat.as_mut(),
                &mut unsettled,
            )
            .await
        }
        Err(err) => {
            unsettled.settle();
            report(&client, &job_id, Err(err), &lease_token, opts.lease_secs, heartbeat.as_mut()).await
        }
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn panic_message(err: tokio::task::JoinError) -> String {
    let payload = err.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// How long a report that gets no answer is sent again: `2 * lease_secs`, 20 s to 5 min.
fn report_budget(lease_secs: u32) -> Duration {
    Duration::from_secs(u64::from(lease_secs) * 2).clamp(Duration::from_secs(20), Duration::from_secs(300))
}

/// Sends the outcome. A report that the server answered is final: 2xx is done, and 409 (the
/// lease is gone), 404 or any other 4xx is logged and never re-sent. Only when the outcome of the
/// call is unknown (a transport error, or a 5xx) is the *same* report sent again, with jittered
/// backoff, for at most `2 * lease_secs` (20 s to 5 min): completing is idempotent and the lease
/// token guards both calls, so a duplicate cannot overwrite anything. The job stays heartbeated
/// meanwhile; if the server says it is no longer ours, the report is dropped.
async fn report<H>(
    client: &Client,
    job_id: &str,
    outcome: HandlerResult,
    lease_token: &str,
    lease_secs: u32,
    heartbeat: Pin<&mut H>,
) where
    H: Future<Output = String>,
{
    let (complete, fail) = match outcome {
        Ok(result) => (Some(CompleteJobRequest { lease_token: lease_token.to_string(), result: Some(result) }), None),
        Err(err) => (
            None,
            Some(FailJobRequest {
                lease_token: lease_token.to_string(),
                error: err.message,
                retryable: Some(err.retryable),
            }),
        ),
    };
    let budget = report_budget(lease_secs);
    let send = async {
        let started = tokio::time::Instant::now();
        let mut rng = XorShift::from_entropy();
        let mut attempt = 0u32;
        loop {
            let sent = match (&complete, &fail) {
                (Some(req), _) => client.complete(job_id, req).await,
                (None, Some(req)) => client.fail(job_id, req).await,
                (None, None) => return,
            };
            match sent {
                Ok(()) => return,
                Err(err) if err.is_transient() && started.elapsed() < budget => {
                    attempt = attempt.saturating_add(1);
                    let delay = backoff_delay(attempt, rng.next_f64());
                    eprintln!(
                        "queueflow worker: report of job {job_id} got no answer ({err}); sending it again in {delay:?}"
                    );
                    tokio::time::sleep(delay).await;
                }
                Err(err) => {
                    eprintln!("queueflow worker: reporting job {job_id} failed ({err}); not re-sent");
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = send => {}
        why = heartbeat => eprintln!("queueflow worker: job {job_id} is no longer held ({why}); its report is dropped"),
    }
}

// --- acknowledgements ---------------------------------------------------------------------------

/// Not known yet whether the server offers `POST /api/v1/jobs/complete` (nothing asked, or the
/// last probe got no answer).
const MODE_UNKNOWN: u8 = 0;
/// Successes go through the buffer and the batch route.
const MODE_BATCH: u8 = 1;
/// One call per job, for the rest of the loop's life.
const MODE_PER_JOB: u8 = 2;

/// What a held job hears back about its buffered success.
enum AckReply {
    /// The server answered (or gave no answer for longer than the report budget): nothing more
    /// is sent.
    Settled,
    /// To be sent with the per-job route, by the held job itself (the result comes back with it).
    PerJob(Map<String, Value>),
}

/// A success in the buffer, and the held job waiting for its answer.
struct Pending {
    item: CompletionItem,
    /// When it entered the buffer: the report budget counts from here.
    since: Instant,
    reply: oneshot::Sender<AckReply>,
}

impl Pending {
    fn settle(self) {
        let _ = self.reply.send(AckReply::Settled);
    }

    fn per_job(mut self) {
        let result = self.item.result.take().unwrap_or_default();
        let _ = self.reply.send(AckReply::PerJob(result));
    }
}

/// The held jobs' end of the acknowledgement buffer.
#[derive(Clone)]
struct Acks {
    mode: Arc<AtomicU8>,
    buffer: mpsc::UnboundedSender<Pending>,
    unsettled: Arc<Unsettled>,
}

impl Acks {
    fn new() -> (Acks, mpsc::UnboundedReceiver<Pending>) {
        let (buffer, buffered) = mpsc::unbounded_channel();
        let unsettled = Arc::new(Unsettled { count: AtomicUsize::new(0), changed: Notify::new() });
        (Acks { mode: Arc::new(AtomicU8::new(MODE_UNKNOWN)), buffer, unsettled }, buffered)
    }

    fn per_job(&self) -> bool {
        self.mode.load(Ordering::SeqCst) == MODE_PER_JOB
    }
}

/// How long a lease call waits, once half a batch of handler slots is free, for the handlers still
/// running to free the rest.
const LEASE_LINGER: Duration = Duration::from_millis(1);

/// How long a flush waits by default for the handlers still running to add their successes to
/// its call ([`WorkerOptions::ack_linger`]).
const DEFAULT_ACK_LINGER: Duration = Duration::from_millis(2);

/// The held jobs whose outcome is not decided yet (waiting for a slot or running): a flush waits
/// briefly while there are any, so that handlers finishing together share a call. Sent at once
/// (the flusher runs in parallel with the handlers on a multi-threaded runtime), the first success
/// of a lease went almost alone: 13 jobs a call on average against 25 leased, in the benchmark.
struct Unsettled {
    count: AtomicUsize,
    changed: Notify,
}

impl Unsettled {
    fn add(&self, n: usize) {
        self.count.fetch_add(n, Ordering::SeqCst);
    }

    fn running(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// Waits until `done(undecided)` holds, asked again each time a held job's outcome is
    /// decided, or until `deadline`, when `done` is asked once more (it may gather as it asks).
    async fn wait_until(&self, deadline: Instant, mut done: impl FnMut(usize) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable(); // registered before the check: no decision is missed
            if done(self.running()) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                done(self.running());
                return;
            }
        }
    }
}

/// One held job's place in [`Unsettled`], given up once (its outcome is decided, or it ends).
struct UnsettledGuard(Option<Arc<Unsettled>>);

impl UnsettledGuard {
    fn settle(&mut self) {
        if let Some(unsettled) = self.0.take() {
            unsettled.count.fetch_sub(1, Ordering::SeqCst);
            unsettled.changed.notify_waiters();
        }
    }
}

impl Drop for UnsettledGuard {
    fn drop(&mut self) {
        self.settle();
    }
}

/// How a held job's wait for its acknowledgement ended.
enum AckWait {
    Answered(std::result::Result<AckReply, oneshot::error::RecvError>),
    Lost(String),
}

/// Acknowledges a success: into the buffer that the flusher sends through the batch route, unless
/// the loop already knows the server lacks it; then (or when the flusher hands it back) with the
/// per-job route, exactly as [`report`] does. The job stays held, its heartbeat running, until
/// the answer comes; when the server takes the job back meanwhile, nothing more is sent for it.
#[allow(clippy::too_many_arguments)]
async fn acknowledge<H>(
    client: &Client,
    acks: &Acks,
    job_id: &str,
    result: Map<String, Value>,
    lease_token: &str,
    lease_secs: u32,
    mut heartbeat: Pin<&mut H>,
    unsettled: &mut UnsettledGuard,
) where
    H: Future<Output = String>,
{
    if acks.per_job() {
        unsettled.settle();
        return report(client, job_id, Ok(result), lease_token, lease_secs, heartbeat).await;
    }
    let (reply, answer) = oneshot::channel();
    let item = CompletionItem { id: job_id.to_string(), lease_token: lease_token.to_string(), result: Some(result) };
    let sent = acks.buffer.send(Pending { item, since: Instant::now(), reply });
    unsettled.settle(); // after the send: a flush that sees it settled finds its success buffered
    if let Err(mpsc::error::SendError(pending)) = sent {
        // The flusher lives as long as the loop, so this does not happen; should it, send it alone.
        let result = pending.item.result.unwrap_or_default();
        return report(client, job_id, Ok(result), lease_token, lease_secs, heartbeat).await;
    }
    let waited = tokio::select! {
        answer = answer => AckWait::Answered(answer),
        why = heartbeat.as_mut() => AckWait::Lost(why),
    };
    match waited {
        AckWait::Answered(Ok(AckReply::Settled)) => {}
        AckWait::Answered(Ok(AckReply::PerJob(result))) => {
            report(client, job_id, Ok(result), lease_token, lease_secs, heartbeat).await
        }
        AckWait::Answered(Err(_)) => {
            eprintln!("queueflow worker: the acknowledgement of job {job_id} was abandoned by the flusher")
        }
        AckWait::Lost(why) => {
            eprintln!("queueflow worker: job {job_id} is no longer held ({why}); its report is dropped")
        }
    }
}

/// The flusher: one flush at a time, each sending up to [`MAX_COMPLETIONS`] buffered successes in
/// one `POST /api/v1/jobs/complete`; what arrives while a call is in flight waits for the next
/// one. A flush waits up to `linger` while other held jobs are still running (see
/// [`Unsettled`]); a lone success, with none running, goes at once. Before the first flush it asks
/// `/openapi.json` whether the server offers the route; no answer (transport error, 5xx) leaves
/// the question open, and that flush goes one call per job. A 404 or 405 from the route switches
/// the loop to one call per job for good. Transport errors and 5xx are retried with the loop's
/// backoff for the report budget. Returns when the buffer's senders are gone and it is empty.
async fn flush_acks(
    client: Client,
    mode: Arc<AtomicU8>,
    unsettled: Arc<Unsettled>,
    mut buffered: mpsc::UnboundedReceiver<Pending>,
    lease_secs: u32,
    linger: Duration,
) {
    let budget = report_budget(lease_secs);
    let mut queue: VecDeque<Pending> = VecDeque::new();
    let mut rng = XorShift::from_entropy();
    let mut failures = 0u32;
    loop {
        if queue.is_empty() {
            match buffered.recv().await {
                Some(pending) => queue.push_back(pending),
                None => return,
            }
        }
        unsettled
            .wait_until(Instant::now() + linger, |undecided| {
                while let Ok(pending) = buffered.try_recv() {
                    queue.push_back(pending);
                }
                undecided == 0 || queue.len() >= MAX_COMPLETIONS
            })
            .await;
        // A job the server took back meanwhile has nobody waiting for its answer.
        queue.retain(|pending| !pending.reply.is_closed());
        if queue.is_empty() {
            continue;
        }

        let batch_route = match mode.load(Ordering::SeqCst) {
            MODE_BATCH => true,
            MODE_PER_JOB => false,
            _ => match client.offers_batch_complete().await {
                Ok(offered) => {
                    mode.store(if offered { MODE_BATCH } else { MODE_PER_JOB }, Ordering::SeqCst);
                    offered
                }
                Err(err) => {
                    eprintln!("queueflow worker: /openapi.json gave no answer ({err}); acknowledging one job at a time until it does");
                    false
                }
            },
        };
        if !batch_route {
            queue.drain(..).for_each(Pending::per_job);
            continue;
        }

        let take = queue.len().min(MAX_COMPLETIONS);
        let (jobs, waiting): (Vec<_>, Vec<_>) =
            queue.drain(..take).map(|pending| (pending.item, (pending.since, pending.reply))).unzip();
        let request = CompleteJobsRequest { jobs };
        let sent = client.complete_many(&request).await;
        let flushed =
            request.jobs.into_iter().zip(waiting).map(|(item, (since, reply))| Pending { item, since, reply });
        let mut again = Vec::new();
        match sent {
            Ok(answer) => settle(flushed, &answer.results, &mut again),
            Err(err) if matches!(err.status(), Some(404) | Some(405)) => {
                mode.store(MODE_PER_JOB, Ordering::SeqCst);
                eprintln!(
                    "queueflow worker: the server has no batch acknowledgement after all ({err}); acknowledging one job at a time from now on"
                );
                flushed.for_each(Pending::per_job);
                queue.drain(..).for_each(Pending::per_job);
            }
            Err(err) if err.is_transient() => {
                eprintln!("queueflow worker: a batch acknowledgement got no answer ({err}); sending it again");
                again.extend(flushed);
            }
            Err(err) => {
                eprintln!(
                    "queueflow worker: a batch acknowledgement was refused ({err}); sending its jobs one at a time"
                );
                flushed.for_each(Pending::per_job);
            }
        }
        if again.is_empty() {
            failures = 0;
            continue;
        }
        // Back to the front of the buffer, in order, unless past the budget or no longer held.
        let mut waiting_again = false;
        for pending in again.into_iter().rev() {
            if pending.reply.is_closed() {
                continue;
            }
            if pending.since.elapsed() >= budget {
                eprintln!(
                    "queueflow worker: acknowledging job {} got no answer for {budget:?}; not re-sent",
                    pending.item.id
                );
                pending.settle();
            } else {
                queue.push_front(pending);
                waiting_again = true;
            }
        }
        if waiting_again {
            failures = failures.saturating_add(1);
            tokio::time::sleep(backoff_delay(failures, rng.next_f64())).await;
        }
    }
}

/// Hands each flushed success its answer, found by position (the answers are in request order)
/// or, failing that, by id. 2xx is done; 409, 404 and any other 4xx are final and logged, as the
/// per-job answer is; a 5xx goes to `again`. A success the answer says nothing of is sent alone.
fn settle(flushed: impl Iterator<Item = Pending>, answers: &[CompletionAnswer], again: &mut Vec<Pending>) {
    for (i, pending) in flushed.enumerate() {
        let id = pending.item.id.as_str();
        let answer = answers.get(i).filter(|a| a.id == id).or_else(|| answers.iter().find(|a| a.id == id));
        match answer {
            Some(a) if (200..300).contains(&a.status) => pending.settle(),
            Some(a) if (Error::Api { status: a.status, body: None }).is_transient() => again.push(pending),
            Some(a) => {
                let why = a.error.as_deref().unwrap_or("no message");
                eprintln!("queueflow worker: reporting job {id} failed (HTTP {}: {why}); not re-sent", a.status);
                pending.settle();
            }
            None => {
                eprintln!(
                    "queueflow worker: the batch acknowledgement's answer has nothing for job {id}; sending it alone"
                );
                pending.per_job();
            }
        }
    }
}
