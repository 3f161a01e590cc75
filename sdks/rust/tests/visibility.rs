//! Visibility (docs/visibility.md, docs/tracing.md) against a local stub server: the worker's name
//! on its leases, the handler's progress on heartbeats, its log lines batched into few calls, what
//! is left sent before the outcome, failures of those calls leaving the outcome alone, the handler's
//! OpenTelemetry span, and the typed raw calls of the new routes.
//!
//! This test binary installs the OpenTelemetry SDK (in-memory exporter) as the global tracer
//! provider, so its tests find their spans by job id.

mod stub;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, Value as OtelValue};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use stub::{job, requests, serve, Log, Req, Resp};
use unofficial_queueflow_client::*;

const LIMIT: Duration = Duration::from_secs(20);
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn client(base: &str) -> Client {
    Client::builder(base, "tenant-key").worker_token("worker-key").build()
}

/// A lease route handing out `items` (whole lease items: `job`, `lease_token`, and any trace
/// context) in its first answer, then empty long-polls.
fn lease_once(items: Vec<serde_json::Value>) -> impl Fn(&Req) -> Option<Resp> + Send + Sync {
    let calls = AtomicUsize::new(0);
    move |req: &Req| {
        if !req.path.ends_with("/lease") {
            return None;
        }
        Some(match calls.fetch_add(1, Ordering::SeqCst) {
            0 => Resp::json(200, json!({"jobs": items})),
            _ => Resp::json(200, json!({"jobs": []})).after(Duration::from_millis(100)),
        })
    }
}

fn item(id: &str, task: &str) -> serde_json::Value {
    json!({"job": job(id, task, json!({"id": id})), "lease_token": format!("tok-{id}")})
}

/// What the server answers to the routes these tests do not watch: heartbeats `running`, log
/// posts stored, completions and failures 204.
fn server(req: &Req) -> Resp {
    match req.path.as_str() {
        p if p.ends_with("/heartbeat") => Resp::json(200, json!({"status": "running"})),
        p if p.ends_with("/logs") => {
            let n = req.json()["lines"].as_array().map_or(0, Vec::len);
            Resp::json(200, json!({"stored": n, "dropped": 0, "last_seq": n}))
        }
        _ => Resp::empty(204),
    }
}

/// Counts a finished handler when dropped (a panicking one too), and stops the loop at the n-th.
struct Finished {
    done: Arc<AtomicUsize>,
    n: usize,
    stop: CancellationToken,
}

impl Drop for Finished {
    fn drop(&mut self) {
        if self.done.fetch_add(1, Ordering::SeqCst) + 1 >= self.n {
            self.stop.cancel();
        }
    }
}

/// Runs a worker on queue `q` with `handler` for task `t` until `n` handlers have finished.
async fn run_until<F, Fut>(base: &str, options: WorkerOptions, n: usize, handler: F)
where
    F: Fn(Job, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    let worker = Worker::new(client(base), "q", options);
    let stop = worker.shutdown_token();
    let done = Arc::new(AtomicUsize::new(0));
    let handler = Arc::new(handler);
    let worker = worker.register_with_context("t", move |job, ctx| {
        let finished = Finished { done: done.clone(), n, stop: stop.clone() };
        let running = handler(job, ctx);
        async move {
            let _finished = finished;
            running.await
        }
    });
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
}

fn options() -> WorkerOptions {
    WorkerOptions { wait_secs: 1, lease_secs: 60, ..Default::default() }
}

/// The logged requests, as `METHOD path`, in the order the server got them.
fn calls(log: &Log) -> Vec<String> {
    log.lock().unwrap().iter().map(|r| format!("{} {}", r.method, r.path)).collect()
}

fn line_counts(log: &Log) -> Vec<usize> {
    requests(log, "POST", "/logs").iter().map(|r| r.json()["lines"].as_array().unwrap().len()).collect()
}

fn messages(log: &Log) -> Vec<String> {
    requests(log, "POST", "/logs")
        .iter()
        .flat_map(|r| r.json()["lines"].as_array().unwrap().clone())
        .map(|line| line["message"].as_str().unwrap().to_string())
        .collect()
}

// --- worker id and info -------------------------------------------------------------------------

#[tokio::test]
async fn leases_name_the_worker_and_say_what_it_is_until_one_succeeded() {
    let calls = AtomicUsize::new(0);
    let (base, log) = serve(move |req| match req.path.as_str() {
        p if p.ends_with("/lease") => match calls.fetch_add(1, Ordering::SeqCst) {
            0 => Resp::error(503, "starting"),
            1 => Resp::json(200, json!({"jobs": [item("j1", "b.task")]})),
            _ => Resp::json(200, json!({"jobs": []})).after(Duration::from_millis(100)),
        },
        _ => server(req),
    })
    .await;
    let worker = Worker::new(client(&base), "q", WorkerOptions { worker_id: Some("box-1".into()), ..options() })
        .register("b.task", |job| async move { Ok(job.payload) })
        .register("a.task", |job| async move { Ok(job.payload) });
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    // Wait (with a deadline) for a third lease call: the one after the first that succeeded.
    let deadline = tokio::time::Instant::now() + LIMIT;
    while requests(&log, "POST", "/lease").len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    tokio::time::timeout(LIMIT, run).await.expect("run finished").unwrap().expect("run ok");

    let leases: Vec<_> = requests(&log, "POST", "/lease").iter().map(Req::json).collect();
    assert!(leases.len() >= 3, "{leases:?}");
    let info = json!({
        "hostname": unofficial_queueflow_client::worker::hostname(),
        "sdk": "rust",
        "version": SDK_VERSION,
        "tasks": ["a.task", "b.task"],
    });
    for (i, lease) in leases.iter().enumerate() {
        assert_eq!(lease["worker_id"], "box-1", "lease {i}");
        if i < 2 {
            assert_eq!(lease["worker"], info, "lease {i}: no lease has succeeded before it");
        } else {
            assert!(lease.get("worker").is_none(), "lease {i} repeats the worker's info: {lease}");
        }
    }
    assert!(!info["hostname"].as_str().unwrap().is_empty());
    assert_eq!(SDK_VERSION, env!("CARGO_PKG_VERSION"));
}

#[test]
fn the_default_worker_id_is_host_and_process() {
    let id = default_worker_id();
    let (host, pid) = id.rsplit_once(':').expect("host:pid");
    assert_eq!(pid, std::process::id().to_string());
    assert!(!host.is_empty());
    assert!(id.len() <= MAX_WORKER_ID && id.bytes().all(|b| b.is_ascii_graphic()), "{id:?}");
}

#[tokio::test]
async fn a_worker_id_the_server_would_refuse_is_refused_before_any_call() {
    let (base, log) = serve(server).await;
    for bad in ["", "has space", "tab\tbed", "née", &"x".repeat(129)] {
        let options = WorkerOptions { worker_id: Some(bad.to_string()), ..options() };
        let err = Worker::new(client(&base), "q", options).run().await.expect_err("invalid");
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err}");
    }
    assert!(log.lock().unwrap().is_empty());
}

// --- logs ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_handler_that_logs_250_lines_quickly_makes_three_log_calls_before_its_report() {
    let (base, log) = serve({
        let lease = lease_once(vec![item("j1", "t")]);
        move |req| lease(req).unwrap_or_else(|| server(req))
    })
    .await;
    run_until(&base, options(), 1, |job, ctx| async move {
        for n in 1..=250 {
            ctx.log(format!("line {n}"));
        }
        Ok(job.payload)
    })
    .await;
    assert_eq!(line_counts(&log), [100, 100, 50]);
    assert_eq!(messages(&log), (1..=250).map(|n| format!("line {n}")).collect::<Vec<_>>());
    let posts = requests(&log, "POST", "/logs");
    for post in &posts {
        assert_eq!(post.path, "/api/v1/jobs/j1/logs");
        assert_eq!(post.header("authorization"), Some("Bearer worker-key"));
        let body = post.json();
        assert_eq!(body["lease_token"], "tok-j1");
        for line in body["lines"].as_array().unwrap() {
            assert_eq!(line["level"], "info");
            let ts = line["ts"].as_str().unwrap();
            assert!(ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
        }
    }
    let order = calls(&log);
    let complete = order.iter().position(|c| c == "POST /api/v1/jobs/j1/complete").expect("completed");
    let last_log = order.iter().rposition(|c| c == "POST /api/v1/jobs/j1/logs").unwrap();
    assert!(last_log < complete, "the lines are flushed before the report: {order:?}");
}

#[tokio::test]
async fn a_handler_that_logs_for_three_seconds_posts_about_once_a_second() {
    let (base, log) = serve({
        let lease = lease_once(vec![item("j1", "t")]);
        move |req| lease(req).unwrap_or_else(|| server(req))
    })
    .await;
    let started = std::time::Instant::now();
    run_until(&base, options(), 1, |job, ctx| async move {
        for n in 1..=60 {
            ctx.log(format!("tick {n}"));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(job.payload)
    })
    .await;
    let ran = started.elapsed().as_secs_f64();
    let posts = line_counts(&log).len();
    // At most one call a second, plus the flush at the end; at least the ticks at 1 s and 2 s of a
    // handler that ran 3 s, plus that flush.
    assert!(posts >= 3, "{posts} log calls for a 3 s handler");
    assert!(posts as f64 <= ran + 1.0, "{posts} log calls in {ran:.1} s");
    assert_eq!(messages(&log), (1..=60).map(|n| format!("tick {n}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn calls_keep_to_64_kib_and_a_longer_message_is_cut_at_a_character_boundary() {
    let (base, log) = serve({
        let lease = lease_once(vec![item("j1", "t")]);
        move |req| lease(req).unwrap_or_else(|| server(req))
    })
    .await;
    run_until(&base, options(), 1, |job, ctx| async move {
        for _ in 0..3 {
            ctx.log("a".repeat(30 * 1024));
        }
        ctx.log_at("warning", "é".repeat(50_000))?; // 100,000 bytes
        Ok(job.payload)
    })
    .await;
    assert_eq!(line_counts(&log), [2, 1, 1], "two 30 KiB lines fit a call, a third does not");
    let posts = requests(&log, "POST", "/logs");
    for post in &posts {
        let bytes: usize =
            post.json()["lines"].as_array().unwrap().iter().map(|l| l["message"].as_str().unwrap().len()).sum();
        assert!(bytes <= MAX_LOG_CALL_BYTES, "{bytes} bytes in one call");
    }
    let cut = posts[2].json()["lines"][0].clone();
    assert_eq!(cut["level"], "warning");
    let message = cut["message"].as_str().unwrap();
    assert_eq!(message.len(), MAX_LOG_CALL_BYTES);
    assert!(message.chars().all(|c| c == 'é'));
}

#[tokio::test]
async fn refused_log_calls_change_no_outcome() {
    let (base, log) = serve({
        let lease = lease_once(vec![item("j1", "t"), item("j2", "t"), item("j3", "t")]);
        move |req| {
            lease(req).unwrap_or_else(|| match req.path.as_str() {
                "/api/v1/jobs/j1/logs" => Resp::error(409, "lease is no longer held"),
                "/api/v1/jobs/j2/logs" => Resp::error(404, "not found"),
                "/api/v1/jobs/j3/logs" => Resp::error(503, "database unavailable"),
                _ => server(req),
            })
        }
    })
    .await;
    run_until(&base, WorkerOptions { concurrency: 3, ..options() }, 3, |job, ctx| async move {
        for n in 1..=150 {
            ctx.log(format!("line {n}"));
        }
        ctx.log_at("error", "about to end")?;
        match job.id.as_str() {
            "j2" => Err(HandlerError::new("boom")),
            _ => Ok(job.payload),
        }
    })
    .await;
    for id in ["j1", "j2", "j3"] {
        let posts = requests(&log, "POST", &format!("/{id}/logs"));
        assert_eq!(posts.len(), 1, "{id}: after a refusal (or no answer at the end) nothing more is sent");
    }
    let completes: Vec<_> = requests(&log, "POST", "/complete").iter().map(|r| r.path.clone()).collect();
    assert_eq!(completes.len(), 2, "{completes:?}");
    assert!(completes.contains(&"/api/v1/jobs/j1/complete".to_string()));
    assert!(completes.contains(&"/api/v1/jobs/j3/complete".to_string()));
    let fails = requests(&log, "POST", "/fail");
    assert_eq!(fails.len(), 1);
    assert_eq!(fails[0].json(), json!({"lease_token": "tok-j2", "error": "boom", "retryable": true}));
}

#[tokio::test]
async fn bad_levels_are_refused_and_nothing_is_recorded() {
    let (base, log) = serve({
        let lease = lease_once(vec![item("j1", "t")]);
        move |req| lease(req).unwrap_or_else(|| server(req))
    })
    .await;
    run_until(&base, options(), 1, |job, ctx| async move {
        assert!(matches!(ctx.log_at("warn-1", "x"), Err(Error::InvalidArgument(_))));
        assert!(matches!(ctx.log_at("", "x"), Err(Error::InvalidArgument(_))));
        assert!(matches!(ctx.progress(101.0, None), Err(Error::InvalidArgument(_))));
        assert!(matches!(ctx.progress(f64::NAN, Some("x")), Err(Error::InvalidArgument(_))));
        Ok(job.payload)
    })
    .await;
    assert!(requests(&log, "POST", "/logs").is_empty());
    assert!(requests(&log, "POST", "/heartbeat").is_empty());
    assert_eq!(requests(&log, "POST", "/complete").len(), 1);
}

// --- progress -----------------------------------------------------------------------------------

fn progress_of(beats: &[Req]) -> Vec<serde_json::Value> {
    beats.iter().map(|r| r.json()["progress"].clone()).collect()
}

#[tokio::test]
async fn progress_goes_early_on_a_heartbeat_at_most_once_a_second() {
    let (base, log) = serve({
        let lease = lease_once(vec![item("j1", "t")]);
        move |req| lease(req).unwrap_or_else(|| server(req))
    })
    .await;
    // lease_secs 60: the regular heartbeat (every 30 s) never comes during the test.
    run_until(&base, options(), 1, |job, ctx| async move {
        ctx.progress(10.0, Some("start"))?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        ctx.progress(50.0, None)?;
        ctx.progress(60.0, Some("more"))?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Ok(job.payload)
    })
    .await;
    let beats = requests(&log, "POST", "/heartbeat");
    assert_eq!(
        progress_of(&beats),
        [json!({"percent": 10.0, "message": "start"}), json!({"percent": 60.0, "message": "more"})],
        "the first report at once, the latest of the next second's after the second, nothing left at the end"
    );
    assert_eq!(beats[0].json()["lease_token"], "tok-j1");
    assert_eq!(beats[0].json()["extend_secs"], 60);
}

#[tokio::test]
async fn the_last_progress_is_sent_after_the_logs_and_before_the_report() {
    let (base, log) = serve({
        let lease = lease_once(vec![item("j1", "t")]);
        move |req| lease(req).unwrap_or_else(|| server(req))
    })
    .await;
    run_until(&base, options(), 1, |job, ctx| async move {
        ctx.log("working");
        tokio::time::sleep(Duration::from_millis(100)).await;
        ctx.log("done");
        ctx.progress(100.0, Some("done"))?;
        Ok(job.payload)
    })
    .await;
    let order = calls(&log);
    let complete = order.iter().position(|c| c == "POST /api/v1/jobs/j1/complete").expect("completed");
    let beats = requests(&log, "POST", "/heartbeat");
    assert!(!beats.is_empty());
    assert!(progress_of(&beats).iter().all(|p| *p == json!({"percent": 100.0, "message": "done"})));
    let first_beat = order.iter().position(|c| c.ends_with("/heartbeat")).unwrap();
    let last_log = order.iter().rposition(|c| c.ends_with("/logs")).unwrap();
    assert!(last_log < complete && first_beat < complete, "{order:?}");
    assert_eq!(messages(&log), ["working", "done"]);
}

// --- the handler's span -------------------------------------------------------------------------

/// The OpenTelemetry SDK as the global provider of this test binary, its spans kept in memory.
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        opentelemetry::global::set_tracer_provider(provider);
        exporter
    })
}

fn span_of<'a>(spans: &'a [SpanData], name: &str, job_id: &str) -> &'a SpanData {
    spans
        .iter()
        .find(|s| {
            s.name == name
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "messaging.message.id" && kv.value.as_str() == job_id)
        })
        .unwrap_or_else(|| panic!("no span {name} for {job_id}"))
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a OtelValue> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
}

#[tokio::test]
async fn the_handler_runs_in_a_consumer_span_that_continues_the_jobs_trace() {
    let exporter = exporter();
    let mut traced = item("s1", "t");
    traced["traceparent"] = json!(TRACEPARENT);
    traced["tracestate"] = json!("congo=t61rcWkgMzE");
    traced["job"]["delivery_count"] = json!(3);
    let (base, _log) = serve({
        let lease = lease_once(vec![traced, item("s2", "t"), item("s3", "t")]);
        move |req| lease(req).unwrap_or_else(|| server(req))
    })
    .await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    run_until(&base, WorkerOptions { concurrency: 3, ..options() }, 3, move |job, ctx| {
        let record = record.clone();
        async move {
            // The current span, as the OpenTelemetry API sees it, at a poll after an await too.
            tokio::task::yield_now().await;
            let current = Context::current().span().span_context().clone();
            assert_eq!(&current, ctx.otel_context().span().span_context());
            // A span the handler starts is the worker span's child.
            let tracer = opentelemetry::global::tracer("handler");
            tracer.in_span(format!("inner {}", job.id), |_cx| {});
            record.lock().unwrap().push((job.id.clone(), current));
            match job.id.as_str() {
                "s2" => Err(HandlerError::new("boom")),
                "s3" => panic!("kaboom"),
                _ => Ok(job.payload),
            }
        }
    })
    .await;

    let spans = exporter.get_finished_spans().unwrap();
    let seen = seen.lock().unwrap().clone();
    let current_of = |id: &str| seen.iter().find(|(j, _)| j == id).map(|(_, c)| c.clone()).unwrap();

    let s1 = span_of(&spans, "process q", "s1");
    assert_eq!(s1.span_kind, SpanKind::Consumer);
    assert_eq!(s1.span_context.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(s1.parent_span_id.to_string(), "00f067aa0ba902b7");
    assert!(s1.parent_span_is_remote);
    assert_eq!(s1.span_context.trace_state().get("congo"), Some("t61rcWkgMzE"));
    assert_eq!(s1.status, Status::Unset);
    let mut attributes: Vec<(String, String)> =
        s1.attributes.iter().map(|kv| (kv.key.as_str().to_string(), kv.value.to_string())).collect();
    attributes.sort();
    assert_eq!(
        attributes,
        [
            ("messaging.destination.name", "q"),
            ("messaging.message.id", "s1"),
            ("messaging.operation", "process"),
            ("messaging.system", "queueflow"),
            ("queueflow.job.attempt", "3"),
            ("queueflow.task.name", "t"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
    assert_eq!(attribute(s1, "queueflow.job.attempt"), Some(&OtelValue::I64(3)));
    assert_eq!(current_of("s1").span_id(), s1.span_context.span_id(), "the span is current in the handler");
    let inner = spans.iter().find(|s| s.name == "inner s1").expect("the handler's own span");
    assert_eq!(inner.parent_span_id, s1.span_context.span_id());
    assert_eq!(inner.span_context.trace_id(), s1.span_context.trace_id());

    let s2 = span_of(&spans, "process q", "s2");
    assert_eq!(s2.parent_span_id, SpanId::INVALID, "no traceparent: a root span");
    assert_ne!(s2.span_context.trace_id(), s1.span_context.trace_id());
    assert_eq!(s2.status, Status::error("boom"));
    assert_eq!(current_of("s2").span_id(), s2.span_context.span_id());

    let s3 = span_of(&spans, "process q", "s3");
    assert!(matches!(&s3.status, Status::Error { description } if description.contains("kaboom")), "{:?}", s3.status);
    assert_eq!(attribute(s3, "queueflow.job.attempt"), Some(&OtelValue::I64(1)));
}

// --- raw calls ----------------------------------------------------------------------------------

#[tokio::test]
async fn the_visibility_routes_send_and_decode_their_typed_bodies() {
    let (base, log) = serve(|req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/api/v1/jobs/j1/logs") => Resp::json(200, json!({"stored": 2, "dropped": 0, "last_seq": 7})),
        ("POST", "/api/v1/jobs/j1/heartbeat") => Resp::json(200, json!({"status": "running"})),
        ("GET", "/api/v1/jobs/j1/logs") => Resp::json(
            200,
            json!({"lines": [
                {"seq": 201, "attempt": 2, "ts": "2026-12-03T20:41:49.112Z", "level": "info", "message": "loading"},
                {"seq": 202, "attempt": 2, "ts": "2026-12-03T20:41:50Z", "message": "no level"},
            ], "last_seq": 950, "dropped": 3, "has_more": true}),
        ),
        ("GET", "/api/v1/jobs/j1/attempts") => Resp::json(
            200,
            json!({"attempts": [
                {"attempt": 1, "outcome": "lease_expired", "worker_id": "box-1", "started_at": "2026-12-03T20:00:00Z",
                 "ended_at": "2026-12-03T20:01:02Z", "duration_secs": 62.1, "error_message": "lease expired"},
                {"attempt": 2, "outcome": "running"},
                {"attempt": 3, "outcome": "something_new"},
            ]}),
        ),
        ("GET", "/api/v1/workers") => Resp::json(
            200,
            json!({"workers": [
                {"worker_id": "box-1:4711", "queues": ["renders"], "in_flight": 3, "first_seen_at": "2026-12-03T20:00:00Z",
                 "last_seen_at": "2026-12-03T20:41:49Z", "live": true,
                 "info": {"hostname": "box-1", "sdk": "python", "version": "2.0.1", "tasks": ["render"]}},
                {"worker_id": "old", "queues": [], "in_flight": 0, "first_seen_at": "2026-12-01T00:00:00Z",
                 "last_seen_at": "2026-12-01T00:00:00Z", "live": false},
            ]}),
        ),
        ("GET", "/api/v1/jobs/j1") => {
            let mut j = job("j1", "t", json!({}));
            j["progress"] = json!({"percent": 42.5, "message": "frames", "updated_at": "2026-12-03T20:41:49Z"});
            Resp::json(200, j)
        }
        _ => Resp::error(404, "not found"),
    })
    .await;
    let qf = client(&base);
    let lines = vec![
        LogLineRequest {
            message: "loading".into(),
            level: Some("info".into()),
            ts: Some("2026-12-03T20:41:49Z".into()),
        },
        LogLineRequest { message: "plain".into(), ..Default::default() },
    ];
    let posted =
        qf.post_job_logs("j1", &PostJobLogsRequest { lease_token: "tok".into(), lines: lines.clone() }).await.unwrap();
    assert_eq!(posted, PostJobLogsResponse { stored: 2, dropped: 0, last_seq: 7 });
    let beat = HeartbeatRequest {
        lease_token: "tok".into(),
        extend_secs: 30,
        progress: Some(ProgressReport { percent: 42.5, message: Some("frames".into()) }),
    };
    assert_eq!(qf.heartbeat("j1", &beat).await.unwrap().status, "running");
    let page = qf.job_logs("j1", &JobLogsParams { after: Some(200), limit: Some(100) }).await.unwrap();
    assert_eq!((page.last_seq, page.dropped, page.has_more), (950, 3, true));
    assert_eq!(page.lines[0].level.as_deref(), Some("info"));
    assert_eq!((page.lines[1].seq, page.lines[1].attempt, page.lines[1].level.as_deref()), (202, 2, None));
    qf.job_logs("j1", &JobLogsParams::default()).await.unwrap();
    let attempts = qf.job_attempts("j1").await.unwrap().attempts;
    assert_eq!(attempts[0].outcome, AttemptOutcome::LeaseExpired);
    assert_eq!(attempts[0].duration_secs, Some(62.1));
    assert_eq!((attempts[1].outcome, attempts[1].ended_at.as_deref()), (AttemptOutcome::Running, None));
    assert_eq!(attempts[2].outcome, AttemptOutcome::Other);
    let workers = qf.list_workers().await.unwrap().workers;
    assert_eq!(workers[0].info.as_ref().unwrap().tasks.as_deref(), Some(&["render".to_string()][..]));
    assert!(workers[0].live && workers[1].info.is_none() && !workers[1].live);
    let got = qf.get_job("j1").await.unwrap();
    let progress = got.progress.expect("progress");
    assert_eq!((progress.percent, progress.message.as_deref()), (42.5, Some("frames")));

    let log = log.lock().unwrap().clone();
    assert_eq!(log[0].header("authorization"), Some("Bearer worker-key"));
    assert_eq!(
        log[0].json(),
        json!({"lease_token": "tok", "lines": [
            {"message": "loading", "level": "info", "ts": "2026-12-03T20:41:49Z"}, {"message": "plain"}]})
    );
    assert_eq!(
        log[1].json(),
        json!({"lease_token": "tok", "extend_secs": 30, "progress": {"percent": 42.5, "message": "frames"}})
    );
    assert_eq!((log[2].path.as_str(), log[2].query.as_str()), ("/api/v1/jobs/j1/logs", "after=200&limit=100"));
    assert_eq!(log[2].header("authorization"), Some("Bearer tenant-key"));
    assert_eq!(log[3].query, "");
    assert!(log[4..].iter().all(|r| r.header("authorization") == Some("Bearer tenant-key")));
}

#[tokio::test]
async fn a_log_post_the_server_would_refuse_is_refused_before_any_call() {
    let (base, log) = serve(server).await;
    let qf = client(&base);
    let line = |message: String| LogLineRequest { message, ..Default::default() };
    for lines in [
        vec![],
        (0..101).map(|n| line(n.to_string())).collect(),
        vec![line("a".repeat(40_000)), line("b".repeat(30_000))],
    ] {
        let req = PostJobLogsRequest { lease_token: "tok".into(), lines };
        assert!(matches!(qf.post_job_logs("j1", &req).await, Err(Error::InvalidArgument(_))));
    }
    assert!(log.lock().unwrap().is_empty());
}

#[test]
fn upstream_answers_without_the_extensions_still_decode() {
    let leased: LeaseJobsResponse =
        serde_json::from_value(json!({"jobs": [{"job": job("j1", "t", json!({})), "lease_token": "tok"}]})).unwrap();
    let item = &leased.jobs[0];
    assert_eq!(
        (item.traceparent.as_deref(), item.tracestate.as_deref(), item.job.progress.as_ref()),
        (None, None, None)
    );
    let request = LeaseJobsRequest { max_jobs: Some(1), ..Default::default() };
    assert_eq!(serde_json::to_value(&request).unwrap(), json!({"max_jobs": 1}));
    let beat = HeartbeatRequest { lease_token: "t".into(), extend_secs: 5, progress: None };
    assert_eq!(serde_json::to_value(&beat).unwrap(), json!({"lease_token": "t", "extend_secs": 5}));
}
