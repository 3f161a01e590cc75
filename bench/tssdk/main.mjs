// The benchmark's remote drain with the TypeScript SDK's worker loop (`python -m bench W1a
// --remote-client ts-sdk`): --loops workers of the queue, each with concurrency and batch size
// --max-jobs and a no-op handler, in one Node process, against the SDK's built dist/.
//
// It speaks the line protocol of bench/remote_worker.py: it prints "ready" once its client is
// built, starts the workers when it reads "go" on stdin, stops them gracefully when it reads
// "stop" (or stdin closes), then prints {"completed": N} and exits.
import { createInterface } from "node:readline";
import { QueueFlow } from "../../sdks/typescript/dist/index.js";

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const at = args.indexOf(name);
  return at >= 0 && at + 1 < args.length ? args[at + 1] : fallback;
};
const baseUrl = flag("--base-url", "");
const queue = flag("--queue", "");
const loops = Number(flag("--loops", "8"));
const maxJobs = Number(flag("--max-jobs", "50"));
const waitSecs = Number(flag("--wait-secs", "1"));
if (!baseUrl || !queue) {
  console.error("--base-url and --queue are required");
  process.exit(2);
}

const qf = new QueueFlow({ baseUrl, token: "bench" });
let completed = 0;
const handlers = { echo: async () => { completed += 1; return { ok: true }; } };

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
console.log("ready");
const first = await lines.next();
if (first.done || first.value.trim() !== "go") process.exit(0);
const stop = new AbortController();
const runs = [];
for (let i = 0; i < loops; i++) {
  runs.push(qf.worker.run(queue, handlers, {
    leaseSecs: 60, waitSecs, concurrency: maxJobs, batchSize: maxJobs, signal: stop.signal,
  }));
}
for (;;) {
  const line = await lines.next();
  if (line.done || line.value.trim() === "stop") break;
}
stop.abort();
const ended = await Promise.allSettled(runs);
console.log(JSON.stringify({ completed }));
const failed = ended.filter((r) => r.status === "rejected");
for (const r of failed) console.error("worker:", r.reason);
process.exit(failed.length ? 1 : 0);
