//! Server-sent events: an incremental parser and a typed stream over a response body.

use std::collections::VecDeque;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// One dispatched server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `message` when the server gave none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The `id:` field, if any.
    pub id: Option<String>,
}

/// An incremental `text/event-stream` parser: feed it bytes as they arrive, take whole events.
///
/// Follows the WHATWG rules that matter here: lines end in `\n`, `\r\n` or `\r`; a line starting
/// with `:` is a comment (keep-alive); `field: value` drops one space after the colon; a blank
/// line dispatches the event if it has data.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// A `\r` ended the last line; a `\n` right after it belongs to the same line break.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
    id: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds `chunk` and returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    if let Some(event) = self.line(&line) {
                        out.push(event);
                    }
                }
                _ => self.buf.push(b),
            }
        }
        out
    }

    fn line(&mut self, raw: &[u8]) -> Option<SseEvent> {
        let line = String::from_utf8_lossy(raw);
        let line = line.strip_prefix('\u{feff}').unwrap_or(&line);
        if line.is_empty() {
            let event = self.event.take();
            let id = self.id.clone();
            return self.data.take().map(|data| SseEvent {
                event: event.filter(|e| !e.is_empty()).unwrap_or_else(|| "message".to_string()),
                data,
                id,
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.find(':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
        None
    }
}

/// A stream of typed events from an SSE route: each `status` event's data decoded as `T`.
///
/// ```no_run
/// # async fn demo(client: unofficial_queueflow_client::Client) -> Result<(), unofficial_queueflow_client::Error> {
/// let mut events = client.job_events("2f0c...").await?;
/// while let Some(job) = events.next().await {
///     println!("now {}", job?.status);
/// }
/// # Ok(()) }
/// ```
pub struct EventStream<T> {
    response: Option<reqwest::Response>,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    _type: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> EventStream<T> {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        EventStream { response: Some(response), parser: SseParser::new(), pending: VecDeque::new(), _type: PhantomData }
    }

    /// The next raw event of any kind, or `None` when the server closed the stream.
    pub async fn next_raw(&mut self) -> Option<Result<SseEvent>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            let response = self.response.as_mut()?;
            match response.chunk().await {
                Ok(Some(bytes)) => self.pending.extend(self.parser.push(&bytes)),
                Ok(None) => {
                    self.response = None;
                    // A final event without its blank line is dropped, as the SSE rules say.
                    return None;
                }
                Err(err) => {
                    self.response = None;
                    return Some(Err(Error::Transport(err)));
                }
            }
        }
    }

    /// The next `status` event decoded as `T`, or `None` when the stream ended (the job or
    /// workflow reached a terminal status, or the server closed it).
    pub async fn next(&mut self) -> Option<Result<T>> {
        loop {
            let event = match self.next_raw().await? {
                Ok(event) => event,
                Err(err) => return Some(Err(err)),
            };
            if event.event != "status" {
                continue;
            }
            return Some(
                serde_json::from_str(&event.data).map_err(|e| Error::Decode { status: 200, message: e.to_string() }),
            );
        }
    }
}
