//! The conformance runner (sdks/conformance/README.md): `conformance <scenario.json>`.
//!
//! Events go to stdout as JSON lines; commands (`continue`) come from stdin. Everything here uses
//! the SDK's public API only, and for `tracing` the OpenTelemetry SDK (a dev-dependency) with an
//! in-memory exporter. Built with `cargo build --example conformance`.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tokio::io::AsyncBufReadExt;
use unofficial_queueflow_client::backoff::XorShift;
use unofficial_queueflow_client::*;

fn emit(event: Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{event}");
    let _ = out.flush();
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(&format!("{name} is not set")))
}

fn fail(message: &str) -> ! {
    eprintln!("conformance: {message}");
    std::process::exit(1)
}

struct Env {
    base: String,
    tenant: String,
    worker: String,
    queue: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| fail("usage: conformance <scenario.json>"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(&format!("cannot read {path}: {e}")));
    let scenario: Value = serde_json::from_str(&text).unwrap_or_else(|e| fail(&format!("bad scenario: {e}")));
    let env = Env {
        base: env("QF_BASE_URL"),
        tenant: env("QF_TENANT_TOKEN"),
        worker: env("QF_WORKER_TOKEN"),
        queue: env("QF_QUEUE"),
    };
    let worker = &scenario["worker"];
    let result = match worker["mode"].as_str().unwrap_or_default() {
        "loop" => run_loop(&env, worker).await,
        "raw_stale_lease" => raw_stale_lease(&env, worker).await,
        "auth_errors" => auth_errors(&env).await,
        "raw_calls" => raw_calls(&env).await,
        "raw_unique" => raw_unique(&env, worker).await,
        "raw_durable_time" => raw_durable_time(&env, worker).await,
        "raw_cron_workflow" => raw_cron_workflow(&env, worker).await,
        other => Err(format!("unknown worker mode {other:?}")),
    };
    if let Err(message) = result {
        fail(&message);
    }
}

fn body_ok(err: &Error) -> bool {
    err.body().is_some_and(|b| !b.error.is_empty() && !b.timestamp.is_empty())
}

fn u32_of(v: &Value, default: u32) -> u32 {
    v.as_u64().map(|n| n as u32).unwrap_or(default)
}

// --- loop ---------------------------------------------------------------------------------------

async fn run_loop(env: &Env, spec: &Value) -> Result<(), String> {
    let client = Client::builder(&env.base, &env.tenant).worker_token(&env.worker).build();
    let concurrency = spec["concurrency"].as_u64().unwrap_or(1) as usize;
    let options = WorkerOptions {
        lease_secs: u32_of(&spec["lease_secs"], 30),
        wait_secs: 1,
        concurrency,
        batch_size: spec["batch_size"].as_u64().map(|n| n as usize),
        worker_id: spec["worker_id"].as_str().map(str::to_string),
        ..WorkerOptions::default()
    };
    // The OpenTelemetry SDK as the global tracer provider, spans exported on end to memory.
    let tracing = spec["tracing"].as_bool().unwrap_or(false).then(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        (provider, exporter)
    });
    let stop_after = spec["stop_after_jobs"].as_u64().unwrap_or(1) as usize;
    let mut worker = Worker::new(client, &env.queue, options);
    let stop = worker.shutdown_token();
    let finished = Arc::new(AtomicUsize::new(0));

    let handlers = spec["handlers"].as_object().cloned().unwrap_or_default();
    for (task, behaviour) in handlers {
        let behaviour = behaviour.as_str().unwrap_or_default().to_string();
        let finished = finished.clone();
        let stop = stop.clone();
        worker = worker.register_with_context(task, move |job, ctx| {
            let behaviour = behaviour.clone();
            let finished = finished.clone();
            let stop = stop.clone();
            async move {
                emit(json!({"event": "handler_started", "job_id": job.id}));
                let (outcome, result) = behave(&behaviour, &job, &ctx).await;
                emit(json!({"event": "job_done", "job_id": job.id, "outcome": outcome}));
                if finished.fetch_add(1, Ordering::SeqCst) + 1 >= stop_after {
                    stop.cancel();
                }
                result
            }
        });
    }
    worker.run().await.map_err(|e| format!("worker loop failed: {e}"))?;
    if let Some((provider, exporter)) = tracing {
        let _ = provider.force_flush();
        let spans = exporter.get_finished_spans().map_err(|e| format!("finished spans: {e}"))?;
        for span in spans.iter().filter(|span| span.name.starts_with("process ")) {
            emit(worker_span(span));
        }
    }
    Ok(())
}

/// The `worker_span` event of a finished span.
fn worker_span(span: &SpanData) -> Value {
    let attributes: Map<String, Value> =
        span.attributes.iter().map(|kv| (kv.key.as_str().to_string(), otel_value(&kv.value))).collect();
    let parent = span.parent_span_id;
    json!({
        "event": "worker_span",
        "job_id": attributes.get("messaging.message.id").cloned().unwrap_or(Value::Null),
        "name": span.name,
        "trace_id": span.span_context.trace_id().to_string(),
        "span_id": span.span_context.span_id().to_string(),
        "parent_span_id": if parent == opentelemetry::trace::SpanId::INVALID { String::new() } else { parent.to_string() },
        "kind": match span.span_kind {
            SpanKind::Client => "client",
            SpanKind::Server => "server",
            SpanKind::Producer => "producer",
            SpanKind::Consumer => "consumer",
            SpanKind::Internal => "internal",
        },
        "status": match span.status {
            Status::Unset => "unset",
            Status::Ok => "ok",
            Status::Error { .. } => "error",
        },
        "attributes": attributes,
    })
}

fn otel_value(value: &opentelemetry::Value) -> Value {
    use opentelemetry::{Array, Value as V};
    match value {
        V::Bool(b) => json!(b),
        V::I64(n) => json!(n),
        V::F64(x) => json!(x),
        V::String(s) => json!(s.as_str()),
        V::Array(Array::Bool(items)) => json!(items),
        V::Array(Array::I64(items)) => json!(items),
        V::Array(Array::F64(items)) => json!(items),
        V::Array(Array::String(items)) => json!(items.iter().map(|s| s.as_str()).collect::<Vec<_>>()),
        other => json!(other.to_string()),
    }
}

async fn behave(behaviour: &str, job: &Job, ctx: &JobContext) -> (&'static str, HandlerResult) {
    match behaviour {
        "return_payload" => ("ok", Ok(job.payload.clone())),
        "sleep_200ms_then_return_payload" => {
            tokio::time::sleep(Duration::from_millis(200)).await;
            ("ok", Ok(job.payload.clone()))
        }
        "sleep_1500ms_then_return_payload" => {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            ("ok", Ok(job.payload.clone()))
        }
        "fail_retryable" => ("error", Err(HandlerError::new("boom"))),
        "report_progress_and_logs" => {
            if let Err(e) = ctx.progress(40.0, Some("loading")) {
                return ("error", Err(e.into()));
            }
            for n in 1..=120 {
                ctx.log(format!("line {n}"));
            }
            // The span current in the handler, read from the OpenTelemetry API.
            let current = opentelemetry::Context::current();
            let span = current.span();
            let span_context = span.span_context();
            emit(json!({
                "event": "handler_span",
                "job_id": job.id,
                "trace_id": span_context.trace_id().to_string(),
                "span_id": span_context.span_id().to_string(),
            }));
            if let Err(e) = ctx.progress(100.0, Some("done")) {
                return ("error", Err(e.into()));
            }
            ("ok", Ok(job.payload.clone()))
        }
        "log_then_fail_retryable" => {
            if let Err(e) = ctx.log_at("error", "failing on purpose") {
                return ("error", Err(e.into()));
            }
            ("error", Err(HandlerError::new("boom")))
        }
        "fail_permanent" => ("error", Err(HandlerError::permanent("invalid input"))),
        "wait_for_cancel" => {
            tokio::select! {
                _ = ctx.cancelled() => {
                    emit(json!({"event": "handler_observed_cancel", "job_id": job.id}));
                    ("cancelled", Err(HandlerError::new("cancelled")))
                }
                _ = tokio::time::sleep(Duration::from_secs(20)) => {
                    ("error", Err(HandlerError::new("no cancellation within 20 s")))
                }
            }
        }
        other => ("error", Err(HandlerError::new(format!("unknown behaviour {other}")))),
    }
}

// --- raw_stale_lease ----------------------------------------------------------------------------

async fn raw_stale_lease(env: &Env, spec: &Value) -> Result<(), String> {
    let client = Client::builder(&env.base, &env.tenant).worker_token(&env.worker).build();
    let request = LeaseJobsRequest {
        max_jobs: Some(1),
        lease_secs: Some(u32_of(&spec["lease_secs"], 30)),
        wait_secs: Some(5),
        ..Default::default()
    };
    let mut leased = None;
    for _ in 0..6 {
        let answer = client.lease(&env.queue, &request).await.map_err(|e| format!("lease: {e}"))?;
        if let Some(item) = answer.jobs.into_iter().next() {
            leased = Some(item);
            break;
        }
    }
    let leased = leased.ok_or("no job to lease")?;
    let job_id = leased.job.id.clone();
    emit(json!({"event": "leased", "job_id": job_id, "lease_token": leased.lease_token}));

    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) if line.trim() == "continue" => break,
            Ok(Some(_)) => continue,
            Ok(None) => return Err("stdin closed before continue".into()),
            Err(e) => return Err(format!("stdin: {e}")),
        }
    }

    let beat = HeartbeatRequest { lease_token: leased.lease_token.clone(), extend_secs: 30, progress: None };
    let heartbeat = client.heartbeat(&job_id, &beat).await;
    let mut late = Map::new();
    late.insert("late".into(), Value::Bool(true));
    let complete = client
        .complete(&job_id, &CompleteJobRequest { lease_token: leased.lease_token.clone(), result: Some(late) })
        .await;
    let status_of = |e: Option<&Error>| e.and_then(Error::status).map(Value::from).unwrap_or(Value::from(200));
    emit(json!({
        "event": "stale_rejected",
        "heartbeat_status": status_of(heartbeat.as_ref().err()),
        "complete_status": status_of(complete.as_ref().err()),
        "error_body_ok": heartbeat.as_ref().err().is_some_and(body_ok) && complete.as_ref().err().is_some_and(body_ok),
    }));
    Ok(())
}

// --- auth_errors --------------------------------------------------------------------------------

async fn loop_with_worker_token(env: &Env, token: &str) -> Result<(), Error> {
    let client = Client::builder(&env.base, &env.tenant).worker_token(token).build();
    let options = WorkerOptions { lease_secs: 10, wait_secs: 1, ..WorkerOptions::default() };
    let worker = Worker::new(client, &env.queue, options).register("conf.never", |job| async move { Ok(job.payload) });
    let stop = worker.shutdown_token();
    match tokio::time::timeout(Duration::from_secs(15), worker.run()).await {
        Ok(result) => result,
        Err(_) => {
            stop.cancel();
            Ok(())
        }
    }
}

fn auth_event(name: &str, result: Result<(), Error>) {
    match result {
        Ok(()) => emit(json!({"event": name, "status": null, "error_body_ok": false})),
        Err(e) => {
            emit(json!({"event": name, "status": e.status(), "error_body_ok": body_ok(&e), "error": e.to_string()}))
        }
    }
}

async fn auth_errors(env: &Env) -> Result<(), String> {
    auth_event("loop_bad_token", loop_with_worker_token(env, "not-the-token").await);
    auth_event("loop_tenant_token", loop_with_worker_token(env, &env.tenant).await);
    let client = Client::new(&env.base, &env.worker);
    let created = client.create_job(&CreateJobRequest::new("conf.raw").queue(&env.queue)).await;
    auth_event("raw_worker_token_on_tenant_route", created.map(|_| ()));
    Ok(())
}

// --- raw_unique ---------------------------------------------------------------------------------

/// Two creates with one unique key (the typed config, `on_conflict` left to the server's default)
/// and different payloads, then the first job read back.
async fn raw_unique(env: &Env, spec: &Value) -> Result<(), String> {
    let client = Client::builder(&env.base, &env.tenant).worker_token(&env.worker).build();
    let key = spec["unique_key"].as_str().ok_or("raw_unique needs worker.unique_key")?;
    let window_secs = spec["window_secs"].as_i64().ok_or("raw_unique needs worker.window_secs")?;
    let config = JobConfigRequest {
        queue: Some(env.queue.clone()),
        unique: Some(UniquePolicy::new(key, window_secs)),
        ..Default::default()
    };
    let create = |n: i64| {
        let payload = json!({"n": n}).as_object().cloned().unwrap_or_default();
        CreateJobRequest::new("conf.unique").payload(payload).config(config.clone())
    };
    let first = client.create_job(&create(1)).await.map_err(|e| format!("first create: {e}"))?;
    let second = client.create_job(&create(2)).await.map_err(|e| format!("second create: {e}"))?;
    let job = client.get_job(&first.job_id).await.map_err(|e| format!("get: {e}"))?;
    let unique = job.unique().map_err(|e| format!("config.unique: {e}"))?;
    emit(json!({
        "event": "unique_done",
        "same": first.job_id == second.job_id,
        "unique": unique,
        "payload": job.payload,
    }));
    Ok(())
}

// --- raw_durable_time ---------------------------------------------------------------------------

const TERMINAL_WORKFLOW: [&str; 4] = ["completed", "failed", "partially_failed", "cancelled"];

/// A wait-for-event step (its key a context placeholder) and a sleep after it: see the step
/// waiting, send its event, follow the workflow to its end, then read the event back.
async fn raw_durable_time(env: &Env, spec: &Value) -> Result<(), String> {
    let client = Client::builder(&env.base, &env.tenant).worker_token(&env.worker).build();
    let need = |field: &str| {
        let value = &spec[field];
        if value.is_null() {
            Err(format!("raw_durable_time needs worker.{field}"))
        } else {
            Ok(value)
        }
    };
    let template = need("key_template")?.as_str().unwrap_or_default();
    let event_key = need("event_key")?.as_str().unwrap_or_default();
    let workflow = CreateWorkflowRequest {
        name: "conf-durable".into(),
        steps: vec![
            WorkflowStep::wait_for_event("approve", template)
                .timeout_secs(need("timeout_secs")?.as_i64().unwrap_or_default()),
            WorkflowStep::sleep("nap", need("sleep_secs")?.as_i64().unwrap_or_default()).depends_on(["approve"]),
        ],
        context: need("context")?.as_object().cloned(),
        ..Default::default()
    };
    let id = client.create_workflow(&workflow).await.map_err(|e| format!("create workflow: {e}"))?.workflow_id;

    let mut waiting = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while waiting.is_none() && tokio::time::Instant::now() < deadline {
        let states = client.workflow_steps(&id).await.map_err(|e| format!("steps: {e}"))?;
        waiting =
            states.steps.into_iter().find(|s| s.name == "approve" && s.status == "running" && s.event_key.is_some());
        if waiting.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let payload = need("payload")?.as_object().cloned().unwrap_or_default();
    let sent = client
        .send_event(&PostEventRequest::new(event_key).payload(payload))
        .await
        .map_err(|e| format!("send event: {e}"))?;
    let mut got = client.get_workflow(&id).await.map_err(|e| format!("get workflow: {e}"))?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !TERMINAL_WORKFLOW.contains(&got.status.as_str()) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        got = client.get_workflow(&id).await.map_err(|e| format!("get workflow: {e}"))?;
    }
    let params = ListEventsParams { key: Some(event_key.into()), limit: Some(10) };
    let listed = client.list_events(&params).await.map_err(|e| format!("list events: {e}"))?;
    let mine = listed.events.iter().find(|e| e.event_id == sent.event_id);
    emit(json!({
        "event": "durable_done",
        "waiting_key": waiting.as_ref().and_then(|s| s.event_key.clone()),
        "wake_at_set": waiting.as_ref().is_some_and(|s| s.wake_at.is_some()),
        "delivered": sent.delivered,
        "status": got.status,
        "approval": got.context.get("approve"),
        "slept": got.context.get("nap").and_then(|nap| nap.get("slept_until")).is_some_and(Value::is_string),
        "listed": mine.map(|e| json!({"key": e.key, "delivered": e.delivered, "payload": e.payload})),
    }));
    Ok(())
}

// --- raw_cron_workflow --------------------------------------------------------------------------

/// A workflow schedule as this SDK decoded it, in the contract's summary shape.
fn schedule_summary(schedule: Option<&CronSchedule>, queue: &str) -> Value {
    let Some(schedule) = schedule else { return Value::Null };
    let workflow = schedule.workflow.as_ref();
    json!({
        "task_name": schedule.task_name,
        "name": workflow.map(|w| &w.name),
        "context": workflow.and_then(|w| w.context.as_ref()),
        "steps": workflow.map(|w| w.steps.iter().map(|step| json!({
            "name": step.name,
            "task_name": step.task_name,
            "depends_on": step.depends_on,
            "payload": step.payload,
            "sleep_secs": step.sleep_secs,
            "on_failure": step.on_failure,
            "our_queue": step.queue.as_deref() == Some(queue),
        })).collect::<Vec<_>>()),
    })
}

/// A schedule that starts a workflow beside a task schedule: get, list, see it fire, delete.
async fn raw_cron_workflow(env: &Env, spec: &Value) -> Result<(), String> {
    let client = Client::builder(&env.base, &env.tenant).worker_token(&env.worker).build();
    let need = |field: &str| {
        let value = &spec[field];
        if value.is_null() {
            Err(format!("raw_cron_workflow needs worker.{field}"))
        } else {
            Ok(value)
        }
    };
    let name = need("name")?.as_str().unwrap_or_default();
    let mut extract = WorkflowStep::new("extract", "conf.cron").queue(&env.queue);
    extract.payload = need("payload")?.as_object().cloned();
    let workflow = CreateWorkflowRequest {
        name: name.into(),
        steps: vec![
            extract,
            WorkflowStep::sleep("nap", need("sleep_secs")?.as_i64().unwrap_or_default()).depends_on(["extract"]),
        ],
        context: need("context")?.as_object().cloned(),
        ..Default::default()
    };
    let cron_expr = need("cron_expr")?.as_str().unwrap_or_default();
    let scheduled = CreateCronRequest::for_workflow(name, cron_expr, workflow);
    let id = client.create_cron(&scheduled).await.map_err(|e| format!("create workflow schedule: {e}"))?.cron_id;
    let task = CreateCronRequest::for_task("conf-cron-task", "0 0 1 1 *", "conf.cron").queue(&env.queue);
    let task_id = client.create_cron(&task).await.map_err(|e| format!("create task schedule: {e}"))?.cron_id;
    let got = client.get_cron(&id).await.map_err(|e| format!("get schedule: {e}"))?;
    let all = ListParams { limit: Some(100), ..Default::default() };
    let listed = client.list_crons(&all).await.map_err(|e| format!("list schedules: {e}"))?;

    let prefix = format!("{name}@");
    let mut fired = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while fired.is_none() && tokio::time::Instant::now() < deadline {
        let workflows = client.list_workflows(&all).await.map_err(|e| format!("list workflows: {e}"))?;
        fired = workflows.workflows.into_iter().find(|w| w.name.starts_with(&prefix));
        if fired.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    client.delete_cron(&id).await.map_err(|e| format!("delete workflow schedule: {e}"))?;
    client.delete_cron(&task_id).await.map_err(|e| format!("delete task schedule: {e}"))?;
    let gone_status = client.get_cron(&id).await.err().and_then(|e| e.status());

    let plain = listed.crons.iter().find(|s| s.id == task_id);
    emit(json!({
        "event": "cron_workflow_done",
        "got": schedule_summary(Some(&got), &env.queue),
        "listed": schedule_summary(listed.crons.iter().find(|s| s.id == id), &env.queue),
        "plain": plain.map(|s| json!({"task_name": s.task_name, "has_workflow": s.workflow.is_some()})),
        "fired_context": fired.map(|w| w.context),
        "gone_status": gone_status,
    }));
    Ok(())
}

// --- raw_calls ----------------------------------------------------------------------------------

#[derive(Default)]
struct Checks {
    failures: Vec<String>,
}

impl Checks {
    fn check(&mut self, ok: bool, what: impl Into<String>) {
        if !ok {
            self.failures.push(what.into());
        }
    }

    fn ok<T>(&mut self, what: &str, result: Result<T, Error>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                self.failures.push(format!("{what}: {e}"));
                None
            }
        }
    }

    fn err_status<T: std::fmt::Debug>(&mut self, what: &str, result: Result<T, Error>, want: u16, with_body: bool) {
        match result {
            Ok(v) => self.failures.push(format!("{what}: expected HTTP {want}, got success {v:?}")),
            Err(e) => {
                self.check(e.status() == Some(want), format!("{what}: expected HTTP {want}, got {e}"));
                if with_body {
                    self.check(body_ok(&e), format!("{what}: error without an {{error, timestamp}} body: {e:?}"));
                }
            }
        }
    }
}

fn random_uuid() -> String {
    let mut rng = XorShift::from_entropy();
    let (a, b) = (rng.next_u64(), rng.next_u64());
    let b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
    let a = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFFF,
        b >> 48,
        b & 0xFFFF_FFFF_FFFF
    )
}

/// `local` (RFC 3339) is 09:00:00 at +01:00 or +02:00, Berlin's two offsets, and names the instant
/// `at` (UTC, as the server writes `next_run_at`).
fn nine_in_berlin(local: &str, at: &str) -> bool {
    let (Some(date), Some(clock)) = (local.get(..10), local.get(10..)) else { return false };
    let utc_hour = match clock {
        "T09:00:00+01:00" => "08",
        "T09:00:00+02:00" => "07",
        _ => return false,
    };
    at.strip_prefix(&format!("{date}T{utc_hour}:00:00")).is_some_and(|zone| zone == "Z" || zone == "+00:00")
}

async fn raw_calls(env: &Env) -> Result<(), String> {
    let client = Client::new(&env.base, &env.tenant);
    let q = env.queue.clone();
    let mut c = Checks::default();

    // 1. whoami
    if let Some(me) = c.ok("whoami", client.whoami().await) {
        c.check(me.tenant == "conformance" && me.access == "read_write", format!("whoami: {me:?}"));
    }

    // 2. create with an idempotency key, twice
    let mut payload = Map::new();
    payload.insert("a".into(), json!(1));
    let req = CreateJobRequest::new("conf.raw").payload(payload.clone()).config(JobConfigRequest {
        queue: Some(q.clone()),
        priority: Some(5),
        ..Default::default()
    });
    let first = c.ok("create job", client.create_job_with_key(&req, "raw-1").await);
    let again = c.ok("create job again", client.create_job_with_key(&req, "raw-1").await);
    if let (Some(a), Some(b)) = (&first, &again) {
        c.check(a.job_id == b.job_id, format!("idempotent create: {} != {}", a.job_id, b.job_id));
    }
    let first_id = first.map(|r| r.job_id).unwrap_or_default();

    // 3. get it
    if let Some(job) = c.ok("get job", client.get_job(&first_id).await) {
        c.check(job.task_name == "conf.raw", format!("get job: task_name {}", job.task_name));
        c.check(job.payload == payload, format!("get job: payload {:?}", job.payload));
        c.check(job.queue_name == q, format!("get job: queue_name {}", job.queue_name));
        c.check(job.status == "pending", format!("get job: status {}", job.status));
        c.check(job.config.get("priority") == Some(&json!(5)), format!("get job: config {:?}", job.config));
    }

    // 4. batch
    let batch = CreateBatchJobsRequest { jobs: (0..3).map(|_| CreateJobRequest::new("conf.raw").queue(&q)).collect() };
    if let Some(r) = c.ok("batch create", client.create_jobs_batch(&batch).await) {
        c.check(r.count == 3 && r.job_ids.len() == 3, format!("batch create: {r:?}"));
    }

    // 5. list with a cursor
    let params = ListParams { queue: Some(q.clone()), limit: Some(2), include_total: Some(true), ..Default::default() };
    if let Some(page) = c.ok("list jobs", client.list_jobs(&params).await) {
        c.check(page.jobs.len() == 2, format!("list jobs: {} jobs", page.jobs.len()));
        c.check(page.has_more, "list jobs: has_more is false");
        c.check(page.total == Some(4), format!("list jobs: total {:?}", page.total));
        match &page.next_cursor {
            None => c.check(false, "list jobs: no next_cursor"),
            Some(cursor) => {
                let next = ListParams { cursor: Some(cursor.clone()), include_total: None, ..params.clone() };
                if let Some(second) = c.ok("list jobs page 2", client.list_jobs(&next).await) {
                    let mut ids: Vec<&str> =
                        page.jobs.iter().chain(second.jobs.iter()).map(|j| j.id.as_str()).collect();
                    c.check(second.jobs.len() == 2, format!("list jobs page 2: {} jobs", second.jobs.len()));
                    ids.sort();
                    ids.dedup();
                    c.check(ids.len() == 4, format!("list jobs: pages overlap: {ids:?}"));
                }
            }
        }
    }

    // 6. cancel one, twice
    c.ok("cancel job", client.cancel_job(&first_id).await);
    c.err_status("cancel job again", client.cancel_job(&first_id).await, 409, false);

    // 7. cancel by filter
    let by_filter = CancelJobsRequest { queue: Some(q.clone()), ..Default::default() };
    if let Some(r) = c.ok("cancel jobs", client.cancel_jobs(&by_filter).await) {
        c.check(r.cancelled == 3, format!("cancel jobs: cancelled {}", r.cancelled));
    }

    // 8. unknown job
    c.err_status("get unknown job", client.get_job(&random_uuid()).await, 404, true);

    // 9. a workflow through its routes
    let wf = CreateWorkflowRequest {
        name: "conf-wf".into(),
        steps: vec![
            WorkflowStep::new("a", "conf.raw").queue(&q),
            WorkflowStep::new("b", "conf.raw").depends_on(["a"]).queue(&q),
        ],
        ..Default::default()
    };
    if let Some(created) = c.ok("create workflow", client.create_workflow(&wf).await) {
        let id = created.workflow_id;
        if let Some(w) = c.ok("get workflow", client.get_workflow(&id).await) {
            c.check(w.status == "created" || w.status == "running", format!("get workflow: status {}", w.status));
        }
        if let Some(s) = c.ok("workflow steps", client.workflow_steps(&id).await) {
            let names: Vec<&str> = s.steps.iter().map(|s| s.name.as_str()).collect();
            c.check(names == ["a", "b"], format!("workflow steps: {names:?}"));
        }
        if let Some(d) = c.ok("workflow diagram", client.workflow_diagram(&id).await) {
            c.check(d.format == "mermaid" && d.diagram.contains("a --> b"), format!("workflow diagram: {d:?}"));
        }
        c.ok("cancel workflow", client.cancel_workflow(&id).await);
        c.ok("retry workflow", client.retry_workflow(&id).await);
        c.ok("cancel workflow again", client.cancel_workflow(&id).await);
    }

    // 10. a cycle
    let cycle = CreateWorkflowRequest {
        name: "conf-cycle".into(),
        steps: vec![
            WorkflowStep::new("a", "conf.raw").depends_on(["b"]).queue(&q),
            WorkflowStep::new("b", "conf.raw").depends_on(["a"]).queue(&q),
        ],
        ..Default::default()
    };
    c.err_status("create cyclic workflow", client.create_workflow(&cycle).await, 400, true);

    // 11. cron
    let cron = CreateCronRequest {
        name: "conf-cron".into(),
        cron_expr: "*/5 * * * *".into(),
        task_name: Some("conf.raw".into()),
        queue: Some(q.clone()),
        ..Default::default()
    };
    if let Some(created) = c.ok("create cron", client.create_cron(&cron).await) {
        let id = created.cron_id;
        if let Some(s) = c.ok("get cron", client.get_cron(&id).await) {
            c.check(s.name == "conf-cron" && s.enabled, format!("get cron: {s:?}"));
            c.check(s.timezone.is_none() && s.next_run_local.is_none(), format!("get cron: a zone on {s:?}"));
        }
        let zoned = CreateCronRequest {
            name: "conf-cron-tz".into(),
            cron_expr: "0 9 * * *".into(),
            task_name: Some("conf.raw".into()),
            queue: Some(q.clone()),
            timezone: Some("Europe/Berlin".into()),
            ..Default::default()
        };
        let zoned_id = c.ok("create zoned cron", client.create_cron(&zoned).await).map(|z| z.cron_id);
        let mut local = None;
        if let Some(zoned_id) = &zoned_id {
            if let Some(s) = c.ok("get zoned cron", client.get_cron(zoned_id).await) {
                c.check(
                    s.timezone.as_deref() == Some("Europe/Berlin"),
                    format!("get zoned cron: timezone {:?}", s.timezone),
                );
                c.check(
                    s.next_run_local.as_deref().is_some_and(|l| nine_in_berlin(l, &s.next_run_at)),
                    format!("get zoned cron: next_run_local {:?}, next_run_at {}", s.next_run_local, s.next_run_at),
                );
                local = s.next_run_local;
            }
        }
        let all = ListParams { limit: Some(100), ..Default::default() };
        if let Some(list) = c.ok("list crons", client.list_crons(&all).await) {
            c.check(list.crons.iter().any(|s| s.id == id), "list crons: the schedule is missing");
            if let Some(zoned_id) = &zoned_id {
                c.check(
                    list.crons.iter().any(|s| {
                        &s.id == zoned_id
                            && s.timezone.as_deref() == Some("Europe/Berlin")
                            && local.is_some()
                            && s.next_run_local == local
                    }),
                    "list crons: the zoned schedule is missing or has no local next run",
                );
            }
        }
        if let Some(zoned_id) = &zoned_id {
            c.ok("delete zoned cron", client.delete_cron(zoned_id).await);
        }
        c.ok("pause cron", client.pause_cron(&id).await);
        if let Some(s) = c.ok("get paused cron", client.get_cron(&id).await) {
            c.check(!s.enabled, "paused cron is still enabled");
        }
        c.ok("resume cron", client.resume_cron(&id).await);
        if let Some(s) = c.ok("get resumed cron", client.get_cron(&id).await) {
            c.check(s.enabled, "resumed cron is not enabled");
        }
        c.ok("delete cron", client.delete_cron(&id).await);
        c.err_status("get deleted cron", client.get_cron(&id).await, 404, true);
    }

    // 12. dlq, stats, queues, tasks
    c.ok("list dlq", client.list_dead_letters(&ListParams { limit: Some(5), ..Default::default() }).await);
    if let Some(s) = c.ok("stats", client.stats().await) {
        let fields = [
            s.jobs_created,
            s.jobs_completed,
            s.jobs_failed,
            s.jobs_retried,
            s.jobs_dead_lettered,
            s.workflows_created,
            s.workflows_completed,
            s.workflows_failed,
        ];
        c.check(fields.iter().all(|&n| n >= 0), format!("stats: {s:?}"));
    }
    if let Some(list) = c.ok("list queues", client.list_queues().await) {
        c.check(list.queues.iter().any(|s| s.queue == q), format!("list queues: {q} missing"));
    }
    if let Some(r) = c.ok("pause queue", client.pause_queue(&q).await) {
        c.check(r.paused, "pause queue: paused is false");
    }
    if let Some(r) = c.ok("resume queue", client.resume_queue(&q).await) {
        c.check(!r.paused, "resume queue: paused is true");
    }
    c.ok("tasks", client.tasks().await);

    emit(json!({"event": "raw_calls_done", "ok": c.failures.is_empty(), "failures": c.failures}));
    Ok(())
}
