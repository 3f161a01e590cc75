// pg-boss's side of `python -m bench.compare`: one workload per run, one JSON line out.
//
//   node pgboss.mjs --dsn URL --figure drain|enqueue|latency [--jobs N] [--batches B]
//
// Configuration. pg-boss's docs give no single "fast" preset, so this uses the options its Workers
// page (https://pgboss.io/api/workers, "work()") describes for this case, and its
// defaults otherwise (pool max 10, supervise and schedule on):
// - batchSize 50: one fetch and one completion statement per 50 jobs (a batch handler that
//   returns completes the whole batch); 50 is also QueueFlow's remote lease size in this harness.
// - burstWhenBatchFull: "while each fetch returns a full batchSize batch there is clearly more
//   work, so the worker keeps fetching continuously with no delay". Without it a worker waits its
//   polling interval (2 s, or 30 s with NOTIFY) after every fetch, full or not.
// - localConcurrency 4: four fetch-and-run loops in this process ("Number of workers to spawn for
//   this queue within the current Node.js process").
// - useListenNotify (constructor) with notify: true on the queue: "Low-latency dispatch with
//   LISTEN/NOTIFY" on the same page, which wakes workers when a job is created; without it a new
//   job waits for the next poll.
// Jobs are enqueued with the bulk API, insert(name, jobs[]) (https://pgboss.io/api/jobs).
//
// Clocks: the drain rate uses the database's clock, from pg-boss's own job table: completed jobs /
// (max(completed_on) - min(started_on)). Enqueue and latency use this process's clock.

import { PgBoss } from "pg-boss";
import { now, openLoop, options, packageVersion, sleep, start, timeBatches, waitFor } from "./common.mjs";

const QUEUE = "bench";
const BOSS = { useListenNotify: true };
const QUEUE_OPTIONS = { notify: true };
const WORK = { batchSize: 50, burstWhenBatchFull: true, localConcurrency: 4 };

const DRAIN_WINDOW = `SELECT count(*)::int AS n,
  extract(epoch FROM max(completed_on) - min(started_on))::float8 AS secs
  FROM pgboss.job WHERE name = $1 AND state = 'completed'`;

function jobs(from, count) {
  return Array.from({ length: count }, (_, k) => ({ data: { i: from + k } }));
}

async function drain(opts, boss, db) {
  for (let i = 0; i < opts.jobs; i += opts.batchSize) {
    await boss.insert(QUEUE, jobs(i, Math.min(opts.batchSize, opts.jobs - i)));
  }
  await boss.work(QUEUE, WORK, async () => {});
  await waitFor(
    async () => (await db.executeSql(DRAIN_WINDOW, [QUEUE])).rows[0].n >= opts.jobs,
    `${opts.jobs} completed jobs`,
    opts.timeoutMs,
  );
  await boss.offWork(QUEUE);
  const { n, secs } = (await db.executeSql(DRAIN_WINDOW, [QUEUE])).rows[0];
  if (n !== opts.jobs) throw new Error(`expected ${opts.jobs} completed jobs, found ${n}`);
  return { jobs: n, jobs_per_s: n / secs, clock: "db" };
}

async function latency(opts, boss) {
  const { record, run } = await openLoop(opts, (i, t) => boss.send(QUEUE, { i, t }));
  await boss.work(QUEUE, WORK, async (batch) => {
    for (const job of batch) record(job.data.t);
  });
  await sleep(1000); // let the workers make their first (empty) fetch and park on their interval
  try {
    return await run();
  } finally {
    await boss.offWork(QUEUE);
  }
}

start(async () => {
  const opts = options();
  const boss = new PgBoss({ connectionString: opts.dsn, ...BOSS });
  boss.on("error", (err) => console.error(`[pg-boss error] ${err && err.stack ? err.stack : err}`));
  boss.on("warning", (w) => console.error(`[pg-boss warning] ${JSON.stringify(w)}`));
  await boss.start();
  try {
    await boss.createQueue(QUEUE, QUEUE_OPTIONS);
    const db = boss.getDb();
    let result;
    if (opts.figure === "drain") result = await drain(opts, boss, db);
    else if (opts.figure === "latency") result = await latency(opts, boss);
    else result = await timeBatches(opts, (from, count) => boss.insert(QUEUE, jobs(from, count)));
    return {
      system: "pg-boss",
      version: packageVersion("pg-boss"),
      runtime: `node ${process.version}`,
      figure: opts.figure,
      config: { ...BOSS, queue: QUEUE_OPTIONS, work: WORK },
      ...result,
    };
  } finally {
    await boss.stop({ graceful: false, timeout: 2000 });
  }
});
