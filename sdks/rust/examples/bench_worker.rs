//! The benchmark's remote drain with this SDK's worker loop (`python -m bench W1a --remote-client
//! rust-sdk`): `--loops` workers of the queue, each with concurrency and batch size `--max-jobs`
//! and a no-op handler, on tokio's multi-threaded runtime (an application's default).
//!
//! It speaks the line protocol of bench/remote_worker.py: it prints `ready` once its client is
//! built, starts the workers when it reads `go` on stdin, stops them gracefully when it reads
//! `stop` (or stdin closes), then prints `{"completed": N}` and exits.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, BufReader};
use unofficial_queueflow_client::{Client, Map, Worker, WorkerOptions};

fn flag(args: &[String], name: &str, default: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_else(|| default.to_string())
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let base_url = flag(&args, "--base-url", "");
    let queue = flag(&args, "--queue", "");
    let loops: usize = flag(&args, "--loops", "8").parse().expect("--loops");
    let max_jobs: usize = flag(&args, "--max-jobs", "50").parse().expect("--max-jobs");
    let wait_secs: u32 = flag(&args, "--wait-secs", "1").parse().expect("--wait-secs");
    if base_url.is_empty() || queue.is_empty() {
        eprintln!("--base-url and --queue are required");
        std::process::exit(2);
    }
    let client = Client::builder(base_url, "bench").build();
    let completed = Arc::new(AtomicU64::new(0));

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    println!("ready");
    if lines.next_line().await.ok().flatten().map(|l| l.trim() == "go") != Some(true) {
        return;
    }
    let mut tokens = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..loops {
        let options = WorkerOptions {
            lease_secs: 60,
            wait_secs,
            concurrency: max_jobs,
            batch_size: Some(max_jobs),
            ..WorkerOptions::default()
        };
        let done = completed.clone();
        let worker = Worker::new(client.clone(), &queue, options).register("echo", move |_job| {
            let done = done.clone();
            async move {
                done.fetch_add(1, Ordering::Relaxed);
                let mut result = Map::new();
                result.insert("ok".into(), true.into());
                Ok(result)
            }
        });
        tokens.push(worker.shutdown_token());
        runs.push(tokio::spawn(worker.run()));
    }
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim() == "stop" {
            break;
        }
    }
    tokens.iter().for_each(|t| t.cancel());
    let mut failed = false;
    for run in runs {
        let error = match run.await {
            Ok(Ok(())) => continue,
            Ok(Err(err)) => err.to_string(),
            Err(err) => err.to_string(),
        };
        eprintln!("worker: {error}");
        failed = true;
    }
    println!("{{\"completed\": {}}}", completed.load(Ordering::Relaxed));
    if failed {
        std::process::exit(1);
    }
}
