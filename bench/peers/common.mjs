// Shared by the Node peer programs (graphile.mjs, pgboss.mjs): the command line, the three
// workloads' timing rules, and the one JSON line each program prints. See docs/benchmarks.md,
// "The comparison". Written for bench.compare; nothing here is specific to one queue.

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";

/** The command line every peer program accepts (bench/compare.py builds it). */
export function options() {
  const { values } = parseArgs({
    options: {
      dsn: { type: "string" },
      figure: { type: "string" }, // drain | enqueue | latency
      jobs: { type: "string", default: "20000" }, // drain and latency: how many jobs
      batches: { type: "string", default: "20" }, // enqueue: timed calls of --batch-size jobs
      "batch-size": { type: "string", default: "1000" },
      "interval-ms": { type: "string", default: "5" }, // latency: one job every interval
      "timeout-s": { type: "string", default: "600" },
    },
    strict: true,
  });
  if (!values.dsn || !["drain", "enqueue", "latency"].includes(values.figure)) {
    throw new Error("usage: --dsn URL --figure drain|enqueue|latency [--jobs N] [--batches B]");
  }
  return {
    dsn: values.dsn,
    figure: values.figure,
    jobs: Number(values.jobs),
    batches: Number(values.batches),
    batchSize: Number(values["batch-size"]),
    intervalMs: Number(values["interval-ms"]),
    timeoutMs: 1000 * Number(values["timeout-s"]),
  };
}

/** The version of an installed package, read from its package.json. */
export function packageVersion(name) {
  const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, "utf8")).version;
}

/** Milliseconds on this process's monotonic clock. */
export const now = () => performance.now();

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Poll `probe` (async, returns truthy when done) every `everyMs` until it is done or `timeoutMs` passes. */
export async function waitFor(probe, what, timeoutMs, everyMs = 50) {
  const deadline = now() + timeoutMs;
  for (;;) {
    const result = await probe();
    if (result) return result;
    if (now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/** `promise`, or a rejection with `message` if it has not settled within `ms`. */
export async function withTimeout(promise, ms, message) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(typeof message === "function" ? message() : message)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A promise with its resolve function outside. */
export function deferred() {
  let resolve;
  const promise = new Promise((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** The q-th percentile (0..100), linear interpolation between closest ranks (as bench/report.py). */
export function percentile(values, q) {
  if (values.length === 0) return null;
  const data = [...values].sort((a, b) => a - b);
  const pos = ((data.length - 1) * q) / 100;
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return data[lo] + (data[hi] - data[lo]) * (pos - lo);
}

/**
 * The batch-enqueue workload: one untimed warm-up call, then `batches` sequential calls of
 * `batchSize` jobs each, one in flight at a time (as QueueFlow's scenario E does); jobs/s is
 * jobs / wall time on the process clock.
 */
export async function timeBatches(opts, insertBatch) {
  await insertBatch(0, opts.batchSize); // warm-up: connections, prepared statements, the plan cache
  const started = now();
  for (let b = 1; b <= opts.batches; b++) await insertBatch(b * opts.batchSize, opts.batchSize);
  const secs = (now() - started) / 1000;
  const jobs = opts.batches * opts.batchSize;
  return { jobs, calls: opts.batches, jobs_per_s: jobs / secs, ms_per_call: (1000 * secs) / opts.batches, clock: "process" };
}

/**
 * The latency workload: `jobs` enqueues on an open-loop schedule, one every `intervalMs`; each is
 * its own call, started on time whether or not the previous one has answered (as QueueFlow's W2
 * does). `enqueueOne(i, t)` must put `t` (this process's clock, ms) in the job's payload, and the
 * handler must call `record(t)` with it when it starts. Latency = handler start - t.
 */
export async function openLoop(opts, enqueueOne) {
  const latencies = [];
  const allSeen = deferred();
  const record = (t) => {
    latencies.push(now() - t);
    if (latencies.length === opts.jobs) allSeen.resolve();
  };
  const run = async () => {
    const pending = [];
    const t0 = now();
    for (let i = 0; i < opts.jobs; i++) {
      const wait = t0 + i * opts.intervalMs - now();
      if (wait > 0) await sleep(wait);
      pending.push(enqueueOne(i, now()));
    }
    const enqueueSecs = (now() - t0) / 1000;
    await Promise.all(pending);
    await withTimeout(allSeen.promise, 120_000, () => `only ${latencies.length} of ${opts.jobs} jobs started within 120 s`);
    return {
      jobs: opts.jobs,
      interval_ms: opts.intervalMs,
      p50_ms: percentile(latencies, 50),
      p95_ms: percentile(latencies, 95),
      p99_ms: percentile(latencies, 99),
      max_ms: Math.max(...latencies),
      enqueue_rate: enqueueSecs > 0 ? (opts.jobs - 1) / enqueueSecs : null,
      clock: "process",
    };
  };
  return { record, run };
}

/** Print the one JSON line bench.compare reads (the last line starting with "{"), then exit. */
export function emit(result) {
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/** Run `main`, print its result, exit 0; on error print it and exit 1 (never hang). */
export function start(main) {
  main().then(
    (result) => {
      emit(result);
      process.exit(0);
    },
    (err) => {
      console.error(err && err.stack ? err.stack : err);
      process.exit(1);
    },
  );
}
