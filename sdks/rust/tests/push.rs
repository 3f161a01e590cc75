//! The push verifier against the shared vectors (sdks/conformance/push), and the axum example
//! (examples/push_axum.rs) serving real requests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};
use sha2::Sha256;
use unofficial_queueflow_client::{PushRejection, PushVerifier, PushVerifyError};

#[allow(dead_code)] // its main is the example's, unused here
#[path = "../examples/push_axum.rs"]
mod example;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../conformance/push/vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the vectors file")).expect("JSON")
}

fn case(name: &str) -> Value {
    vectors()["cases"].as_array().unwrap().iter().find(|c| c["name"] == name).expect("a case of that name").clone()
}

fn header_map(headers: &Value) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers.as_object().unwrap() {
        // from_bytes takes the name in any case (HTTP/1 names are case-insensitive).
        map.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value.as_str().unwrap()).unwrap(),
        );
    }
    map
}

fn at(c: &Value) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(c["now"].as_u64().unwrap())
}

fn outcome(c: &Value, verifier: Result<PushVerifier, PushVerifyError>) -> Value {
    let verified =
        verifier.and_then(|v| v.verify_at(&header_map(&c["headers"]), c["body"].as_str().unwrap().as_bytes(), at(c)));
    match verified {
        Ok(d) => json!({"valid": true, "delivery": {
            "id": d.id,
            "timestamp": d.timestamp.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            "job_id": d.job.id,
            "task_name": d.job.task_name,
            "payload": d.job.payload,
            "lease_token": d.lease_token,
            "attempt": d.attempt,
            "traceparent": d.traceparent,
        }}),
        Err(err) => json!({"valid": false, "reason": err.reason.as_str()}),
    }
}

#[test]
fn every_push_vector_has_its_expected_outcome() {
    let all = vectors();
    assert_eq!(all["tolerance_secs"], 300);
    let mut cases = all["cases"].as_array().unwrap().clone();
    assert!(cases.len() > 20);
    // Extra cases in the same format (QF_PUSH_VECTORS_EXTRA=<file>), e.g. real deliveries a server test captured.
    if let Ok(path) = std::env::var("QF_PUSH_VECTORS_EXTRA") {
        let extra: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("the extra vectors")).expect("JSON");
        cases.extend(extra["cases"].as_array().expect("cases").iter().cloned());
    }
    let mut failures = Vec::new();
    for c in &cases {
        let got = outcome(c, PushVerifier::new(c["secret"].as_str().unwrap()));
        if got != c["expect"] {
            failures.push(format!("{}: got {got}, want {}", c["name"], c["expect"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_malformed_secret_is_refused_when_the_verifier_is_built() {
    let err = PushVerifier::new("my-secret").unwrap_err();
    assert_eq!(err.reason, PushRejection::MalformedSecret);
    assert!(err.to_string().starts_with("push delivery refused (malformed_secret)"), "{err}");
}

#[test]
fn the_tolerance_is_an_option() {
    let stale = case("old_timestamp"); // 301 s old
    let lenient =
        PushVerifier::new(stale["secret"].as_str().unwrap()).unwrap().with_tolerance(Duration::from_secs(600));
    assert_eq!(outcome(&stale, Ok(lenient))["valid"], true);
    let recent = case("a_retry_is_a_new_attempt"); // 10 s old
    let strict = PushVerifier::new(recent["secret"].as_str().unwrap()).unwrap().with_tolerance(Duration::from_secs(5));
    assert_eq!(outcome(&recent, Ok(strict))["reason"], "timestamp_too_old");
}

#[test]
fn a_delivery_decodes_the_whole_job() {
    let c = case("good_signature");
    let v = PushVerifier::new(c["secret"].as_str().unwrap()).unwrap();
    let d = v.verify_at(&header_map(&c["headers"]), c["body"].as_str().unwrap().as_bytes(), at(&c)).unwrap();
    assert_eq!((d.job.status.as_str(), d.job.delivery_count), ("running", 1));
    assert_eq!(d.job.created_at, "2025-12-31T23:59:58.123456Z");
}

// --- the axum example ---------------------------------------------------------------------------

/// A delivery's headers as the server signs them (written from the spec, not with the SDK's code).
fn signed(body: &str, secret: &str, stamp: u64) -> Vec<(&'static str, String)> {
    let key = STANDARD.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("d-1.{stamp}.{body}").as_bytes());
    vec![
        ("content-type", "application/json".to_owned()),
        ("webhook-id", "d-1".to_owned()),
        ("webhook-timestamp", stamp.to_string()),
        ("webhook-signature", format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))),
    ]
}

#[tokio::test]
async fn the_axum_example_answers_good_deliveries_and_refuses_bad_ones_with_a_retryable_503() {
    let c = case("good_signature");
    let secret = c["secret"].as_str().unwrap();
    let body = c["body"].as_str().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/queueflow", listener.local_addr().unwrap());
    let app = example::router(PushVerifier::new(secret).unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let other = format!("whsec_{}", STANDARD.encode("another endpoint"));
    let tampered = body.replace(r#""attempt":1"#, r#""attempt":2"#);
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    for (sent_body, headers) in [
        (body, signed(body, secret, now)),
        (tampered.as_str(), signed(body, secret, now)),
        (body, signed(body, secret, now - 3600)),
        (body, signed(body, &other, now)),
    ] {
        let mut req = http.post(&url).body(sent_body.to_owned());
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let resp = req.send().await.unwrap();
        let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        answers.push((resp.status().as_u16(), retry_after, resp.json::<Value>().await.unwrap()));
    }
    server.abort();
    assert_eq!(
        answers,
        vec![
            (200, None, json!({"sent_to": "zoë@example.com"})),
            (503, Some("60".to_owned()), json!({"error": "signature_mismatch"})),
            (503, Some("60".to_owned()), json!({"error": "timestamp_too_old"})),
            (503, Some("60".to_owned()), json!({"error": "signature_mismatch"})),
        ]
    );
}
