//! Client and worker behaviours against a local stub server: answers a real server gives only
//! by accident of timing (503s, a heartbeat saying `cancelled`, a lost lease, a streamed SSE body).
//! The real-server proof is the conformance suite (tests/sdk in the repository).

mod stub;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use queueflow_sdk::*;
use stub::{job, requests, serve, Req, Resp};

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
    assert_eq!(lease_body, json!({"max_jobs": 3, "lease_secs": 1, "wait_secs": 1}));
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
