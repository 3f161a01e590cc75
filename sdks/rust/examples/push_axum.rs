//! A push receiver on axum: QueueFlow POSTs each job of a bound queue here.
//!
//! ```text
//! QUEUEFLOW_PUSH_SECRET=whsec_... cargo run --example push_axum    # listens on :8080
//! ```
//!
//! The answer decides the job's outcome: a 2xx JSON body completes it with that body as its
//! result, a 5xx (or 408, 409, 425, 429) retries it, any other 4xx fails it for good. A delivery
//! that fails verification gets a 503 with a `Retry-After`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::json;
use unofficial_queueflow_client::PushVerifier;

/// The routes; the body extractor is `Bytes`, the raw body, which the signature covers exactly.
pub fn router(verifier: PushVerifier) -> Router {
    Router::new().route("/queueflow", post(receive)).with_state(Arc::new(verifier))
}

async fn receive(State(verifier): State<Arc<PushVerifier>>, headers: HeaderMap, body: Bytes) -> Response {
    let delivery = match verifier.verify(&headers, &body) {
        Ok(delivery) => delivery,
        // 503, not 401: a wrong or undeployed secret must not dead-letter real jobs (docs/push.md).
        Err(refused) => {
            let reason = Json(json!({"error": refused.reason.as_str()}));
            return (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "60")], reason).into_response();
        }
    };
    match delivery.job.task_name.as_str() {
        "send-welcome" => Json(json!({"sent_to": delivery.job.payload.get("to")})).into_response(),
        _ => (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({"error": "no such task"}))).into_response(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let secret = std::env::var("QUEUEFLOW_PUSH_SECRET").expect("set QUEUEFLOW_PUSH_SECRET to the endpoint's secret");
    let verifier = PushVerifier::new(&secret).expect("a whsec_ secret"); // a malformed one fails at start-up
    let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await.expect("bind :8080");
    axum::serve(listener, router(verifier)).await.expect("serve");
}
