//! A minimal HTTP/1.1 stub server for client-side behaviours a real server does not produce on
//! demand (a 503, a heartbeat answering `cancelled` at a chosen moment, a chunked SSE body).
//! One request per connection (`Connection: close`).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Req {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Req {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

pub struct Resp {
    pub status: u16,
    pub content_type: &'static str,
    /// Body pieces, each written after its delay (a streamed body when there are several).
    pub chunks: Vec<(Duration, String)>,
}

impl Resp {
    pub fn json(status: u16, body: serde_json::Value) -> Resp {
        Resp { status, content_type: "application/json", chunks: vec![(Duration::ZERO, body.to_string())] }
    }

    pub fn empty(status: u16) -> Resp {
        Resp { status, content_type: "application/json", chunks: vec![] }
    }

    pub fn text(status: u16, body: &str) -> Resp {
        Resp { status, content_type: "text/plain", chunks: vec![(Duration::ZERO, body.to_string())] }
    }

    pub fn error(status: u16, message: &str) -> Resp {
        Resp::json(status, serde_json::json!({"error": message, "timestamp": "2026-01-01T00:00:00Z"}))
    }

    /// Answers only after `delay` (a long-poll).
    pub fn after(mut self, delay: Duration) -> Resp {
        match self.chunks.first_mut() {
            Some(first) => first.0 = delay,
            None => self.chunks.push((delay, String::new())),
        }
        self
    }
}

pub type Log = Arc<Mutex<Vec<Req>>>;

/// Serves `route` on a free loopback port; returns the base URL and the log of requests.
pub async fn serve<F>(route: F) -> (String, Log)
where
    F: Fn(&Req) -> Resp + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let log: Log = Arc::default();
    let route = Arc::new(route);
    let seen = log.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else { return };
            let route = route.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut reader = BufReader::new(read);
                let mut line = String::new();
                if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or_default().to_string();
                let target = parts.next().unwrap_or_default().to_string();
                let (path, query) = match target.split_once('?') {
                    Some((p, q)) => (p.to_string(), q.to_string()),
                    None => (target, String::new()),
                };
                let mut headers = Vec::new();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).await.unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = h.trim_end().split_once(':') {
                        headers.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                let length = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse::<usize>().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                if reader.read_exact(&mut body).await.is_err() {
                    return;
                }
                let req = Req { method, path, query, headers, body: String::from_utf8_lossy(&body).into_owned() };
                let resp = route(&req);
                seen.lock().unwrap().push(req);
                let streamed = resp.chunks.len() > 1;
                let mut head = format!(
                    "HTTP/1.1 {} X\r\nContent-Type: {}\r\nConnection: close\r\n",
                    resp.status, resp.content_type
                );
                if !streamed {
                    let len = resp.chunks.first().map(|c| c.1.len()).unwrap_or(0);
                    head.push_str(&format!("Content-Length: {len}\r\n"));
                }
                head.push_str("\r\n");
                if let Some((delay, _)) = resp.chunks.first() {
                    tokio::time::sleep(*delay).await;
                }
                if write.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for (i, (delay, chunk)) in resp.chunks.iter().enumerate() {
                    if i > 0 {
                        tokio::time::sleep(*delay).await;
                    }
                    if write.write_all(chunk.as_bytes()).await.is_err() || write.flush().await.is_err() {
                        return;
                    }
                }
                let _ = write.shutdown().await;
            });
        }
    });
    (base, log)
}

/// A job as the server sends it.
pub fn job(id: &str, task: &str, payload: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "id": id, "queue_name": "q", "task_name": task, "payload": payload, "config": {"priority": 0},
        "status": "running", "retry_count": 0, "delivery_count": 1,
        "created_at": "2026-01-01T00:00:00Z", "scheduled_at": "2026-01-01T00:00:00Z", "metadata": {}
    })
}

/// The logged requests with `method` whose path ends with `suffix`.
pub fn requests(log: &Log, method: &str, suffix: &str) -> Vec<Req> {
    log.lock().unwrap().iter().filter(|r| r.method == method && r.path.ends_with(suffix)).cloned().collect()
}
