//! Verifying push deliveries: QueueFlow calling your HTTP endpoint with a job.
//!
//! A delivery is `POST <your url>` with the JSON body `{"job", "lease_token", "attempt"}` and the
//! Standard Webhooks headers `webhook-id`, `webhook-timestamp` and `webhook-signature`. Verify it
//! before acting on it:
//!
//! ```
//! use unofficial_queueflow_client::{PushRejection, PushVerifier};
//!
//! let verifier = PushVerifier::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
//! let headers = http::HeaderMap::new(); // the request's headers
//! let err = verifier.verify(&headers, b"{}").unwrap_err();
//! assert_eq!(err.reason, PushRejection::MissingHeader);
//! ```
//!
//! [`PushVerifier::verify`] checks the signature (HMAC-SHA256, compared in constant time; any one
//! of several `v1` entries may match, as during a secret rotation) and the timestamp (at most five
//! minutes off, either way), then decodes the body. Pass the body's bytes exactly as received: the
//! signature covers them, not their JSON.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use http::HeaderMap;
use serde::Deserialize;
use sha2::Sha256;

use crate::types::Job;

/// How far a delivery's timestamp may be from the receiver's clock, before or after.
pub const DEFAULT_PUSH_TOLERANCE: Duration = Duration::from_secs(300);

/// Why a delivery (or the secret to check it with) was refused; the same values in every SDK
/// (`sdks/conformance/push/README.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PushRejection {
    MalformedSecret,
    MissingHeader,
    MalformedHeader,
    TimestampTooOld,
    TimestampTooNew,
    SignatureMismatch,
    MalformedBody,
}

impl PushRejection {
    /// The reason's name: `malformed_secret`, `missing_header`, `malformed_header`,
    /// `timestamp_too_old`, `timestamp_too_new`, `signature_mismatch` or `malformed_body`.
    pub fn as_str(self) -> &'static str {
        match self {
            PushRejection::MalformedSecret => "malformed_secret",
            PushRejection::MissingHeader => "missing_header",
            PushRejection::MalformedHeader => "malformed_header",
            PushRejection::TimestampTooOld => "timestamp_too_old",
            PushRejection::TimestampTooNew => "timestamp_too_new",
            PushRejection::SignatureMismatch => "signature_mismatch",
            PushRejection::MalformedBody => "malformed_body",
        }
    }
}

impl std::fmt::Display for PushRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A push delivery (or its secret) failed verification.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("push delivery refused ({reason}): {detail}")]
pub struct PushVerifyError {
    pub reason: PushRejection,
    pub detail: String,
}

fn refuse<T>(reason: PushRejection, detail: impl Into<String>) -> Result<T, PushVerifyError> {
    Err(PushVerifyError { reason, detail: detail.into() })
}

/// A verified delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct PushDelivery {
    /// The `webhook-id`: the same on every retry of one attempt (use it to drop a duplicate).
    pub id: String,
    /// When QueueFlow sent it (`webhook-timestamp`).
    pub timestamp: SystemTime,
    /// The job, as a lease answer carries it.
    pub job: Job,
    /// The job's lease: pass it to heartbeat, complete or fail after answering 202.
    pub lease_token: String,
    /// Which attempt of the job this is.
    pub attempt: i64,
    /// The job's W3C `traceparent` header, when it has one.
    pub traceparent: Option<String>,
}

#[derive(Deserialize)]
struct Body {
    job: Job,
    lease_token: String,
    attempt: i64,
}

/// Checks push deliveries signed with one endpoint secret (`whsec_<base64>`).
#[derive(Clone)]
pub struct PushVerifier {
    key: Vec<u8>,
    tolerance: Duration,
}

impl std::fmt::Debug for PushVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushVerifier").field("tolerance", &self.tolerance).finish_non_exhaustive()
    }
}

impl PushVerifier {
    /// A verifier for the endpoint's secret; [`PushRejection::MalformedSecret`] unless it is
    /// `whsec_` followed by standard base64 (with its padding).
    pub fn new(secret: &str) -> Result<Self, PushVerifyError> {
        let Some(encoded) = secret.strip_prefix("whsec_") else {
            return refuse(PushRejection::MalformedSecret, "a push secret starts with whsec_");
        };
        // The engine refuses non-canonical trailing bits too: every SDK accepts the same secrets.
        match STANDARD.decode(encoded) {
            Ok(key) if !key.is_empty() => Ok(PushVerifier { key, tolerance: DEFAULT_PUSH_TOLERANCE }),
            _ => refuse(PushRejection::MalformedSecret, "the part after whsec_ is not standard base64 with padding"),
        }
    }

    /// Replaces [`DEFAULT_PUSH_TOLERANCE`].
    pub fn with_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The delivery these headers and raw body make, checked against the current time.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<PushDelivery, PushVerifyError> {
        self.verify_at(headers, body, SystemTime::now())
    }

    /// [`verify`](Self::verify) with the clock given (for tests).
    pub fn verify_at(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<PushDelivery, PushVerifyError> {
        let id = required(headers, "webhook-id")?;
        let stamp = required(headers, "webhook-timestamp")?;
        let signatures = required(headers, "webhook-signature")?;

        if stamp.is_empty() || stamp.len() > 15 || !stamp.bytes().all(|b| b.is_ascii_digit()) {
            return refuse(PushRejection::MalformedHeader, "webhook-timestamp is not whole Unix seconds");
        }
        let seconds: u64 = stamp.parse().expect("1 to 15 digits fit in u64");
        let mut candidates = Vec::new();
        for entry in signatures.split(' ').filter(|e| !e.is_empty()) {
            match entry.split_once(',') {
                Some((version, value)) if !version.is_empty() => {
                    if version == "v1" {
                        candidates.push(value);
                    }
                }
                _ => {
                    return refuse(
                        PushRejection::MalformedHeader,
                        "a webhook-signature entry is not <version>,<signature>",
                    )
                }
            }
        }

        let sent = UNIX_EPOCH + Duration::from_secs(seconds);
        match sent.duration_since(now) {
            Ok(ahead) if ahead > self.tolerance => {
                return refuse(
                    PushRejection::TimestampTooNew,
                    format!("sent at {seconds}, more than {} s ahead", self.tolerance.as_secs_f64()),
                )
            }
            Err(behind) if behind.duration() > self.tolerance => {
                return refuse(
                    PushRejection::TimestampTooOld,
                    format!("sent at {seconds}, more than {} s ago", self.tolerance.as_secs_f64()),
                )
            }
            _ => {}
        }

        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(stamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        let expected = STANDARD.encode(mac.finalize().into_bytes());
        // Every candidate is compared (no early exit), each in constant time.
        let matched =
            candidates.iter().fold(false, |found, c| constant_time_eq(expected.as_bytes(), c.as_bytes()) | found);
        if !matched {
            return refuse(PushRejection::SignatureMismatch, "no v1 signature matches this endpoint's secret");
        }

        let decoded: Body = match serde_json::from_slice(body) {
            Ok(decoded) => decoded,
            Err(err) => return refuse(PushRejection::MalformedBody, format!("the body is not a delivery: {err}")),
        };
        Ok(PushDelivery {
            id: id.to_owned(),
            timestamp: sent,
            job: decoded.job,
            lease_token: decoded.lease_token,
            attempt: decoded.attempt,
            traceparent: headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned),
        })
    }
}

fn required<'a>(headers: &'a HeaderMap, name: &str) -> Result<&'a str, PushVerifyError> {
    let Some(value) = headers.get(name) else {
        return refuse(PushRejection::MissingHeader, format!("no {name} header"));
    };
    let Ok(text) = value.to_str() else {
        return refuse(PushRejection::MalformedHeader, format!("{name} is not visible ASCII"));
    };
    if text.trim_matches(' ').is_empty() {
        return refuse(PushRejection::MissingHeader, format!("no {name} header"));
    }
    Ok(text)
}

/// Equal slices, in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}
