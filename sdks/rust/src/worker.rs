//! The remote worker runtime: lease with long-poll, run handlers concurrently, heartbeat every
//! held job at half the lease, obey the heartbeat's answer, report the outcome (successes in
//! batches through `POST /api/v1/jobs/complete` when the server offers it, one call per job
//! otherwise; failures one call per job).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::backoff::{backoff_delay, XorShift};
use crate::client::Client;
use crate::error::{Error, Result};
use crate::types::{
    CompleteJobRequest, CompleteJobsRequest, CompletionAnswer, CompletionItem, FailJobRequest, HeartbeatRequest, Job,
    LeaseJobsRequest, LeasedJob, MAX_COMPLETIONS,
};

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

/// Per-job context handed to a handler: ids, and the cancellation signal that fires when the
/// server says the job is no longer this worker's (cancelled, finished elsewhere, lease lost).
/// After it fires the runtime reports nothing for the job; a handler that ignores it is dropped
/// after [`WorkerOptions::cancel_grace`].
#[derive(Clone, Debug)]
pub struct JobContext {
    job_id: String,
    lease_token: String,
    cancel: CancellationToken,
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
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            lease_secs: 60,
            wait_secs: 20,
            concurrency: 1,
            batch_size: None,
            cancel_grace: Duration::from_secs(5),
        }
    }
}

// --- the worker ---------------------------------------------------------------------------------

/// A worker for one queue. Register a handler per task name, then [`run`](Worker::run).
///
/// ```no_run
/// use queueflow_sdk::{Client, Map, Worker, WorkerOptions};
/// # async fn demo() -> Result<(), queueflow_sdk::Error> {
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
        Ok(())
    }

    /// Runs the loop until the shutdown token fires (then `Ok(())`, after draining), or until a
    /// lease call fails for good: 401/403 (a wrong or tenant credential) and other 4xx answers
    /// end the loop with that error instead of retrying. Transport errors and 5xx back off with
    /// jitter (capped at 5 s) and the loop carries on.
    pub async fn run(self) -> Result<()> {
        self.check_options()?;
        let opts = self.options.clone();
        let batch = opts.batch_size.unwrap_or(opts.concurrency).clamp(1, 100);
        let max_held = batch.max(opts.concurrency);
        // Lease once there is room for half a batch (at least one job): with acknowledgements
        // answered a few at a time, leasing at every freed place made most leases a job or two.
        let room = (batch.min(opts.concurrency) / 2).max(1);
        let slots = Arc::new(Semaphore::new(opts.concurrency));
        let handlers = Arc::new(self.handlers);
        let mut held: JoinSet<()> = JoinSet::new();
        let mut rng = XorShift::from_entropy();
        let mut failures = 0u32;
        let mut outcome = Ok(());
        let (acks, buffered) = Acks::new();
        let mut flusher =
            AbortOnDrop(tokio::spawn(flush_acks(self.client.clone(), acks.mode.clone(), buffered, opts.lease_secs)));

        loop {
            while held.try_join_next().is_some() {}
            if self.shutdown.is_cancelled() {
                break;
            }
            if held.len() + room > max_held {
                tokio::select! {
                    _ = held.join_next() => {}
                    _ = self.shutdown.cancelled() => {}
                }
                continue;
            }
            let want = batch.min(max_held - held.len());
            let request = LeaseJobsRequest {
                max_jobs: Some(want as u32),
                lease_secs: Some(opts.lease_secs),
                wait_secs: Some(opts.wait_secs),
            };
            match self.client.lease(&self.queue, &request).await {
                Ok(leased) => {
                    failures = 0;
                    for item in leased.jobs {
                        let handler = handlers.get(&item.job.task_name).cloned();
                        let job =
                            hold_job(self.client.clone(), item, handler, slots.clone(), acks.clone(), opts.clone());
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

/// Why a held job is no longer this worker's.
async fn heartbeat_until_lost(client: &Client, job_id: &str, lease_token: &str, lease_secs: u32) -> String {
    let interval = Duration::from_millis(u64::from(lease_secs) * 500).max(Duration::from_millis(200));
    let mut wait = interval;
    loop {
        tokio::time::sleep(wait).await;
        let request = HeartbeatRequest { lease_token: lease_token.to_string(), extend_secs: lease_secs };
        match client.heartbeat(job_id, &request).await {
            Ok(answer) if answer.status == "running" => wait = interval,
            Ok(answer) => return format!("the job is {}", answer.status),
            Err(err) if matches!(err.status(), Some(404) | Some(409)) => return err.to_string(),
            Err(err) => {
                eprintln!("queueflow worker: heartbeat of job {job_id} failed ({err}); retrying");
                wait = (interval / 2).max(Duration::from_millis(100));
            }
        }
    }
}

/// One leased job, from the lease to the report: heartbeated from the start (while it waits for
/// a slot too), run when a slot frees, abandoned without a report when the server takes it back.
async fn hold_job(
    client: Client,
    leased: LeasedJob,
    handler: Option<Handler>,
    slots: Arc<Semaphore>,
    acks: Acks,
    opts: WorkerOptions,
) {
    let LeasedJob { job, lease_token } = leased;
    let job_id = job.id.clone();
    let heartbeat = heartbeat_until_lost(&client, &job_id, &lease_token, opts.lease_secs);
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
    let ctx = JobContext { job_id: job_id.clone(), lease_token: lease_token.clone(), cancel: cancel.clone() };
    // The handler runs as its own task so that a panic is caught; the guard aborts it if this
    // future is dropped (the run() future dropped by its caller), so no handler outlives its worker.
    let mut task = AbortOnDrop(tokio::spawn(handler(job, ctx)));
    let finished = tokio::select! {
        finished = &mut task.0 => finished,
        why = &mut heartbeat => {
            cancel.cancel();
            eprintln!("queueflow worker: job {job_id} taken back by the server ({why}); cancelling its handler, reporting nothing");
            // Past the grace period the guard aborts the handler.
            let _ = tokio::time::timeout(opts.cancel_grace, &mut task.0).await;
            return;
        }
    };
    drop(slot);
    let outcome = match finished {
        Ok(result) => result,
        Err(err) if err.is_panic() => Err(HandlerError::new(format!("handler panicked: {}", panic_message(err)))),
        Err(_) => return,
    };
    match outcome {
        Ok(result) => {
            acknowledge(&client, &acks, &job_id, result, &lease_token, opts.lease_secs, heartbeat.as_mut()).await
        }
        Err(err) => report(&client, &job_id, Err(err), &lease_token, opts.lease_secs, heartbeat.as_mut()).await,
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
}

impl Acks {
    fn new() -> (Acks, mpsc::UnboundedReceiver<Pending>) {
        let (buffer, buffered) = mpsc::unbounded_channel();
        (Acks { mode: Arc::new(AtomicU8::new(MODE_UNKNOWN)), buffer }, buffered)
    }

    fn per_job(&self) -> bool {
        self.mode.load(Ordering::SeqCst) == MODE_PER_JOB
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
async fn acknowledge<H>(
    client: &Client,
    acks: &Acks,
    job_id: &str,
    result: Map<String, Value>,
    lease_token: &str,
    lease_secs: u32,
    mut heartbeat: Pin<&mut H>,
) where
    H: Future<Output = String>,
{
    if acks.per_job() {
        return report(client, job_id, Ok(result), lease_token, lease_secs, heartbeat).await;
    }
    let (reply, answer) = oneshot::channel();
    let item = CompletionItem { id: job_id.to_string(), lease_token: lease_token.to_string(), result: Some(result) };
    if let Err(mpsc::error::SendError(pending)) = acks.buffer.send(Pending { item, since: Instant::now(), reply }) {
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
/// one. There is no timer: a lone success goes at once. Before the first flush it asks
/// `/openapi.json` whether the server offers the route; no answer (transport error, 5xx) leaves
/// the question open, and that flush goes one call per job. A 404 or 405 from the route switches
/// the loop to one call per job for good. Transport errors and 5xx are retried with the loop's
/// backoff for the report budget. Returns when the buffer's senders are gone and it is empty.
async fn flush_acks(
    client: Client,
    mode: Arc<AtomicU8>,
    mut buffered: mpsc::UnboundedReceiver<Pending>,
    lease_secs: u32,
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
        while let Ok(pending) = buffered.try_recv() {
            queue.push_back(pending);
        }
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
