//! # unofficial-queueflow-client
//!
//! An unofficial Rust SDK for QueueFlow, a PostgreSQL-native job queue and workflow engine.
//!
//! * [`Client`]: typed async calls for every REST route (jobs, workflows, cron, dead letters,
//!   queues, system, SSE event streams) and the remote-worker protocol (lease, heartbeat,
//!   complete, fail).
//! * [`Worker`]: the remote worker loop: long-poll leasing, concurrent handlers, heartbeats for
//!   every held job at half the lease, cancellation, jittered backoff, graceful shutdown, and
//!   successes acknowledged in batches (`POST /api/v1/jobs/complete`) when the server offers it.
//!   Each lease names the worker; each handler reports progress and log lines through its
//!   [`JobContext`] and runs inside an OpenTelemetry span (the `opentelemetry` API crate only:
//!   the application installs the SDK and exporter it wants).
//! * [`PushVerifier`]: checks a push delivery (QueueFlow calling your endpoint with a job): its
//!   Standard Webhooks signature and timestamp, and decodes it into a [`PushDelivery`].
//!
//! ```no_run
//! use unofficial_queueflow_client::{Client, Map, Worker, WorkerOptions};
//!
//! # async fn demo() -> Result<(), unofficial_queueflow_client::Error> {
//! let client = Client::builder("http://localhost:8000", "tenant-key").worker_token("worker-token").build();
//! Worker::new(client, "images", WorkerOptions::default())
//!     .register("resize-image", |job| async move { Ok(Map::new()) })
//!     .run()
//!     .await
//! # }
//! ```

pub mod backoff;
pub mod client;
pub mod error;
pub mod push;
pub mod reports;
pub mod sse;
pub mod trace;
pub mod types;
pub mod worker;

pub use client::{Client, ClientBuilder};
pub use error::{Error, ErrorBody, Result};
pub use push::{PushDelivery, PushRejection, PushVerifier, PushVerifyError, DEFAULT_PUSH_TOLERANCE};
pub use serde_json::{json, Map, Value};
pub use sse::{EventStream, SseEvent, SseParser};
pub use types::*;
pub use worker::{
    default_worker_id, CancellationToken, HandlerError, HandlerResult, JobContext, Worker, WorkerOptions, SDK_NAME,
    SDK_VERSION,
};
