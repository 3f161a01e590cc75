//! Pure logic: error decoding, backoff bounds, SSE parsing, wire (de)serialisation.

use std::time::Duration;

use unofficial_queueflow_client::backoff::{backoff_delay, XorShift, BACKOFF_BASE, BACKOFF_CAP};
use unofficial_queueflow_client::*;

// --- errors -------------------------------------------------------------------------------------

#[test]
fn api_error_decodes_the_server_body() {
    let err = Error::from_response(409, br#"{"error":"lease is no longer held","timestamp":"2026-12-02T10:00:00Z"}"#);
    assert_eq!(err.status(), Some(409));
    let body = err.body().expect("body");
    assert_eq!(body.error, "lease is no longer held");
    assert_eq!(body.timestamp, "2026-12-02T10:00:00Z");
    assert!(!err.is_auth());
    assert!(!err.is_transient());
    assert_eq!(err.to_string(), "QueueFlow API error: HTTP 409: lease is no longer held");
}

#[test]
fn api_error_without_a_json_body_keeps_the_status() {
    let err = Error::from_response(502, b"<html>Bad Gateway</html>");
    assert_eq!(err.status(), Some(502));
    assert!(err.body().is_none());
    assert!(err.is_transient());
    assert_eq!(err.to_string(), "QueueFlow API error: HTTP 502");
    let err = Error::from_response(500, b"");
    assert!(err.body().is_none());
}

#[test]
fn a_body_of_another_shape_is_not_an_error_body() {
    let err = Error::from_response(400, br#"{"message":"nope"}"#);
    assert!(err.body().is_none());
    assert_eq!(err.status(), Some(400));
}

#[test]
fn auth_and_transient_classification() {
    for (status, auth, transient) in [
        (401, true, false),
        (403, true, false),
        (404, false, false),
        (408, false, true),
        (429, false, true),
        (500, false, true),
        (503, false, true),
    ] {
        let err = Error::Api { status, body: None };
        assert_eq!(err.is_auth(), auth, "{status}");
        assert_eq!(err.is_transient(), transient, "{status}");
    }
    let err = Error::InvalidArgument("x".into());
    assert_eq!(err.status(), None);
    assert!(!err.is_transient());
}

// --- backoff ------------------------------------------------------------------------------------

#[test]
fn backoff_is_bounded_and_jittered() {
    for failures in 0..100u32 {
        for unit in [0.0, 0.25, 0.5, 0.999_999, 1.0, -3.0, 7.0, f64::NAN, f64::INFINITY] {
            let d = backoff_delay(failures, unit);
            assert!(d <= BACKOFF_CAP, "{failures} {unit}: {d:?}");
            assert!(d >= BACKOFF_BASE / 2, "{failures} {unit}: {d:?}");
        }
    }
    // The step doubles until the cap; jitter keeps it within [step/2, step].
    assert_eq!(backoff_delay(1, 0.0), BACKOFF_BASE / 2);
    assert_eq!(backoff_delay(1, 1.0), BACKOFF_BASE);
    assert_eq!(backoff_delay(2, 1.0), BACKOFF_BASE * 2);
    assert_eq!(backoff_delay(3, 1.0), BACKOFF_BASE * 4);
    assert_eq!(backoff_delay(50, 1.0), BACKOFF_CAP);
    assert_eq!(backoff_delay(50, 0.0), BACKOFF_CAP / 2);
    assert_eq!(BACKOFF_CAP, Duration::from_secs(5));
}

#[test]
fn backoff_with_real_jitter_varies() {
    let mut rng = XorShift::new(42);
    let delays: Vec<Duration> = (0..20).map(|_| backoff_delay(10, rng.next_f64())).collect();
    assert!(delays.iter().all(|d| *d >= BACKOFF_CAP / 2 && *d <= BACKOFF_CAP));
    assert!(delays.windows(2).any(|w| w[0] != w[1]), "no jitter: {delays:?}");
}

#[test]
fn xorshift_units_are_in_range() {
    let mut rng = XorShift::from_entropy();
    for _ in 0..10_000 {
        let u = rng.next_f64();
        assert!((0.0..1.0).contains(&u));
    }
    let mut zero = XorShift::new(0);
    assert_ne!(zero.next_u64(), 0);
}

// --- SSE ----------------------------------------------------------------------------------------

fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    chunks.iter().flat_map(|c| parser.push(c)).collect()
}

#[test]
fn sse_parses_events_comments_and_multiline_data() {
    let text = b": keep-alive\n\nevent: status\ndata: {\"a\":1}\n\ndata: line one\ndata:line two\nid: 7\n\n";
    let events = parse_all(&[text]);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], SseEvent { event: "status".into(), data: "{\"a\":1}".into(), id: None });
    assert_eq!(events[1].event, "message");
    assert_eq!(events[1].data, "line one\nline two");
    assert_eq!(events[1].id.as_deref(), Some("7"));
}

#[test]
fn sse_handles_every_split_point_and_line_ending() {
    for text in [
        &b"event: status\r\ndata: x\r\n\r\nevent: status\r\ndata: y\r\n\r\n"[..],
        &b"event: status\rdata: x\r\revent: status\rdata: y\r\r"[..],
        &b"event: status\ndata: x\n\nevent: status\ndata: y\n\n"[..],
    ] {
        for split in 0..=text.len() {
            let events = parse_all(&[&text[..split], &text[split..]]);
            let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
            assert_eq!(data, ["x", "y"], "split at {split} of {:?}", String::from_utf8_lossy(text));
            assert!(events.iter().all(|e| e.event == "status"));
        }
        // One byte at a time.
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse_all(&bytes).len(), 2);
    }
}

#[test]
fn sse_ignores_events_without_data_and_unfinished_events() {
    let events = parse_all(&[b"event: status\n\nretry: 10\nfoo: bar\n\ndata: unfinished"]);
    assert!(events.is_empty(), "{events:?}");
}

#[test]
fn sse_event_name_resets_between_events() {
    let events = parse_all(&[b"event: status\ndata: 1\n\ndata: 2\n\n"]);
    assert_eq!(events[0].event, "status");
    assert_eq!(events[1].event, "message");
}

// --- wire types ---------------------------------------------------------------------------------

#[test]
fn requests_leave_absent_fields_out() {
    let req = CreateJobRequest::new("t").queue("q");
    assert_eq!(serde_json::to_value(&req).unwrap(), json!({"task_name": "t", "config": {"queue": "q"}}));
    let lease = LeaseJobsRequest { max_jobs: Some(2), ..Default::default() };
    assert_eq!(serde_json::to_value(&lease).unwrap(), json!({"max_jobs": 2}));
    let cond = StepCondition {
        not_: Some(Box::new(StepCondition { op: Some("exists".into()), path: Some("a".into()), ..Default::default() })),
        ..Default::default()
    };
    assert_eq!(serde_json::to_value(&cond).unwrap(), json!({"not": {"op": "exists", "path": "a"}}));
    let step = WorkflowStep::new("b", "t").depends_on(["a"]);
    assert_eq!(serde_json::to_value(&step).unwrap(), json!({"name": "b", "task_name": "t", "depends_on": ["a"]}));
}

#[test]
fn list_params_become_a_query() {
    let params = ListParams {
        limit: Some(2),
        include_total: Some(true),
        cursor: Some("abc".into()),
        queue: Some("q".into()),
        replayed: Some(false),
        ..Default::default()
    };
    assert_eq!(
        params.to_query(),
        vec![
            ("limit", "2".to_string()),
            ("include_total", "true".into()),
            ("cursor", "abc".into()),
            ("queue", "q".into()),
            ("replayed", "false".into())
        ]
    );
}

#[test]
fn a_job_decodes_with_optional_fields_absent_or_present() {
    let job: Job = serde_json::from_value(json!({
        "id": "j", "queue_name": "q", "task_name": "t", "payload": {"n": 1}, "config": {"priority": 5},
        "status": "completed", "retry_count": 0, "delivery_count": 1, "created_at": "c", "scheduled_at": "s",
        "metadata": {}, "result": {"ok": true}, "unknown_future_field": 1
    }))
    .unwrap();
    assert_eq!(job.result, Some(json!({"ok": true}).as_object().unwrap().clone()));
    assert_eq!(job.error_message, None);
    assert_eq!(job.config["priority"], json!(5));
}

#[test]
fn batch_acknowledgement_wire_shapes() {
    let req = CompleteJobsRequest {
        jobs: vec![
            CompletionItem { id: "a".into(), lease_token: "t".into(), result: None },
            CompletionItem { id: "b".into(), lease_token: "u".into(), result: Some(Map::new()) },
        ],
    };
    assert_eq!(
        serde_json::to_value(&req).unwrap(),
        json!({"jobs": [{"id": "a", "lease_token": "t"}, {"id": "b", "lease_token": "u", "result": {}}]})
    );
    let answer: CompleteJobsResponse = serde_json::from_value(json!({"results": [
        {"id": "a", "outcome": "completed", "status": 204},
        {"id": "b", "outcome": "conflict", "status": 409, "error": "lease is no longer held"},
        {"id": "c", "outcome": "not_found", "status": 404, "error": null},
        {"id": "d", "outcome": "something_new", "status": 422, "extra": 1}
    ]}))
    .unwrap();
    let outcomes: Vec<_> = answer.results.iter().map(|a| a.outcome).collect();
    assert_eq!(
        outcomes,
        [
            CompletionOutcome::Completed,
            CompletionOutcome::Conflict,
            CompletionOutcome::NotFound,
            CompletionOutcome::Other
        ]
    );
    assert_eq!(answer.results[1].error.as_deref(), Some("lease is no longer held"));
    assert_eq!(answer.results[2].error, None);
    assert_eq!(answer.results[3].status, 422);
    assert_eq!(MAX_COMPLETIONS, 100);
}

#[test]
fn sleep_and_wait_steps_carry_only_their_own_fields() {
    let steps = [
        WorkflowStep::wait_for_event("approve", "approval:{{context.order}}").timeout_secs(3600),
        WorkflowStep::sleep("nap", 90).depends_on(["approve"]),
        WorkflowStep::sleep_until("later", "2027-01-02T03:04:05Z").depends_on(["nap"]),
        WorkflowStep::wait_for_event("forever", "k"),
    ];
    assert_eq!(
        serde_json::to_value(steps).unwrap(),
        json!([
            {"name": "approve", "wait_for_event": {"key": "approval:{{context.order}}"}, "timeout_secs": 3600},
            {"name": "nap", "depends_on": ["approve"], "sleep_secs": 90},
            {"name": "later", "depends_on": ["nap"], "sleep_until": "2027-01-02T03:04:05Z"},
            {"name": "forever", "wait_for_event": {"key": "k"}},
        ])
    );
    // A workflow echoes them back.
    let echoed: WorkflowStep =
        serde_json::from_value(json!({"name": "w", "wait_for_event": {"key": "k"}, "timeout_secs": 60, "payload": {}}))
            .unwrap();
    assert_eq!(echoed.wait_for_event, Some(WaitForEvent { key: "k".into() }));
    assert_eq!((echoed.timeout_secs, echoed.task_name), (Some(60), None));
    assert_eq!(MAX_SLEEP_SECS, 31_536_000);
    assert_eq!(MAX_EVENT_KEY_BYTES, 256);
}

/// A workflow schedule as the server answers it (shared/domain/cron.py CronSchedule, its workflow
/// stored normalised): no task_name, each step's defaults filled in, and a field this SDK does not
/// know.
fn workflow_schedule() -> Value {
    json!({
        "id": "c1", "name": "nightly", "cron_expr": "0 2 * * *", "enabled": true,
        "next_run_at": "2026-12-04T02:00:00Z", "created_at": "2026-12-03T00:00:00Z",
        "workflow": {"name": "etl", "steps": [
            {"name": "extract", "task_name": "etl.extract", "depends_on": [], "payload": {"full": true},
             "config": {"priority": 3}, "on_failure": "halt", "on_success": "continue", "metadata": {}, "queue": "etl"},
            {"name": "nap", "depends_on": ["extract"], "payload": {}, "on_failure": "halt", "on_success": "continue",
             "metadata": {}, "sleep_secs": 60},
            {"name": "load", "task_name": "etl.load", "depends_on": ["nap"], "payload": {}, "on_failure": "halt",
             "on_success": "continue", "metadata": {}, "when": {"op": "exists", "path": "extract.rows"}},
        ], "context": {"day": "today"}, "metadata": {}},
    })
}

#[test]
fn a_workflow_schedule_decodes_with_its_workflow_typed_and_no_task_name() {
    let cron: CronSchedule = serde_json::from_value(workflow_schedule()).expect("decodes");
    assert_eq!(cron.task_name, None);
    let workflow = cron.workflow.as_ref().expect("a workflow");
    assert_eq!(workflow.name, "etl");
    assert_eq!(workflow.context, json!({"day": "today"}).as_object().cloned());
    let (extract, nap, load) = (&workflow.steps[0], &workflow.steps[1], &workflow.steps[2]);
    assert_eq!((extract.task_name.as_deref(), extract.queue.as_deref()), (Some("etl.extract"), Some("etl")));
    assert_eq!((extract.depends_on.as_deref(), extract.on_failure.as_deref()), (Some(&[][..]), Some("halt")));
    assert_eq!(extract.config.as_ref().and_then(|c| c.priority), Some(3));
    assert_eq!((nap.sleep_secs, nap.task_name.as_deref()), (Some(60), None));
    assert_eq!(nap.depends_on, Some(vec!["extract".to_string()]));
    assert_eq!(load.when.as_ref().and_then(|w| w.path.as_deref()), Some("extract.rows"));
    // What was decoded encodes back to the server's answer.
    assert_eq!(serde_json::to_value(&cron).unwrap(), workflow_schedule());
    // Unknown fields, at the schedule or inside its workflow, are ignored as everywhere else.
    let mut newer = workflow_schedule();
    newer["future"] = json!(1);
    newer["workflow"]["future"] = json!(2);
    assert_eq!(serde_json::from_value::<CronSchedule>(newer).expect("decodes"), cron);
    // A task schedule has its task_name and no workflow.
    let mut task = workflow_schedule();
    task.as_object_mut().unwrap().remove("workflow");
    task["task_name"] = json!("remind");
    let task: CronSchedule = serde_json::from_value(task).expect("decodes");
    assert_eq!((task.task_name.as_deref(), task.workflow), (Some("remind"), None));
}

#[test]
fn a_schedule_request_sends_its_task_or_its_workflow() {
    let workflow = CreateWorkflowRequest {
        name: "etl".into(),
        steps: vec![WorkflowStep::new("a", "etl.a")],
        ..Default::default()
    };
    let started = CreateCronRequest::for_workflow("nightly", "0 2 * * *", workflow).timezone("Europe/Berlin");
    assert_eq!(
        serde_json::to_value(&started).unwrap(),
        json!({"name": "nightly", "cron_expr": "0 2 * * *", "timezone": "Europe/Berlin",
               "workflow": {"name": "etl", "steps": [{"name": "a", "task_name": "etl.a"}]}})
    );
    let task = CreateCronRequest::for_task("remind", "*/5 * * * *", "remind").queue("q").payload(Object::new());
    assert_eq!(
        serde_json::to_value(&task).unwrap(),
        json!({"name": "remind", "cron_expr": "*/5 * * * *", "task_name": "remind", "queue": "q", "payload": {}})
    );
}

#[test]
fn events_wire_shapes() {
    assert_eq!(serde_json::to_value(PostEventRequest::new("ping")).unwrap(), json!({"key": "ping"}));
    let with_payload = PostEventRequest::new("k").payload(json!({"by": "ada"}).as_object().unwrap().clone());
    assert_eq!(serde_json::to_value(with_payload).unwrap(), json!({"key": "k", "payload": {"by": "ada"}}));
    assert!(ListEventsParams::default().to_query().is_empty());
    let params = ListEventsParams { key: Some("a:b".into()), limit: Some(5) };
    assert_eq!(params.to_query(), vec![("key", "a:b".to_string()), ("limit", "5".into())]);
}
