//! Client and worker behaviours against a local stub server: answers a real server gives only
//! by accident of timing (503s, a heartbeat saying `cancelled`, a lost lease, a streamed SSE body).
//! The real-server proof is the conformance suite (tests/sdk in the repository).

mod stub;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stub::{job, requests, serve, Req, Resp};
use unofficial_queueflow_client::*;

const LIMIT: Duration = Duration::from_secs(15);

fn client(base: &str) -> Client {
    Client::builder(base, "tenant-key").worker_token("worker-key").build()
}

/// A lease route handing out `jobs` (one batch per call, in order), then empty long-polls.
fn leases(batches: Vec<Vec<serde_json::Value>>) -> impl Fn(&Req) -> Option<Resp> + Send + Sync {
    let calls = AtomicUsize::new(0);
    move |req: &Req| {
        if !req.path.ends_with("/lease") {
            return None;
        }
        let n = calls.fetch_add(1, Ordering::SeqCst);
        Some(match batches.get(n) {
            Some(batch) => {
                let jobs: Vec<_> = batch
                    .iter()
                    .map(|j| json!({"job": j, "lease_token": format!("tok-{}", j["id"].as_str().unwrap())}))
                    .collect();
                Resp::json(200, json!({"jobs": jobs}))
            }
            None => Resp::json(200, json!({"jobs": []})).after(Duration::from_millis(100)),
        })
    }
}

#[tokio::test]
async fn a_cancelled_heartbeat_cancels_the_handler_and_nothing_is_reported() {
    let lease = leases(vec![vec![job("j1", "t", json!({}))]]);
    let (base, log) = serve(move |req| {
        lease(req).unwrap_or_else(|| {
            if req.path.ends_with("/heartbeat") {
                Resp::json(200, json!({"status": "cancelled"}))
            } else {
                Resp::empty(204)
            }
        })
    })
    .await;
    let observed = Arc::new(AtomicBool::new(false));
    let seen = observed.clone();
    let options = WorkerOptions { lease_secs: 1, wait_secs: 1, ..Default::default() };
    let worker = Worker::new(client(&base), "q", options);
    let stop = worker.shutdown_token();
    let worker = worker.register_with_context("t", move |_job, ctx| {
        let seen = seen.clone();
        let stop = stop.clone();
        async move {
            ctx.cancelled().await;
            assert!(ctx.is_cancelled());
            seen.store(true, Ordering::SeqCst);
            stop.cancel();
            Ok(Map::new())
        }
    });
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    assert!(observed.load(Ordering::SeqCst));
    let beats = requests(&log, "POST", "/heartbeat");
    assert_eq!(beats[0].path, "/api/v1/jobs/j1/heartbeat");
    assert_eq!(beats[0].json(), json!({"lease_token": "tok-j1", "extend_secs": 1}));
    assert_eq!(beats[0].header("authorization"), Some("Bearer worker-key"));
    assert!(requests(&log, "POST", "/complete").is_empty());
    assert!(requests(&log, "POST", "/fail").is_empty());
}

#[tokio::test]
async fn a_lost_lease_drops_a_handler_that_ignores_cancellation() {
    let lease = leases(vec![vec![job("j1", "t", json!({}))]]);
    let (base, log) = serve(move |req| {
        lease(req).unwrap_or_else(|| {
            if req.path.ends_with("/heartbeat") {
                Resp::error(409, "lease is no longer held")
            } else {
                Resp::empty(204)
            }
        })
    })
    .await;
    let options =
        WorkerOptions { lease_secs: 1, wait_secs: 1, cancel_grace: Duration::from_millis(200), ..Default::default() };
    let worker = Worker::new(client(&base), "q", options).register("t", |_job| async move {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(Map::new())
    });
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(1200)).await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), run).await.expect("drained promptly").unwrap().unwrap();
    assert_eq!(requests(&log, "POST", "/heartbeat").len(), 1);
    assert!(requests(&log, "POST", "/complete").is_empty());
    assert!(requests(&log, "POST", "/fail").is_empty());
}

#[tokio::test]
async fn every_held_job_of_a_batch_is_heartbeated_while_it_waits() {
    let batch = vec![job("j1", "t", json!({"n": 1})), job("j2", "t", json!({"n": 2})), job("j3", "t", json!({"n": 3}))];
    let lease = leases(vec![batch]);
    let (base, log) = serve(move |req| {
        lease(req).unwrap_or_else(|| {
            if req.path.ends_with("/heartbeat") {
                Resp::json(200, json!({"status": "running"}))
            } else {
                Resp::empty(204)
            }
        })
    })
    .await;
    let done = Arc::new(AtomicUsize::new(0));
    let options =
        WorkerOptions { lease_secs: 1, wait_secs: 1, concurrency: 1, batch_size: Some(3), ..Default::default() };
    let worker = Worker::new(client(&base), "q", options);
    let stop = worker.shutdown_token();
    let counter = done.clone();
    let worker = worker.register("t", move |job| {
        let counter = counter.clone();
        let stop = stop.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            if counter.fetch_add(1, Ordering::SeqCst) == 2 {
                stop.cancel();
            }
            Ok(job.payload)
        }
    });
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    let lease_body = requests(&log, "POST", "/lease")[0].json();
    let asked = ["max_jobs", "lease_secs", "wait_secs"].map(|k| lease_body[k].clone());
    assert_eq!(asked, [json!(3), json!(1), json!(1)], "{lease_body}");
    let beats = requests(&log, "POST", "/heartbeat");
    let for_j3 = beats.iter().filter(|r| r.path == "/api/v1/jobs/j3/heartbeat").count();
    assert!(for_j3 >= 2, "j3 waited ~1.4 s with a 1 s lease but got {for_j3} heartbeats");
    let completes = requests(&log, "POST", "/complete");
    assert_eq!(completes.len(), 3);
    for r in completes {
        let id = r.path.split('/').nth(4).unwrap().to_string();
        let n: i64 = id[1..].parse().unwrap();
        assert_eq!(r.json(), json!({"lease_token": format!("tok-{id}"), "result": {"n": n}}));
    }
}

#[tokio::test]
async fn lease_5xx_and_transport_errors_back_off_and_recover() {
    let calls = AtomicUsize::new(0);
    let (base, log) = serve(move |req| {
        if req.path.ends_with("/lease") {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Resp::error(503, "database unavailable"),
                2 => Resp::text(502, "bad gateway"),
                3 => Resp::json(200, json!({"jobs": [{"job": job("j1", "t", json!({})), "lease_token": "tok"}]})),
                _ => Resp::json(200, json!({"jobs": []})).after(Duration::from_millis(100)),
            }
        } else {
            Resp::empty(204)
        }
    })
    .await;
    let worker = Worker::new(client(&base), "q", WorkerOptions { wait_secs: 1, ..Default::default() });
    let stop = worker.shutdown_token();
    let worker = worker.register("t", move |_job| {
        let stop = stop.clone();
        async move {
            stop.cancel();
            Ok(Map::new())
        }
    });
    let started = std::time::Instant::now();
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    assert!(started.elapsed() >= Duration::from_millis(350), "no backoff: {:?}", started.elapsed());
    assert_eq!(requests(&log, "POST", "/lease").len(), 4);
    assert_eq!(requests(&log, "POST", "/complete").len(), 1);

    // A server that is not there at all: transport errors, and the loop keeps trying until stopped.
    let worker = Worker::new(Client::new("http://127.0.0.1:9", "k"), "q", WorkerOptions::default());
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!run.is_finished(), "the loop gave up on a transport error");
    stop.cancel();
    tokio::time::timeout(LIMIT, run).await.unwrap().unwrap().unwrap();
}

#[tokio::test]
async fn auth_errors_and_other_4xx_from_lease_end_the_loop() {
    for (status, message) in
        [(401, "invalid token"), (403, "a tenant token cannot use the worker routes"), (400, "bad lease_secs")]
    {
        let (base, log) = serve(move |_req| Resp::error(status, message)).await;
        let worker = Worker::new(client(&base), "q", WorkerOptions::default())
            .register("t", |_job| async move { Ok(Map::new()) });
        let err = tokio::time::timeout(LIMIT, worker.run()).await.expect("no spinning").expect_err("an error");
        assert_eq!(err.status(), Some(status));
        assert_eq!(err.body().map(|b| b.error.as_str()), Some(message));
        assert_eq!(err.is_auth(), status != 400);
        assert_eq!(log.lock().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn invalid_options_are_refused_before_any_call() {
    let (base, log) = serve(|_req| Resp::empty(204)).await;
    for options in [
        WorkerOptions { lease_secs: 0, ..Default::default() },
        WorkerOptions { wait_secs: 31, ..Default::default() },
        WorkerOptions { concurrency: 0, ..Default::default() },
        WorkerOptions { batch_size: Some(101), ..Default::default() },
    ] {
        let err = Worker::new(client(&base), "q", options).run().await.expect_err("invalid");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    assert!(log.lock().unwrap().is_empty());
}

#[derive(Debug)]
struct Oops;
impl std::fmt::Display for Oops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("oops")
    }
}
impl std::error::Error for Oops {}

fn may_fail() -> Result<(), Oops> {
    Err(Oops)
}

#[tokio::test]
async fn failures_carry_the_retryable_flag_and_unknown_tasks_are_permanent() {
    let batch = vec![
        job("j1", "perm", json!({})),
        job("j2", "err", json!({})),
        job("j3", "boom", json!({})),
        job("j4", "nobody", json!({})),
    ];
    let lease = leases(vec![batch]);
    let (base, log) = serve(move |req| lease(req).unwrap_or_else(|| Resp::empty(204))).await;
    let options = WorkerOptions { wait_secs: 1, concurrency: 4, ..Default::default() };
    let worker = Worker::new(client(&base), "q", options);
    let stop = worker.shutdown_token();
    let worker = worker
        .register("perm", |_job| async move { Err(HandlerError::permanent("invalid input")) })
        .register("err", |_job| async move {
            may_fail()?;
            Ok(Map::new())
        })
        .register("boom", |_job| async move {
            if true {
                panic!("kaboom");
            }
            Ok(Map::new())
        });
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    tokio::time::timeout(LIMIT, run).await.unwrap().unwrap().unwrap();
    let fails = requests(&log, "POST", "/fail");
    let body = |id: &str| fails.iter().find(|r| r.path == format!("/api/v1/jobs/{id}/fail")).map(Req::json).unwrap();
    assert_eq!(body("j1"), json!({"lease_token": "tok-j1", "error": "invalid input", "retryable": false}));
    assert_eq!(body("j2"), json!({"lease_token": "tok-j2", "error": "oops", "retryable": true}));
    assert_eq!(body("j3")["retryable"], json!(true));
    assert!(body("j3")["error"].as_str().unwrap().contains("kaboom"));
    assert_eq!(body("j4")["retryable"], json!(false));
    assert_eq!(fails.len(), 4);
}

#[tokio::test]
async fn a_report_without_an_answer_is_sent_again_but_a_409_is_final() {
    let lease = leases(vec![vec![job("j1", "t", json!({})), job("j2", "t", json!({}))]]);
    let j1_calls = AtomicUsize::new(0);
    let (base, log) = serve(move |req| {
        lease(req).unwrap_or_else(|| match req.path.as_str() {
            "/api/v1/jobs/j1/complete" if j1_calls.fetch_add(1, Ordering::SeqCst) == 0 => {
                Resp::error(503, "restarting")
            }
            "/api/v1/jobs/j2/complete" => Resp::error(409, "lease is no longer held"),
            _ => Resp::empty(204),
        })
    })
    .await;
    let options = WorkerOptions { wait_secs: 1, concurrency: 2, ..Default::default() };
    let worker = Worker::new(client(&base), "q", options).register("t", |_job| async move { Ok(Map::new()) });
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    tokio::time::sleep(Duration::from_millis(800)).await;
    stop.cancel();
    tokio::time::timeout(LIMIT, run).await.unwrap().unwrap().unwrap();
    assert_eq!(requests(&log, "POST", "/j1/complete").len(), 2);
    assert_eq!(requests(&log, "POST", "/j2/complete").len(), 1);
}

#[tokio::test]
async fn shutdown_drains_running_handlers() {
    let lease = leases(vec![vec![job("j1", "t", json!({}))]]);
    let (base, log) = serve(move |req| lease(req).unwrap_or_else(|| Resp::empty(204))).await;
    let started = Arc::new(tokio::sync::Notify::new());
    let signal = started.clone();
    let worker = Worker::new(client(&base), "q", WorkerOptions { wait_secs: 1, ..Default::default() }).register(
        "t",
        move |_job| {
            let signal = signal.clone();
            async move {
                signal.notify_one();
                tokio::time::sleep(Duration::from_millis(400)).await;
                Ok(Map::new())
            }
        },
    );
    let stop = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    started.notified().await;
    stop.cancel();
    tokio::time::timeout(LIMIT, run).await.unwrap().unwrap().unwrap();
    assert_eq!(requests(&log, "POST", "/complete").len(), 1, "the running handler was not drained");
}

#[tokio::test]
async fn dropping_the_run_future_stops_its_handlers() {
    let lease = leases(vec![vec![job("j1", "t", json!({}))]]);
    let (base, log) = serve(move |req| lease(req).unwrap_or_else(|| Resp::empty(204))).await;
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    let worker = Worker::new(client(&base), "q", WorkerOptions { wait_secs: 1, ..Default::default() }).register(
        "t",
        move |_job| {
            let flag = flag.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                flag.store(true, Ordering::SeqCst);
                Ok(Map::new())
            }
        },
    );
    assert!(tokio::time::timeout(Duration::from_millis(200), worker.run()).await.is_err());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!finished.load(Ordering::SeqCst), "a handler outlived its dropped worker");
    assert!(requests(&log, "POST", "/complete").is_empty());
}

// --- client -------------------------------------------------------------------------------------

#[tokio::test]
async fn credentials_headers_query_and_paths() {
    let (base, log) = serve(|req| match req.path.as_str() {
        "/api/v1/jobs" if req.method == "POST" => Resp::json(201, json!({"job_id": "j1"})),
        "/api/v1/jobs" => Resp::json(200, json!({"jobs": [], "limit": 2, "offset": 0, "has_more": false})),
        p if p.ends_with("/lease") => Resp::json(200, json!({"jobs": []})),
        p if p.ends_with("/pause") => {
            Resp::json(200, json!({"queue": "a/b c", "paused": true, "pending": 0, "running": 0}))
        }
        "/health" => Resp::json(200, json!({"status": "healthy", "timestamp": "t", "version": "1"})),
        _ => Resp::error(404, "not found"),
    })
    .await;
    let c = client(&base);
    let created = c.create_job_with_key(&CreateJobRequest::new("t"), "key-1").await.unwrap();
    assert_eq!(created.job_id, "j1");
    let params = ListParams {
        queue: Some("q 1".into()),
        limit: Some(2),
        include_total: Some(true),
        cursor: Some("c+/=".into()),
        ..Default::default()
    };
    c.list_jobs(&params).await.unwrap();
    c.lease("q", &LeaseJobsRequest { max_jobs: Some(1), ..Default::default() }).await.unwrap();
    Client::new(&base, "only-tenant").lease("q", &LeaseJobsRequest::default()).await.unwrap();
    let paused = c.pause_queue("a/b c").await.unwrap();
    assert!(paused.paused);
    assert_eq!(c.health().await.unwrap().status, "healthy");

    let log = log.lock().unwrap();
    assert_eq!(log[0].header("idempotency-key"), Some("key-1"));
    assert_eq!(log[0].header("authorization"), Some("Bearer tenant-key"));
    assert_eq!(log[0].json(), json!({"task_name": "t"}));
    assert_eq!(log[1].query, "limit=2&include_total=true&cursor=c%2B%2F%3D&queue=q+1");
    assert_eq!(log[2].header("authorization"), Some("Bearer worker-key"));
    assert_eq!(
        log[3].header("authorization"),
        Some("Bearer only-tenant"),
        "the worker token defaults to the tenant token"
    );
    assert_eq!(log[4].path, "/api/v1/queues/a%2Fb%20c/pause");
    assert_eq!(log[5].header("authorization"), None);
}

#[tokio::test]
async fn errors_carry_status_and_body() {
    let (base, _log) = serve(|req| match req.path.as_str() {
        "/api/v1/whoami" => Resp::json(200, json!({"tenant": 5})),
        "/ready" => Resp::json(503, json!({"status": "draining"})),
        _ => Resp::error(404, "job not found: x"),
    })
    .await;
    let c = client(&base);
    let err = c.get_job("x").await.unwrap_err();
    assert_eq!(err.status(), Some(404));
    assert_eq!(err.body().unwrap().error, "job not found: x");
    let err = c.whoami().await.unwrap_err();
    assert!(matches!(err, Error::Decode { status: 200, .. }), "{err:?}");
    let err = c.ready().await.unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert!(err.body().is_none());
    let err = Client::new("http://127.0.0.1:9", "k").stats().await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)) && err.is_transient(), "{err:?}");
}

#[tokio::test]
async fn job_events_stream_typed_status_events() {
    let first = job("j1", "t", json!({}));
    let mut second = first.clone();
    second["status"] = json!("completed");
    let chunks = vec![
        (Duration::ZERO, format!("event: status\ndata: {first}\n\n: keep-alive\n\n")),
        (Duration::from_millis(50), "event: status\nda".to_string()),
        (Duration::from_millis(50), format!("ta: {second}\n\n")),
    ];
    let (base, log) =
        serve(move |_req| Resp { status: 200, content_type: "text/event-stream", chunks: chunks.clone() }).await;
    let mut events = client(&base).job_events("j1").await.unwrap();
    assert_eq!(events.next().await.unwrap().unwrap().status, "running");
    assert_eq!(events.next().await.unwrap().unwrap().status, "completed");
    assert!(events.next().await.is_none());
    assert!(events.next().await.is_none());
    assert_eq!(log.lock().unwrap()[0].path, "/api/v1/jobs/j1/events");
}

#[tokio::test]
async fn event_streams_fail_like_any_call() {
    let (base, _log) = serve(|_req| Resp::error(404, "workflow not found: w")).await;
    let err = client(&base).workflow_events("w").await.err().expect("an error");
    assert_eq!(err.status(), Some(404));
}

/// The call shape of the remote-workers page compiles as written.
#[allow(unused_variables, clippy::let_underscore_future)]
#[test]
fn the_documented_call_shape_compiles() {
    let client = Client::new("http://localhost:8000", "k");
    let _ = Worker::new(client, "images", WorkerOptions::default())
        .register("resize-image", |job| async move { Ok(Map::new()) })
        .run();
}

// --- batch acknowledgement ----------------------------------------------------------------------

const BATCH: &str = "/api/v1/jobs/complete";

/// `/openapi.json`, with or without the batch acknowledgement route.
fn openapi(offered: bool) -> Resp {
    let mut paths = json!({"/api/v1/jobs/{job_id}/complete": {"post": {"summary": "complete"}}});
    if offered {
        paths[BATCH] = json!({"post": {"summary": "complete many"}});
    }
    Resp::json(200, json!({"openapi": "3.1.0", "paths": paths}))
}

/// The batch route's answer to `req`: 204 for every item but those `special` names.
fn batch_answer(req: &Req, special: &[(&str, u16)]) -> Resp {
    let results: Vec<_> = req.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let id = item["id"].as_str().unwrap();
            match special.iter().find(|(s, _)| *s == id) {
                Some((_, 409)) => {
                    json!({"id": id, "outcome": "conflict", "status": 409, "error": "lease is no longer held"})
                }
                Some((_, 404)) => json!({"id": id, "outcome": "not_found", "status": 404, "error": "job not found"}),
                Some((_, status)) => json!({"id": id, "outcome": "other", "status": status, "error": "odd"}),
                None => json!({"id": id, "outcome": "completed", "status": 204}),
            }
        })
        .collect();
    Resp::json(200, json!({"results": results}))
}

/// A server offering the batch route: `batches` answer the lease calls in turn, `answer` each
/// batch acknowledgement, and every other call gets a 204.
async fn serve_batch_route(
    batches: Vec<Vec<serde_json::Value>>,
    answer: impl Fn(&Req) -> Resp + Send + Sync + 'static,
) -> (String, stub::Log) {
    let lease = leases(batches);
    serve(move |req| {
        lease(req).unwrap_or_else(|| match req.path.as_str() {
            "/openapi.json" => openapi(true),
            BATCH => answer(req),
            _ => Resp::empty(204),
        })
    })
    .await
}

/// The ids of each batch acknowledgement call, in order.
fn batches(log: &stub::Log) -> Vec<Vec<String>> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|r| r.method == "POST" && r.path == BATCH)
        .map(|r| r.json()["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect())
        .collect()
}

/// The ids completed with the per-job route, in order.
fn completed_alone(log: &stub::Log) -> Vec<String> {
    requests(log, "POST", "/complete")
        .into_iter()
        .filter(|r| r.path != BATCH)
        .map(|r| r.path.split('/').nth(4).unwrap().to_string())
        .collect()
}

fn probes(log: &stub::Log) -> usize {
    requests(log, "GET", "/openapi.json").len()
}

/// A worker whose handlers of task `t` return the payload, and that stops after `n` of them.
fn stopping_worker(base: &str, options: WorkerOptions, n: usize, delay: Duration) -> Worker {
    let worker = Worker::new(client(base), "q", options);
    let stop = worker.shutdown_token();
    let done = Arc::new(AtomicUsize::new(0));
    worker.register("t", move |job| {
        let (stop, done) = (stop.clone(), done.clone());
        async move {
            tokio::time::sleep(delay).await;
            if done.fetch_add(1, Ordering::SeqCst) + 1 >= n {
                stop.cancel();
            }
            Ok(job.payload)
        }
    })
}

#[tokio::test]
async fn successes_go_through_the_batch_route_when_the_server_offers_it() {
    let batch: Vec<_> = (1..=4).map(|n| job(&format!("j{n}"), "t", json!({"n": n}))).collect();
    let (base, log) =
        serve_batch_route(vec![batch], |req| batch_answer(req, &[]).after(Duration::from_millis(300))).await;
    // One handler at a time, each instant, and no lingering: the first success goes alone at once,
    // the other three finish while that call is in flight and go together in the next.
    let options = WorkerOptions {
        wait_secs: 1,
        concurrency: 1,
        batch_size: Some(4),
        ack_linger: Duration::ZERO,
        ..Default::default()
    };
    let worker = stopping_worker(&base, options, 4, Duration::ZERO);
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    assert_eq!(batches(&log), vec![vec!["j1"], vec!["j2", "j3", "j4"]]);
    assert_eq!(probes(&log), 1);
    assert!(completed_alone(&log).is_empty());
    let calls = requests(&log, "POST", BATCH);
    assert_eq!(calls[0].header("authorization"), Some("Bearer worker-key"));
    assert_eq!(calls[0].json(), json!({"jobs": [{"id": "j1", "lease_token": "tok-j1", "result": {"n": 1}}]}));
    assert_eq!(calls[1].json()["jobs"][2], json!({"id": "j4", "lease_token": "tok-j4", "result": {"n": 4}}));
    let probe = &requests(&log, "GET", "/openapi.json")[0];
    assert_eq!(probe.header("authorization"), None);
    let first_ack = log.lock().unwrap().iter().position(|r| r.path == BATCH).unwrap();
    let probe_at = log.lock().unwrap().iter().position(|r| r.path == "/openapi.json").unwrap();
    assert!(probe_at < first_ack, "the probe comes before the first acknowledgement");
}

#[tokio::test]
async fn item_answers_are_final_failures_stay_per_job_and_a_stop_flushes_the_buffer() {
    let batch = vec![
        job("j1", "t", json!({})),
        job("j2", "t", json!({})),
        job("j3", "t", json!({})),
        job("j4", "t", json!({})),
        job("j5", "bad", json!({})),
    ];
    let (base, log) = serve_batch_route(vec![batch], |req| {
        batch_answer(req, &[("j2", 409), ("j3", 404), ("j4", 422)]).after(Duration::from_millis(400))
    })
    .await;
    let options = WorkerOptions { wait_secs: 1, concurrency: 5, ..Default::default() };
    let worker = stopping_worker(&base, options, 4, Duration::from_millis(50))
        .register("bad", |_job| async move { Err(HandlerError::permanent("invalid input")) });
    let started = std::time::Instant::now();
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    // The stop came with the last success; run() returned only once its acknowledgement was answered.
    assert!(started.elapsed() >= Duration::from_millis(450), "returned before the flush: {:?}", started.elapsed());
    let mut acked: Vec<String> = batches(&log).concat();
    acked.sort();
    assert_eq!(acked, ["j1", "j2", "j3", "j4"], "each success sent once: 409, 404 and 422 are final");
    assert!(completed_alone(&log).is_empty());
    let fails = requests(&log, "POST", "/fail");
    assert_eq!(fails.len(), 1);
    assert_eq!(fails[0].path, "/api/v1/jobs/j5/fail");
}

#[tokio::test]
async fn without_the_route_in_openapi_each_job_is_completed_alone() {
    for probe in 0..3 {
        let lease = leases(vec![vec![job("j1", "t", json!({})), job("j2", "t", json!({})), job("j3", "t", json!({}))]]);
        let (base, log) = serve(move |req| {
            lease(req).unwrap_or_else(|| match (req.path.as_str(), probe) {
                ("/openapi.json", 0) => openapi(false),
                ("/openapi.json", 1) => Resp::error(404, "not found"),
                ("/openapi.json", _) => Resp::text(200, "<html>not json</html>"),
                (BATCH, _) => batch_answer(req, &[]),
                _ => Resp::empty(204),
            })
        })
        .await;
        let options = WorkerOptions { wait_secs: 1, concurrency: 3, ..Default::default() };
        let worker = stopping_worker(&base, options, 3, Duration::from_millis(20));
        tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
        let mut alone = completed_alone(&log);
        alone.sort();
        assert_eq!(alone, ["j1", "j2", "j3"], "probe answer {probe}");
        assert!(batches(&log).is_empty(), "probe answer {probe}");
        assert_eq!(probes(&log), 1, "any answer settles the question (probe answer {probe})");
    }
}

#[tokio::test]
async fn a_probe_without_an_answer_is_asked_again_at_the_next_flush() {
    let lease = leases(vec![vec![job("j1", "t", json!({}))], vec![job("j2", "t", json!({}))]]);
    let probed = AtomicUsize::new(0);
    let (base, log) = serve(move |req| {
        lease(req).unwrap_or_else(|| match req.path.as_str() {
            "/openapi.json" if probed.fetch_add(1, Ordering::SeqCst) == 0 => Resp::error(503, "starting"),
            "/openapi.json" => openapi(true),
            BATCH => batch_answer(req, &[]),
            _ => Resp::empty(204),
        })
    })
    .await;
    // One job held at a time: j2 is leased only once j1's acknowledgement was answered.
    let options = WorkerOptions { wait_secs: 1, concurrency: 1, ..Default::default() };
    let worker = stopping_worker(&base, options, 2, Duration::ZERO);
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    assert_eq!(completed_alone(&log), ["j1"], "the open question sends that flush one call per job");
    assert_eq!(batches(&log), vec![vec!["j2"]]);
    assert_eq!(probes(&log), 2);
}

/// The lease's jobs after the first are still waiting or running when its success is ready: with
/// a linger longer than the test, the call waits until every one is decided, and all four go
/// together (on the multi-threaded runtime, where the flusher runs beside the handlers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn successes_of_handlers_still_running_join_the_same_call() {
    let batch: Vec<_> = (1..=4).map(|n| job(&format!("j{n}"), "t", json!({"n": n}))).collect();
    let (base, log) = serve_batch_route(vec![batch], |req| batch_answer(req, &[])).await;
    let options = WorkerOptions {
        wait_secs: 1,
        concurrency: 1,
        batch_size: Some(4),
        ack_linger: Duration::from_secs(60),
        ..Default::default()
    };
    let worker = stopping_worker(&base, options, 4, Duration::from_millis(20));
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    let mut calls = batches(&log);
    calls.iter_mut().for_each(|call| call.sort());
    assert_eq!(calls, vec![vec!["j1", "j2", "j3", "j4"]]);
}

/// Jobs whose outcome is decided take no handler slot while their acknowledgement is in flight:
/// with two of four handlers done (their acknowledgement unanswered) and two still running, the
/// next lease goes out at once for the two free slots, rather than after that answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_does_not_wait_for_the_acknowledgement_of_jobs_already_done() {
    const ANSWER_AFTER: Duration = Duration::from_secs(2);
    let first: Vec<_> = ["a1", "a2"].iter().map(|id| job(id, "t", json!({}))).collect();
    let running: Vec<_> = ["a3", "a4"].iter().map(|id| job(id, "wait", json!({}))).collect();
    let second: Vec<_> = ["b1", "b2"].iter().map(|id| job(id, "t", json!({}))).collect();
    let lease = leases(vec![[first, running].concat(), second]);
    let first_ack: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let second_lease_after_ack: Arc<Mutex<Option<Duration>>> = Arc::default();
    let second_lease = Arc::new(AtomicBool::new(false));
    let (acked, seen, leased_again) = (first_ack.clone(), second_lease_after_ack.clone(), second_lease.clone());
    let lease_calls = AtomicUsize::new(0);
    let (base, log) = serve(move |req| {
        if req.path.ends_with("/lease") && lease_calls.fetch_add(1, Ordering::SeqCst) == 1 {
            *seen.lock().unwrap() = acked.lock().unwrap().map(|at| at.elapsed());
            leased_again.store(true, Ordering::SeqCst);
        }
        lease(req).unwrap_or_else(|| match req.path.as_str() {
            "/openapi.json" => openapi(true),
            BATCH => {
                acked.lock().unwrap().get_or_insert_with(std::time::Instant::now);
                batch_answer(req, &[]).after(ANSWER_AFTER)
            }
            _ => Resp::empty(204),
        })
    })
    .await;
    let options = WorkerOptions {
        wait_secs: 1,
        concurrency: 4,
        batch_size: Some(4),
        ack_linger: Duration::ZERO,
        ..Default::default()
    };
    let worker = Worker::new(client(&base), "q", options);
    let stop = worker.shutdown_token();
    let done = Arc::new(AtomicUsize::new(0));
    let finish = move |done: &AtomicUsize| {
        if done.fetch_add(1, Ordering::SeqCst) + 1 >= 6 {
            stop.cancel();
        }
    };
    let finish = Arc::new(finish);
    let (d1, f1) = (done.clone(), finish.clone());
    let worker = worker
        .register("t", move |job| {
            let (done, finish) = (d1.clone(), f1.clone());
            async move {
                finish(&done);
                Ok(job.payload)
            }
        })
        .register("wait", move |job| {
            let (done, finish, leased_again) = (done.clone(), finish.clone(), second_lease.clone());
            async move {
                while !leased_again.load(Ordering::SeqCst) {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                finish(&done);
                Ok(job.payload)
            }
        });
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    let leases = requests(&log, "POST", "/lease");
    assert_eq!(leases[1].json()["max_jobs"], json!(2), "the second lease asks for the free slots");
    // (None: the second lease even came before the acknowledgement was sent.)
    let waited = *second_lease_after_ack.lock().unwrap();
    if let Some(waited) = waited {
        assert!(waited < ANSWER_AFTER, "the second lease waited for the acknowledgement's answer ({waited:?})");
    }
}

/// The wait is bounded: a handler that runs on does not hold back a success already made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_still_running_does_not_hold_back_a_success_past_the_linger() {
    let batch = vec![job("fast", "t", json!({})), job("slow", "slow", json!({}))];
    let (base, log) = serve_batch_route(vec![batch], |req| batch_answer(req, &[])).await;
    let options = WorkerOptions {
        wait_secs: 1,
        concurrency: 2,
        batch_size: Some(2),
        ack_linger: Duration::from_millis(5),
        ..Default::default()
    };
    let worker = Worker::new(client(&base), "q", options);
    let stop = worker.shutdown_token();
    let calls = log.clone();
    let worker = worker.register("t", |job| async move { Ok(job.payload) }).register("slow", move |job| {
        let (stop, calls) = (stop.clone(), calls.clone());
        async move {
            // Ends only once the fast job's success has gone out on its own.
            while batches(&calls).is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            stop.cancel();
            Ok(job.payload)
        }
    });
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    assert_eq!(batches(&log), vec![vec!["fast"], vec!["slow"]]);
}

#[tokio::test]
async fn a_404_or_405_from_the_batch_route_switches_to_one_call_per_job_for_good() {
    for status in [404u16, 405] {
        let lease = leases(vec![
            vec![job("j1", "t", json!({"n": 1})), job("j2", "t", json!({"n": 2}))],
            vec![job("j3", "t", json!({"n": 3}))],
        ]);
        let (base, log) = serve(move |req| {
            lease(req).unwrap_or_else(|| match req.path.as_str() {
                "/openapi.json" => openapi(true),
                BATCH => Resp::error(status, "no such route").after(Duration::from_millis(100)),
                _ => Resp::empty(204),
            })
        })
        .await;
        let options = WorkerOptions { wait_secs: 1, concurrency: 2, ..Default::default() };
        let worker = stopping_worker(&base, options, 3, Duration::ZERO);
        tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
        assert_eq!(batches(&log).len(), 1, "HTTP {status}: the batch route is not tried again");
        let mut alone = completed_alone(&log);
        alone.sort();
        assert_eq!(alone, ["j1", "j2", "j3"], "HTTP {status}: every success resent or sent alone");
        let j1 = requests(&log, "POST", "/j1/complete");
        assert_eq!(j1[0].json(), json!({"lease_token": "tok-j1", "result": {"n": 1}}));
        assert_eq!(probes(&log), 1);
    }
}

#[tokio::test]
async fn an_unanswered_batch_is_sent_again_with_backoff_while_its_job_stays_heartbeated() {
    let lease = leases(vec![vec![job("j1", "t", json!({"n": 1}))]]);
    let calls = AtomicUsize::new(0);
    let (base, log) = serve(move |req| {
        lease(req).unwrap_or_else(|| match req.path.as_str() {
            "/openapi.json" => openapi(true),
            BATCH => match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Resp::error(503, "database unavailable").after(Duration::from_millis(700)),
                1 => Resp::text(502, "bad gateway").after(Duration::from_millis(500)),
                _ => batch_answer(req, &[]),
            },
            p if p.ends_with("/heartbeat") => Resp::json(200, json!({"status": "running"})),
            _ => Resp::empty(204),
        })
    })
    .await;
    let options = WorkerOptions { lease_secs: 1, wait_secs: 1, ..Default::default() };
    let worker = stopping_worker(&base, options, 1, Duration::ZERO);
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    assert_eq!(batches(&log), vec![vec!["j1"], vec!["j1"], vec!["j1"]]);
    let bodies: Vec<_> = requests(&log, "POST", BATCH).iter().map(Req::json).collect();
    assert!(bodies.iter().all(|b| *b == bodies[0]), "the same acknowledgement is sent again");
    assert!(completed_alone(&log).is_empty());
    let beats = requests(&log, "POST", "/j1/heartbeat").len();
    assert!(beats >= 2, "the job waited ~1.3 s for its answer with a 1 s lease but got {beats} heartbeats");
}

#[tokio::test]
async fn a_job_taken_back_while_its_acknowledgement_waits_is_dropped() {
    let lease = leases(vec![vec![job("j1", "t", json!({}))]]);
    let (base, log) = serve(move |req| {
        lease(req).unwrap_or_else(|| match req.path.as_str() {
            "/openapi.json" => openapi(true),
            BATCH => Resp::error(503, "database unavailable").after(Duration::from_millis(300)),
            p if p.ends_with("/heartbeat") => Resp::error(409, "lease is no longer held"),
            _ => Resp::empty(204),
        })
    })
    .await;
    let options = WorkerOptions { lease_secs: 1, wait_secs: 1, ..Default::default() };
    let worker = stopping_worker(&base, options, 1, Duration::ZERO);
    tokio::time::timeout(LIMIT, worker.run()).await.expect("run finished").expect("run ok");
    // The heartbeat at 500 ms says the lease is gone: no more attempts after that.
    let sent = batches(&log).len();
    assert!((1..=2).contains(&sent), "{sent} batch calls");
    assert!(completed_alone(&log).is_empty());
}

// --- batch acknowledgement, raw -----------------------------------------------------------------

#[tokio::test]
async fn complete_many_sends_the_items_and_decodes_each_answer() {
    let (base, log) = serve(|req| batch_answer(req, &[("b", 409), ("c", 404)])).await;
    let c = client(&base);
    let item = |id: &str, result: Option<Map<String, Value>>| CompletionItem {
        id: id.into(),
        lease_token: format!("tok-{id}"),
        result,
    };
    let request = CompleteJobsRequest {
        jobs: vec![item("a", Some(json!({"x": 1}).as_object().unwrap().clone())), item("b", None), item("c", None)],
    };
    let answer = c.complete_many(&request).await.unwrap();
    let outcomes: Vec<_> = answer.results.iter().map(|a| (a.id.as_str(), a.outcome, a.status)).collect();
    assert_eq!(
        outcomes,
        [
            ("a", CompletionOutcome::Completed, 204),
            ("b", CompletionOutcome::Conflict, 409),
            ("c", CompletionOutcome::NotFound, 404)
        ]
    );
    assert_eq!(answer.results[0].error, None);
    assert_eq!(answer.results[1].error.as_deref(), Some("lease is no longer held"));
    {
        let log = log.lock().unwrap();
        assert_eq!((log[0].method.as_str(), log[0].path.as_str()), ("POST", BATCH));
        assert_eq!(log[0].header("authorization"), Some("Bearer worker-key"));
        assert_eq!(
            log[0].json(),
            json!({"jobs": [
                {"id": "a", "lease_token": "tok-a", "result": {"x": 1}},
                {"id": "b", "lease_token": "tok-b"},
                {"id": "c", "lease_token": "tok-c"}
            ]})
        );
    }
    for n in [0, MAX_COMPLETIONS + 1] {
        let request = CompleteJobsRequest { jobs: (0..n).map(|i| item(&format!("j{i}"), None)).collect() };
        let err = c.complete_many(&request).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{n} items: {err}");
    }
    assert_eq!(log.lock().unwrap().len(), 1, "refused batches are not sent");
}

#[tokio::test]
async fn offers_batch_complete_reads_openapi() {
    let (base, log) = serve(|_req| openapi(true)).await;
    assert!(client(&base).offers_batch_complete().await.unwrap());
    assert_eq!(log.lock().unwrap()[0].path, "/openapi.json");
    assert_eq!(log.lock().unwrap()[0].header("authorization"), None);
    for (answer, expected) in [
        (openapi(false), Some(false)),
        (Resp::error(404, "not found"), Some(false)),
        (Resp::error(401, "invalid token"), Some(false)),
        (Resp::text(200, "not json"), Some(false)),
        (Resp::error(503, "starting"), None),
    ] {
        let shared = std::sync::Mutex::new(Some(answer));
        let (base, _log) = serve(move |_req| shared.lock().unwrap().take().unwrap_or_else(|| Resp::empty(500))).await;
        let got = client(&base).offers_batch_complete().await;
        assert_eq!(got.as_ref().ok().copied(), expected, "{got:?}");
    }
    let err = Client::new("http://127.0.0.1:9", "k").offers_batch_complete().await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)));
}

#[tokio::test]
async fn worker_key_calls_mint_list_and_revoke_with_the_tenant_token() {
    let key = json!({"id": "k1", "name": "runners", "queues": ["emails"], "created_at": "2026-12-03T14:00:00Z", "expires_at": null});
    let listed = key.clone();
    let (base, log) = serve(move |req| match req.method.as_str() {
        "POST" => {
            let mut minted = key.clone();
            minted["token"] = json!("qfwk_x");
            Resp::json(201, minted)
        }
        "GET" => Resp::json(200, json!({"worker_keys": [listed.clone()]})),
        _ => Resp::empty(204),
    })
    .await;
    let qf = client(&base);
    let req =
        CreateWorkerKeyRequest { name: "runners".into(), queues: Some(vec!["emails".into()]), ..Default::default() };
    let minted = qf.create_worker_key(&req).await.expect("minted");
    assert_eq!(minted.token, "qfwk_x");
    assert_eq!(minted.key.queues, Some(vec!["emails".to_string()]));
    assert_eq!(minted.key.expires_at, None);
    let keys = qf.list_worker_keys().await.expect("listed").worker_keys;
    assert_eq!(keys.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(), ["k1"]);
    qf.delete_worker_key("k1").await.expect("revoked");
    let posted = requests(&log, "POST", "/api/v1/worker-keys");
    assert_eq!(posted[0].json(), json!({"name": "runners", "queues": ["emails"]}));
    assert_eq!(posted[0].header("authorization"), Some("Bearer tenant-key"));
    assert_eq!(requests(&log, "GET", "/api/v1/worker-keys")[0].header("authorization"), Some("Bearer tenant-key"));
    let deleted = requests(&log, "DELETE", "/api/v1/worker-keys/k1");
    assert_eq!(deleted[0].header("authorization"), Some("Bearer tenant-key"));
}

#[tokio::test]
async fn limit_calls_put_get_list_and_delete_with_the_key_encoded_and_the_tenant_token() {
    let policy = json!({"key": "customer:*", "concurrency": 1, "rate": {"count": 10, "per_secs": 1.5}, "running": 0,
        "created_at": "2026-12-03T14:00:00Z", "updated_at": "2026-12-03T14:00:00Z"});
    let mut exact = policy.clone();
    exact["key"] = json!("api:stripe");
    exact["concurrency"] = json!(null);
    exact["running"] = json!(2);
    exact["rate_available"] = json!(7);
    let (base, log) = serve(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("PUT", _) => Resp::json(200, policy.clone()),
        ("GET", "/api/v1/limits") => Resp::json(200, json!({"limits": [exact.clone(), policy.clone()]})),
        ("GET", "/api/v1/limits/api%3Astripe") => Resp::json(200, exact.clone()),
        ("GET", _) => Resp::json(404, json!({"error": "no policy", "timestamp": "2026-12-03T14:00:00Z"})),
        _ => Resp::empty(204),
    })
    .await;
    let qf = client(&base);
    let req = PutLimitRequest { concurrency: Some(1), rate: Some(LimitRate { count: 10, per_secs: 1.5 }) };
    let put = qf.put_limit("customer:*", &req).await.expect("put");
    assert_eq!(put.key, "customer:*");
    assert_eq!(put.concurrency, Some(1));
    assert_eq!(put.rate, Some(LimitRate { count: 10, per_secs: 1.5 }));
    assert_eq!(put.rate_available, None);
    let listed = qf.list_limits().await.expect("listed").limits;
    assert_eq!(listed.iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), ["api:stripe", "customer:*"]);
    let got = qf.get_limit("api:stripe").await.expect("got");
    assert_eq!((got.concurrency, got.running, got.rate_available), (None, 2, Some(7)));
    qf.delete_limit("customer:*").await.expect("deleted");
    let missing = qf.get_limit("customer:42").await.unwrap_err();
    assert_eq!(missing.status(), Some(404));
    let only_cap = PutLimitRequest { concurrency: Some(2), ..Default::default() };
    qf.put_limit("a/b", &only_cap).await.expect("put a/b");
    let log = log.lock().unwrap().clone();
    let calls: Vec<_> = log.iter().map(|r| format!("{} {}", r.method, r.path)).collect();
    assert_eq!(
        calls,
        [
            "PUT /api/v1/limits/customer%3A%2A",
            "GET /api/v1/limits",
            "GET /api/v1/limits/api%3Astripe",
            "DELETE /api/v1/limits/customer%3A%2A",
            "GET /api/v1/limits/customer%3A42",
            "PUT /api/v1/limits/a%2Fb",
        ]
    );
    assert!(log.iter().all(|r| r.header("authorization") == Some("Bearer tenant-key")));
    assert_eq!(log[0].json(), json!({"concurrency": 1, "rate": {"count": 10, "per_secs": 1.5}}));
    assert_eq!(log[5].json(), json!({"concurrency": 2}));
}

#[tokio::test]
async fn a_job_config_sends_its_limits_only_when_set_and_a_job_keeps_them() {
    let (base, log) = serve(|req| match req.method.as_str() {
        "POST" => Resp::json(201, json!({"job_id": "j1"})),
        _ => {
            let mut j = job("j1", "charge", json!({}));
            j["config"] = json!({"priority": 0, "limits": ["customer:42", "api:stripe"]});
            Resp::json(200, j)
        }
    })
    .await;
    let qf = client(&base);
    let limited =
        JobConfigRequest { limits: Some(vec!["customer:42".into(), "api:stripe".into()]), ..Default::default() };
    qf.create_job(&CreateJobRequest::new("charge").config(limited)).await.expect("created");
    let plain = JobConfigRequest { priority: Some(1), ..Default::default() };
    qf.create_job(&CreateJobRequest::new("charge").config(plain)).await.expect("created");
    let got = qf.get_job("j1").await.expect("job");
    assert_eq!(got.config["limits"], json!(["customer:42", "api:stripe"]));
    let posted = requests(&log, "POST", "/api/v1/jobs");
    assert_eq!(posted[0].json()["config"], json!({"limits": ["customer:42", "api:stripe"]}));
    assert_eq!(posted[1].json()["config"], json!({"priority": 1}));
    let step: JobConfig = serde_json::from_value(json!({"limits": ["customer:*"]})).expect("decoded");
    assert_eq!(step.limits, Some(vec!["customer:*".to_string()]));
    assert_eq!(serde_json::to_value(JobConfig::default()).unwrap(), json!({}));
}

#[tokio::test]
async fn a_job_config_sends_its_unique_policy_only_when_set_and_a_job_decodes_it() {
    let (base, log) = serve(|req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/api/v1/jobs/batch") => Resp::json(201, json!({"job_ids": ["j1", "j2"], "count": 2})),
        ("POST", _) => Resp::json(201, json!({"job_id": "j1"})),
        ("GET", "/api/v1/jobs/j1") => {
            let mut j = job("j1", "report", json!({}));
            j["config"] =
                json!({"priority": 0, "unique": {"key": "report:42", "window_secs": 600, "on_conflict": "skip"}});
            Resp::json(200, j)
        }
        _ => Resp::json(200, job("j2", "report", json!({}))),
    })
    .await;
    let qf = client(&base);
    qf.create_job(&CreateJobRequest::new("report").unique(UniquePolicy::new("report:42", 600))).await.expect("created");
    let batch = CreateBatchJobsRequest {
        jobs: vec![
            CreateJobRequest::new("report")
                .unique(UniquePolicy::new("report:43", 60).on_conflict(UniqueConflict::Replace)),
            CreateJobRequest::new("report").config(JobConfigRequest { priority: Some(2), ..Default::default() }),
        ],
    };
    qf.create_jobs_batch(&batch).await.expect("batch");
    let held = qf.get_job("j1").await.expect("job");
    let plain = qf.get_job("j2").await.expect("job");
    let posted = requests(&log, "POST", "/api/v1/jobs");
    assert_eq!(posted[0].json()["config"], json!({"unique": {"key": "report:42", "window_secs": 600}}));
    let items = requests(&log, "POST", "/api/v1/jobs/batch")[0].json()["jobs"].clone();
    assert_eq!(
        items,
        json!([
            {"task_name": "report", "config": {"unique": {"key": "report:43", "window_secs": 60, "on_conflict": "replace"}}},
            {"task_name": "report", "config": {"priority": 2}},
        ])
    );
    assert_eq!(
        held.unique().expect("a policy"),
        Some(UniquePolicy { key: "report:42".into(), window_secs: 600, on_conflict: Some(UniqueConflict::Skip) })
    );
    assert_eq!(held.config["unique"]["on_conflict"], json!("skip"));
    assert_eq!(plain.unique().expect("no policy"), None);
    let mut broken = plain.clone();
    broken.config.insert("unique".into(), json!({"key": "k", "on_conflict": "sometimes"}));
    assert!(broken.unique().is_err());
    assert_eq!(serde_json::to_value(JobConfigRequest::default()).unwrap(), json!({}));
}

#[tokio::test]
async fn a_cron_schedule_sends_its_timezone_only_when_set_and_decodes_its_local_next_run() {
    let schedule = json!({
        "id": "c1", "name": "standup", "cron_expr": "0 9 * * 1-5", "task_name": "remind", "enabled": true,
        "next_run_at": "2026-03-30T07:00:00Z", "created_at": "2026-03-27T12:00:00Z",
    });
    let mut zoned = schedule.clone();
    zoned["timezone"] = json!("Europe/Berlin");
    zoned["next_run_local"] = json!("2026-03-30T09:00:00+02:00");
    let mut plain = schedule.clone();
    plain["id"] = json!("c2");
    plain["name"] = json!("nightly");
    let (base, log) = serve(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", _) => Resp::json(201, json!({"cron_id": "c1"})),
        ("GET", "/api/v1/cron/c1") => Resp::json(200, zoned.clone()),
        ("GET", "/api/v1/cron/c2") => Resp::json(200, plain.clone()),
        _ => Resp::json(200, json!({"crons": [zoned, plain], "limit": 50, "offset": 0, "has_more": false})),
    })
    .await;
    let qf = client(&base);
    let standup = CreateCronRequest {
        name: "standup".into(),
        cron_expr: "0 9 * * 1-5".into(),
        task_name: Some("remind".into()),
        timezone: Some("Europe/Berlin".into()),
        ..Default::default()
    };
    qf.create_cron(&standup).await.expect("created");
    let nightly = CreateCronRequest {
        name: "nightly".into(),
        cron_expr: "0 2 * * *".into(),
        task_name: Some("remind".into()),
        ..Default::default()
    };
    qf.create_cron(&nightly).await.expect("created");
    let got = qf.get_cron("c1").await.expect("schedule");
    let bare = qf.get_cron("c2").await.expect("schedule");
    let listed = qf.list_crons(&ListParams::default()).await.expect("list");
    let posted = requests(&log, "POST", "/api/v1/cron");
    assert_eq!(
        posted[0].json(),
        json!({"name": "standup", "cron_expr": "0 9 * * 1-5", "task_name": "remind", "timezone": "Europe/Berlin"})
    );
    assert_eq!(posted[1].json(), json!({"name": "nightly", "cron_expr": "0 2 * * *", "task_name": "remind"}));
    assert_eq!(got.timezone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(got.next_run_local.as_deref(), Some("2026-03-30T09:00:00+02:00"));
    assert_eq!(bare.timezone, None);
    assert_eq!(bare.next_run_local, None);
    assert_eq!(listed.crons[0], got);
    assert_eq!(listed.crons[1], bare);
    let back = serde_json::to_value(&bare).unwrap();
    assert!(back.get("timezone").is_none() && back.get("next_run_local").is_none());
}

#[tokio::test]
async fn a_workflow_schedule_goes_out_without_a_task_and_comes_back_by_get_and_list() {
    let stored = json!({"name": "etl", "steps": [
        {"name": "extract", "task_name": "etl.extract", "depends_on": [], "payload": {}, "on_failure": "halt",
         "on_success": "continue", "metadata": {}, "queue": "etl"},
        {"name": "nap", "depends_on": ["extract"], "payload": {}, "on_failure": "halt", "on_success": "continue",
         "metadata": {}, "sleep_secs": 60},
    ], "context": {}, "metadata": {}});
    let scheduled = json!({"id": "c1", "name": "nightly", "cron_expr": "0 2 * * *", "enabled": true,
        "next_run_at": "2026-12-04T02:00:00Z", "created_at": "2026-12-03T00:00:00Z", "workflow": stored});
    let plain = json!({"id": "c2", "name": "remind", "cron_expr": "0 2 * * *", "task_name": "remind",
        "queue_name": "q", "enabled": true, "next_run_at": "2026-12-04T02:00:00Z",
        "created_at": "2026-12-03T00:00:00Z"});
    let answer = scheduled.clone();
    let (base, log) = serve(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", _) => Resp::json(201, json!({"cron_id": "c1"})),
        ("GET", "/api/v1/cron/c1") => Resp::json(200, answer.clone()),
        _ => Resp::json(200, json!({"crons": [answer, plain], "limit": 50, "offset": 0, "has_more": false})),
    })
    .await;
    let qf = client(&base);
    let workflow = CreateWorkflowRequest {
        name: "etl".into(),
        steps: vec![
            WorkflowStep::new("extract", "etl.extract").queue("etl"),
            WorkflowStep::sleep("nap", 60).depends_on(["extract"]),
        ],
        ..Default::default()
    };
    let created = qf.create_cron(&CreateCronRequest::for_workflow("nightly", "0 2 * * *", workflow)).await;
    assert_eq!(created.expect("created").cron_id, "c1");
    let got = qf.get_cron("c1").await.expect("schedule");
    let listed = qf.list_crons(&ListParams::default()).await.expect("list");
    let posted = requests(&log, "POST", "/api/v1/cron");
    assert_eq!(
        posted[0].json(),
        json!({"name": "nightly", "cron_expr": "0 2 * * *", "workflow": {"name": "etl", "steps": [
            {"name": "extract", "task_name": "etl.extract", "queue": "etl"},
            {"name": "nap", "depends_on": ["extract"], "sleep_secs": 60},
        ]}})
    );
    assert_eq!(got.task_name, None);
    let steps = &got.workflow.as_ref().expect("a workflow").steps;
    assert_eq!((steps[1].sleep_secs, steps[1].depends_on.clone()), (Some(60), Some(vec!["extract".to_string()])));
    assert_eq!(serde_json::to_value(&got).unwrap(), scheduled);
    assert_eq!(listed.crons[0], got);
    assert_eq!((listed.crons[1].task_name.as_deref(), &listed.crons[1].workflow), (Some("remind"), &None));
}

#[tokio::test]
async fn events_are_sent_and_listed_and_a_waiting_step_shows_its_wake_up_and_key() {
    let kept = json!({"event_id": "e1", "key": "approval:42", "payload": {"by": "ada"}, "delivered": 1,
        "created_at": "2026-12-03T14:00:00Z", "expires_at": "2026-12-04T14:00:00Z"});
    let (base, log) = serve(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("POST", "/api/v1/events") => Resp::json(202, json!({"event_id": "e1", "delivered": 1})),
        ("POST", _) => Resp::json(201, json!({"workflow_id": "w1"})),
        ("GET", "/api/v1/events") => Resp::json(200, json!({"events": [kept.clone()]})),
        _ => Resp::json(
            200,
            json!({"steps": [
                {"name": "approve", "status": "running", "wake_at": "2026-12-03T15:00:00Z", "event_key": "approval:42"},
                {"name": "nap", "status": "pending"},
            ]}),
        ),
    })
    .await;
    let qf = client(&base);
    let workflow = CreateWorkflowRequest {
        name: "ship".into(),
        steps: vec![
            WorkflowStep::wait_for_event("approve", "approval:{{context.order}}").timeout_secs(3600),
            WorkflowStep::sleep("nap", 1).depends_on(["approve"]),
        ],
        context: json!({"order": 42}).as_object().cloned(),
        ..Default::default()
    };
    assert_eq!(qf.create_workflow(&workflow).await.expect("created").workflow_id, "w1");
    let states = qf.workflow_steps("w1").await.expect("steps").steps;
    assert_eq!(states[0].wake_at.as_deref(), Some("2026-12-03T15:00:00Z"));
    assert_eq!(states[0].event_key.as_deref(), Some("approval:42"));
    assert_eq!((states[1].wake_at.as_deref(), states[1].event_key.as_deref()), (None, None));
    let payload = json!({"by": "ada"}).as_object().cloned().unwrap();
    let sent = qf.send_event(&PostEventRequest::new("approval:42").payload(payload.clone())).await.expect("sent");
    assert_eq!(sent, PostEventResponse { event_id: "e1".into(), delivered: 1 });
    qf.send_event(&PostEventRequest::new("ping")).await.expect("sent");
    let params = ListEventsParams { key: Some("approval:42".into()), limit: Some(5) };
    let listed = qf.list_events(&params).await.expect("listed").events;
    assert_eq!(
        listed,
        [Event {
            event_id: "e1".into(),
            key: "approval:42".into(),
            payload,
            delivered: 1,
            created_at: "2026-12-03T14:00:00Z".into(),
            expires_at: "2026-12-04T14:00:00Z".into(),
        }]
    );
    qf.list_events(&ListEventsParams::default()).await.expect("listed");
    let log = log.lock().unwrap().clone();
    let calls: Vec<_> = log.iter().map(|r| format!("{} {}?{}", r.method, r.path, r.query)).collect();
    assert_eq!(
        calls,
        [
            "POST /api/v1/workflows?",
            "GET /api/v1/workflows/w1/steps?",
            "POST /api/v1/events?",
            "POST /api/v1/events?",
            "GET /api/v1/events?key=approval%3A42&limit=5",
            "GET /api/v1/events?",
        ]
    );
    assert!(log.iter().all(|r| r.header("authorization") == Some("Bearer tenant-key")));
    assert_eq!(
        log[0].json(),
        json!({"name": "ship", "context": {"order": 42}, "steps": [
            {"name": "approve", "wait_for_event": {"key": "approval:{{context.order}}"}, "timeout_secs": 3600},
            {"name": "nap", "depends_on": ["approve"], "sleep_secs": 1},
        ]})
    );
    assert_eq!(log[2].json(), json!({"key": "approval:42", "payload": {"by": "ada"}}));
    assert_eq!(log[3].json(), json!({"key": "ping"}));
}
