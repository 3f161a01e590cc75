//! Enqueue a job, process it with a worker, and watch it complete over SSE.
//!
//! QUEUEFLOW_URL=http://localhost:8000 QUEUEFLOW_TOKEN=<tenant key> QUEUEFLOW_WORKER_TOKEN=<worker token> \
//!     cargo run --example worker

use unofficial_queueflow_client::{json, Client, CreateJobRequest, HandlerError, Map, Worker, WorkerOptions};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), unofficial_queueflow_client::Error> {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let token = var("QUEUEFLOW_TOKEN", "dev");
    let client = Client::builder(var("QUEUEFLOW_URL", "http://localhost:8000"), &token)
        .worker_token(var("QUEUEFLOW_WORKER_TOKEN", &token))
        .build();

    // Enqueue a job on the "images" queue.
    let payload = json!({"url": "https://example.com/cat.png", "width": 128});
    let request = CreateJobRequest::new("resize-image").payload(payload.as_object().cloned().unwrap()).queue("images");
    let job_id = client.create_job(&request).await?.job_id;
    println!("enqueued {job_id}");

    // Follow its status changes until it finishes.
    let mut events = client.job_events(&job_id).await?;
    let watcher = tokio::spawn(async move {
        while let Some(job) = events.next().await {
            match job {
                Ok(job) => println!("job {} is {} (result {:?})", job.id, job.status, job.result),
                Err(err) => eprintln!("event stream: {err}"),
            }
        }
    });

    // Work the queue until the job has been seen to finish.
    let worker = Worker::new(client, "images", WorkerOptions { wait_secs: 5, ..WorkerOptions::default() });
    let stop = worker.shutdown_token();
    let worker = worker.register_with_context("resize-image", move |job, ctx| {
        let stop = stop.clone();
        async move {
            let width = job
                .payload
                .get("width")
                .and_then(|w| w.as_u64())
                .ok_or_else(|| HandlerError::permanent("width is missing"))?;
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(300)) => {}
                _ = ctx.cancelled() => return Err(HandlerError::new("cancelled")),
            }
            stop.cancel(); // one job is enough for the example
            let mut result = Map::new();
            result.insert("thumbnail_width".into(), json!(width));
            Ok(result)
        }
    });
    worker.run().await?;
    let _ = watcher.await;
    Ok(())
}
