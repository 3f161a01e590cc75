//! Errors returned by every client call and by the worker loop.

use serde::{Deserialize, Serialize};

/// The server's error body: `{"error": "...", "timestamp": "..."}` on every non-2xx answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// RFC 3339 timestamp of the failure, as the server wrote it.
    pub timestamp: String,
}

/// Everything a QueueFlow call can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with a non-2xx status. `body` is the decoded `{error, timestamp}`
    /// body when the server sent one (a proxy in between may not).
    #[error("QueueFlow API error: HTTP {status}{}", .body.as_ref().map(|b| format!(": {}", b.error)).unwrap_or_default())]
    Api { status: u16, body: Option<ErrorBody> },
    /// The request never got an HTTP answer: connection refused or reset, timeout, DNS, ...
    #[error("transport error: {}", source_chain(.0))]
    Transport(#[source] reqwest::Error),
    /// A 2xx answer whose body did not match the expected type.
    #[error("could not decode the response (HTTP {status}): {message}")]
    Decode { status: u16, message: String },
    /// The call was refused before it was sent (a bad argument, such as invalid options).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// `err: cause: cause ...`, so a log line says why a request failed (refused, reset, timeout).
fn source_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

impl From<reqwest::Error> for Error {
    fn from(err: reqwest::Error) -> Self {
        Error::Transport(err)
    }
}

impl Error {
    /// Builds an [`Error::Api`] from a status and the raw response body, decoding the body when
    /// it is the server's `{error, timestamp}` shape.
    pub fn from_response(status: u16, body: &[u8]) -> Self {
        let body = serde_json::from_slice::<ErrorBody>(body).ok();
        Error::Api { status, body }
    }

    /// The HTTP status the server answered with, for [`Error::Api`] (and [`Error::Decode`]).
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } | Error::Decode { status, .. } => Some(*status),
            Error::Transport(err) => err.status().map(|s| s.as_u16()),
            Error::InvalidArgument(_) => None,
        }
    }

    /// The server's error body, when there was one.
    pub fn body(&self) -> Option<&ErrorBody> {
        match self {
            Error::Api { body, .. } => body.as_ref(),
            _ => None,
        }
    }

    /// True for 401 and 403: the credential is wrong or lacks the right; retrying will not help.
    pub fn is_auth(&self) -> bool {
        matches!(self.status(), Some(401) | Some(403))
    }

    /// True when retrying the same call later may succeed: transport failures, 5xx, 408 and 429.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => true,
            Error::Api { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            Error::Decode { status, .. } => *status >= 500,
            Error::InvalidArgument(_) => false,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
