// graphile-worker's side of `python -m bench.compare`: one workload per run, one JSON line out.
//
//   node graphile.mjs --dsn URL --figure drain|enqueue|latency [--jobs N] [--batches B]
//
// Configuration: the one graphile-worker's Performance page gives for its own throughput figures
// (https://worker.graphile.org/docs/performance, "Quick stats" and "With batching"):
// concurrentJobs 24, maxPoolSize 25, localQueue.size 500, completeJobBatchDelay 0 and
// failJobBatchDelay 0. The same page and "Scaling tips" (https://worker.graphile.org/docs/scaling,
// "Enable batching") recommend enabling batching for high-throughput queues. One worker process
// (the page ran four; this machine has two cores shared with PostgreSQL). Jobs are enqueued with
// the bulk API, addJobs (https://worker.graphile.org/docs/library/add-jobs).
//
// Clocks: graphile-worker deletes a job when it completes, so its tables keep no completion time.
// The drain rate therefore uses this process's clock: from the first handler start to the moment
// a poll (every 5 ms) finds the jobs table empty, i.e. every completion committed.

import { EventEmitter } from "node:events";
import { Logger, makeWorkerUtils, run } from "graphile-worker";
import {
  deferred,
  now,
  openLoop,
  options,
  packageVersion,
  sleep,
  start,
  timeBatches,
  waitFor,
  withTimeout,
} from "./common.mjs";

const TASK = "noop";
const CONFIG = {
  concurrentJobs: 24,
  maxPoolSize: 25,
  localQueue: { size: 500 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};

// Warnings and errors to stderr (the harness keeps them in the run's log); info and debug dropped.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[graphile-worker ${level}] ${message}`);
});

function specs(from, count, payload = () => ({})) {
  return Array.from({ length: count }, (_, k) => ({ identifier: TASK, payload: { i: from + k, ...payload() } }));
}

async function startWorker(dsn, handler) {
  // Our own emitter, so the listen event cannot fire before we subscribe (docs: "WorkerEvents").
  const events = new EventEmitter();
  const listening = deferred();
  events.on("pool:listen:success", () => listening.resolve());
  const runner = await run({
    connectionString: dsn,
    taskList: { [TASK]: handler },
    logger,
    events,
    noHandleSignals: true,
    preset: { worker: CONFIG },
  });
  await withTimeout(listening.promise, 30_000, "graphile-worker did not start listening within 30 s");
  return runner;
}

async function remaining(utils) {
  // The private table rather than the `jobs` view: a plain count, no join (read-only).
  return utils.withPgClient(async (client) => {
    const { rows } = await client.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs");
    return rows[0].n;
  });
}

async function drain(opts, utils) {
  for (let i = 0; i < opts.jobs; i += opts.batchSize) {
    await utils.addJobs(specs(i, Math.min(opts.batchSize, opts.jobs - i)));
  }
  let first = null;
  let done = 0;
  const allRan = deferred();
  const runner = await startWorker(opts.dsn, async () => {
    if (first === null) first = now();
    if (++done === opts.jobs) allRan.resolve();
  });
  try {
    await withTimeout(allRan.promise, opts.timeoutMs, () => `only ${done} of ${opts.jobs} jobs ran in time`);
    await waitFor(async () => (await remaining(utils)) === 0, "the jobs table to empty", 60_000, 5);
    const last = now();
    return { jobs: opts.jobs, jobs_per_s: opts.jobs / ((last - first) / 1000), clock: "process" };
  } finally {
    await runner.stop();
  }
}

async function latency(opts, utils) {
  const { record, run: go } = await openLoop(opts, (i, t) =>
    utils.addJob(TASK, { i, t }),
  );
  const runner = await startWorker(opts.dsn, async (payload) => record(payload.t));
  try {
    await sleep(1000); // let start-up work (migrations check, first empty fetch) settle
    return await go();
  } finally {
    await runner.stop();
  }
}

start(async () => {
  const opts = options();
  const utils = await makeWorkerUtils({ connectionString: opts.dsn, logger });
  try {
    await utils.migrate();
    let result;
    if (opts.figure === "drain") result = await drain(opts, utils);
    else if (opts.figure === "latency") result = await latency(opts, utils);
    else result = await timeBatches(opts, (from, count) => utils.addJobs(specs(from, count)));
    return {
      system: "graphile-worker",
      version: packageVersion("graphile-worker"),
      runtime: `node ${process.version}`,
      figure: opts.figure,
      config: CONFIG,
      ...result,
    };
  } finally {
    await utils.release();
  }
});
