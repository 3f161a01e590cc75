/**
 * The conformance runner (sdks/conformance/README.md): `node dist/conformance/runner.js <scenario.json>`.
 *
 * Plays one scenario against a real server with the SDK's public API only, writing events to
 * stdout (one JSON object per line) and reading commands (`continue`) from stdin.
 */

import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { createInterface } from "node:readline";

import { SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import type { InMemorySpanExporter, NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

import {
  ApiError,
  NonRetryableError,
  QueueFlow,
  type CronSchedule,
  type Handler,
  type Handlers,
  type Job,
  type JobConfigRequest,
  type JobContext,
  type JsonObject,
  type UniquePolicy,
  type Workflow,
  type WorkflowStepState,
  type WorkflowStatus,
  wf,
} from "../index.js";

interface Scenario {
  name: string;
  worker: {
    mode: string;
    handlers?: Record<string, string>;
    lease_secs?: number;
    concurrency?: number;
    batch_size?: number;
    stop_after_jobs?: number;
    unique_key?: string;
    window_secs?: number;
    context?: JsonObject;
    key_template?: string;
    timeout_secs?: number;
    sleep_secs?: number;
    event_key?: string;
    payload?: JsonObject;
    name?: string;
    cron_expr?: string;
    worker_id?: string;
    tracing?: boolean;
  };
}

interface Env {
  baseUrl: string;
  tenantToken: string;
  workerToken: string;
  queue: string;
}

function emit(event: string, fields: Record<string, unknown> = {}): void {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

function env(): Env {
  const need = (name: string): string => {
    const value = process.env[name];
    if (!value) throw new Error(`${name} is not set`);
    return value;
  };
  return {
    baseUrl: need("QF_BASE_URL"),
    tenantToken: need("QF_TENANT_TOKEN"),
    workerToken: need("QF_WORKER_TOKEN"),
    queue: need("QF_QUEUE"),
  };
}

// --- stdin commands ---------------------------------------------------------------------------

const commands: string[] = [];
const commandWaiters: Array<(line: string) => void> = [];
let stdinReader: ReturnType<typeof createInterface> | undefined;

function listenStdin(): void {
  if (stdinReader) return;
  stdinReader = createInterface({ input: process.stdin });
  stdinReader.on("line", (raw) => {
    const line = raw.trim();
    if (!line) return;
    const waiter = commandWaiters.shift();
    if (waiter) waiter(line);
    else commands.push(line);
  });
}

async function nextCommand(expected: string): Promise<void> {
  for (;;) {
    const line = commands.shift() ?? (await new Promise<string>((resolve) => commandWaiters.push(resolve)));
    if (line === expected) return;
    process.stderr.write(`runner: ignoring unexpected command ${JSON.stringify(line)}\n`);
  }
}

// --- helpers ------------------------------------------------------------------------------------

function delay(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(true);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(false);
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** `error_body_ok`: the error exposes the server's body with string `error` and `timestamp`. */
function bodyOk(err: unknown): boolean {
  return (
    err instanceof ApiError &&
    err.body !== undefined &&
    typeof err.body.error === "string" &&
    typeof err.body.timestamp === "string"
  );
}

function statusOf(err: unknown): number | null {
  return err instanceof ApiError ? err.status : null;
}

// --- loop mode ------------------------------------------------------------------------------------

type Behaviour = (job: Job, ctx: JobContext) => Promise<{ value?: unknown; outcome: "ok" | "error" | "cancelled"; error?: unknown }>;

const BEHAVIOURS: Record<string, Behaviour> = {
  return_payload: async (job) => ({ value: job.payload, outcome: "ok" }),
  sleep_200ms_then_return_payload: async (job) => {
    await delay(200);
    return { value: job.payload, outcome: "ok" };
  },
  sleep_1500ms_then_return_payload: async (job) => {
    await delay(1500);
    return { value: job.payload, outcome: "ok" };
  },
  fail_retryable: async () => ({ outcome: "error", error: new Error("boom") }),
  fail_permanent: async () => ({ outcome: "error", error: new NonRetryableError("invalid input") }),
  report_progress_and_logs: async (job, ctx) => {
    ctx.progress(40, "loading");
    for (let n = 1; n <= 120; n++) ctx.log(`line ${n}`, "info");
    // The span current in the handler, read from the OpenTelemetry API (not from the SDK).
    const current = trace.getActiveSpan()?.spanContext();
    emit("handler_span", { job_id: job.id, trace_id: current?.traceId ?? "", span_id: current?.spanId ?? "" });
    ctx.progress(100, "done");
    return { value: job.payload, outcome: "ok" };
  },
  log_then_fail_retryable: async (_job, ctx) => {
    ctx.log("failing on purpose", "error");
    return { outcome: "error", error: new Error("boom") };
  },
  wait_for_cancel: async (job, ctx) => {
    const cancelled = await delay(20_000, ctx.signal);
    if (!cancelled) return { value: job.payload, outcome: "ok" };
    emit("handler_observed_cancel", { job_id: job.id });
    return { outcome: "cancelled", error: ctx.signal.reason };
  },
};

/**
 * `tracing`: the OpenTelemetry SDK as the global tracer provider, its spans kept in memory. Loaded
 * only for the scenarios that ask (the SDK library itself uses the API only).
 */
async function installTracing(): Promise<{ provider: NodeTracerProvider; exporter: InMemorySpanExporter }> {
  const { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } = await import("@opentelemetry/sdk-trace-node");
  const exporter = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  provider.register(); // also the AsyncLocalStorage context manager and the W3C propagator
  return { provider, exporter };
}

const STATUS_NAMES: Record<SpanStatusCode, string> = {
  [SpanStatusCode.UNSET]: "unset",
  [SpanStatusCode.OK]: "ok",
  [SpanStatusCode.ERROR]: "error",
};

/** One `worker_span` event per finished `process ...` span. */
async function emitWorkerSpans(provider: NodeTracerProvider, exporter: InMemorySpanExporter): Promise<void> {
  await provider.forceFlush();
  for (const span of exporter.getFinishedSpans()) {
    if (!span.name.startsWith("process ")) continue;
    const { traceId, spanId } = span.spanContext();
    emit("worker_span", {
      job_id: span.attributes["messaging.message.id"] ?? null,
      name: span.name,
      trace_id: traceId,
      span_id: spanId,
      parent_span_id: span.parentSpanContext?.spanId ?? "",
      kind: SpanKind[span.kind].toLowerCase(),
      status: STATUS_NAMES[span.status.code],
      attributes: span.attributes,
    });
  }
}

async function loopMode(scenario: Scenario, e: Env): Promise<void> {
  const w = scenario.worker;
  const tracing = w.tracing ? await installTracing() : undefined;
  const stopAfter = w.stop_after_jobs ?? 1;
  const concurrency = w.concurrency ?? 1;
  const stop = new AbortController();
  let finished = 0;
  const finish = (): void => {
    finished += 1;
    if (finished >= stopAfter) stop.abort();
  };

  const handlers: Handlers = {};
  for (const [task, name] of Object.entries(w.handlers ?? {})) {
    const behaviour = BEHAVIOURS[name];
    if (!behaviour) throw new Error(`unknown handler behaviour ${name}`);
    const handler: Handler = async (job, ctx) => {
      emit("handler_started", { job_id: job.id });
      const done = await behaviour(job, ctx);
      emit("job_done", { job_id: job.id, outcome: done.outcome });
      finish();
      if (done.outcome === "ok") return done.value;
      throw done.error;
    };
    handlers[task] = handler;
  }

  const qf = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: e.workerToken });
  await qf.worker.run(e.queue, handlers, {
    leaseSecs: w.lease_secs ?? 30,
    waitSecs: 1,
    concurrency,
    batchSize: w.batch_size ?? concurrency,
    ...(w.worker_id !== undefined ? { workerId: w.worker_id } : {}),
    signal: stop.signal,
    onError: (err, info) => {
      const job = info.jobId ? ` ${info.jobId}` : "";
      process.stderr.write(`runner: worker ${info.phase}${job}: ${err instanceof Error ? err.message : String(err)}\n`);
    },
  });
  if (tracing) await emitWorkerSpans(tracing.provider, tracing.exporter);
}

// --- raw_stale_lease ------------------------------------------------------------------------------

async function rawStaleLease(scenario: Scenario, e: Env): Promise<void> {
  listenStdin();
  const qf = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: e.workerToken });
  const leaseSecs = scenario.worker.lease_secs ?? 30;
  let leased = (await qf.worker.lease(e.queue, { maxJobs: 1, leaseSecs, waitSecs: 5 })).jobs[0];
  for (let i = 0; leased === undefined && i < 5; i++) {
    leased = (await qf.worker.lease(e.queue, { maxJobs: 1, leaseSecs, waitSecs: 5 })).jobs[0];
  }
  if (leased === undefined) throw new Error(`no job to lease on ${e.queue}`);
  emit("leased", { job_id: leased.job.id, lease_token: leased.lease_token });
  await nextCommand("continue");

  let heartbeatError: unknown;
  let completeError: unknown;
  try {
    const answer = await qf.worker.heartbeat(leased, 30);
    process.stderr.write(`runner: stale heartbeat unexpectedly answered ${JSON.stringify(answer)}\n`);
  } catch (err) {
    heartbeatError = err;
  }
  try {
    await qf.worker.complete(leased, { late: true });
    process.stderr.write("runner: stale complete unexpectedly succeeded\n");
  } catch (err) {
    completeError = err;
  }
  emit("stale_rejected", {
    heartbeat_status: statusOf(heartbeatError),
    complete_status: statusOf(completeError),
    error_body_ok: bodyOk(heartbeatError) && bodyOk(completeError),
  });
}

// --- auth_errors ----------------------------------------------------------------------------------

async function loopError(qf: QueueFlow, queue: string): Promise<unknown> {
  const guard = AbortSignal.timeout(15_000); // a loop that spins instead of failing is stopped here
  try {
    await qf.worker.run(queue, { "conf.never": async () => ({}) }, { leaseSecs: 5, waitSecs: 1, signal: guard, onError: () => {} });
    return undefined;
  } catch (err) {
    return err;
  }
}

async function authErrors(_scenario: Scenario, e: Env): Promise<void> {
  const badWorker = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: "not-the-token" });
  const bad = await loopError(badWorker, e.queue);
  emit("loop_bad_token", { status: statusOf(bad), error_body_ok: bodyOk(bad) });

  const tenantAsWorker = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: e.tenantToken });
  const forbidden = await loopError(tenantAsWorker, e.queue);
  emit("loop_tenant_token", { status: statusOf(forbidden), error_body_ok: bodyOk(forbidden) });

  const workerAsTenant = new QueueFlow({ baseUrl: e.baseUrl, token: e.workerToken });
  let raw: unknown;
  try {
    await workerAsTenant.jobs.create({ task_name: "conf.raw", payload: {}, config: { queue: e.queue } });
  } catch (err) {
    raw = err;
  }
  emit("raw_worker_token_on_tenant_route", { status: statusOf(raw), error_body_ok: bodyOk(raw) });
}

// --- raw_calls ------------------------------------------------------------------------------------

async function rawCalls(_scenario: Scenario, e: Env): Promise<void> {
  const qf = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: e.workerToken });
  const failures: string[] = [];
  const expect = (ok: boolean, message: string): void => {
    if (!ok) failures.push(message);
  };
  const step = async (name: string, body: () => Promise<void>): Promise<void> => {
    try {
      await body();
    } catch (err) {
      failures.push(`${name}: unexpected ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
    }
  };
  const expectError = async (name: string, status: number, call: () => Promise<unknown>): Promise<void> => {
    try {
      await call();
      failures.push(`${name}: succeeded, expected an error with status ${status}`);
    } catch (err) {
      expect(statusOf(err) === status, `${name}: status ${String(statusOf(err))}, expected ${status}`);
      expect(bodyOk(err), `${name}: the error does not expose the {error, timestamp} body`);
    }
  };
  const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

  // 1. whoami
  await step("whoami", async () => {
    const me = await qf.whoami();
    expect(me.tenant === "conformance", `whoami: tenant ${me.tenant}`);
    expect(me.access === "read_write", `whoami: access ${me.access}`);
  });

  // 2. create with an idempotency key, twice
  let firstId: string | undefined;
  await step("create", async () => {
    const body = { task_name: "conf.raw", payload: { a: 1 }, config: { queue: e.queue, priority: 5 } };
    const created = await qf.jobs.create(body, { idempotencyKey: "raw-1" });
    const again = await qf.jobs.create(body, { idempotencyKey: "raw-1" });
    firstId = created.job_id;
    expect(typeof created.job_id === "string" && created.job_id.length > 0, "create: no job_id");
    expect(again.job_id === created.job_id, `create: idempotent create gave ${again.job_id}, not ${created.job_id}`);
  });

  // 3. get
  await step("get", async () => {
    if (!firstId) throw new Error("no job from step 2");
    const job = await qf.jobs.get(firstId);
    expect(job.task_name === "conf.raw", `get: task_name ${job.task_name}`);
    expect(same(job.payload, { a: 1 }), `get: payload ${JSON.stringify(job.payload)}`);
    expect(job.queue_name === e.queue, `get: queue_name ${job.queue_name}`);
    expect(job.status === "pending", `get: status ${job.status}`);
    expect(job.config.priority === 5, `get: config.priority ${String(job.config.priority)}`);
  });

  // 4. batch
  await step("batch", async () => {
    const batch = await qf.jobs.createBatch(
      [1, 2, 3].map((n) => ({ task_name: "conf.raw", payload: { n }, config: { queue: e.queue } })),
    );
    expect(batch.count === 3, `batch: count ${batch.count}`);
    expect(Array.isArray(batch.job_ids) && batch.job_ids.length === 3, `batch: ${batch.job_ids.length} ids`);
  });

  // 5. list with a cursor
  await step("list", async () => {
    const first = await qf.jobs.list({ queue: e.queue, limit: 2, include_total: true });
    expect(first.jobs.length === 2, `list: ${first.jobs.length} jobs on the first page`);
    expect(first.has_more === true, "list: has_more is not true");
    expect(first.total === 4, `list: total ${String(first.total)}`);
    expect(typeof first.next_cursor === "string" && first.next_cursor.length > 0, "list: no next_cursor");
    if (first.next_cursor) {
      const second = await qf.jobs.list({ queue: e.queue, limit: 2, cursor: first.next_cursor });
      expect(second.jobs.length === 2, `list: ${second.jobs.length} jobs on the second page`);
      const seen = new Set(first.jobs.map((j) => j.id));
      expect(second.jobs.every((j) => !seen.has(j.id)), "list: the second page repeats a job");
    }
  });

  // 6. cancel, twice
  await step("cancel", async () => {
    if (!firstId) throw new Error("no job from step 2");
    const id = firstId;
    await qf.jobs.cancel(id);
    await expectError("cancel again", 409, () => qf.jobs.cancel(id));
  });

  // (extra) the SSE stream of a terminal job: its status once, then the server ends the stream
  await step("job events", async () => {
    if (!firstId) throw new Error("no job from step 2");
    const seen: string[] = [];
    for await (const job of qf.jobs.events(firstId, { signal: AbortSignal.timeout(10_000) })) seen.push(job.status);
    expect(same(seen, ["cancelled"]), `job events: ${JSON.stringify(seen)}`);
  });

  // 7. cancel by filter
  await step("cancel by filter", async () => {
    const res = await qf.jobs.cancelMany({ queue: e.queue });
    expect(res.cancelled === 3, `cancel by filter: cancelled ${res.cancelled}`);
  });

  // 8. unknown job
  await step("get unknown", async () => {
    await expectError("get unknown", 404, () => qf.jobs.get(randomUUID()));
  });

  // 9. workflow
  await step("workflow", async () => {
    const created = await qf.workflows.create({
      name: "conf-wf",
      steps: [
        { name: "a", task_name: "conf.raw", queue: e.queue },
        { name: "b", task_name: "conf.raw", depends_on: ["a"], queue: e.queue },
      ],
    });
    const id = created.workflow_id;
    const wf = await qf.workflows.get(id);
    expect(wf.status === "created" || wf.status === "running", `workflow: status ${wf.status}`);
    const steps = await qf.workflows.steps(id);
    expect(same(steps.steps.map((s) => s.name), ["a", "b"]), `workflow: steps ${JSON.stringify(steps.steps.map((s) => s.name))}`);
    const diagram = await qf.workflows.diagram(id);
    expect(diagram.format === "mermaid", `workflow: diagram format ${diagram.format}`);
    expect(diagram.diagram.includes("a --> b"), "workflow: diagram lacks 'a --> b'");
    await qf.workflows.cancel(id);
    await qf.workflows.retry(id);
    await qf.workflows.cancel(id);
    const events: string[] = [];
    for await (const ev of qf.workflows.events(id, { signal: AbortSignal.timeout(10_000) })) events.push(ev.status);
    expect(events.at(-1) === "cancelled", `workflow events: ${JSON.stringify(events)}`);
    const listed = await qf.workflows.list({ limit: 100 });
    expect(listed.workflows.some((w) => w.id === id), "workflow: not listed");
  });

  // 10. a cycle
  await step("workflow cycle", async () => {
    await expectError("workflow cycle", 400, () =>
      qf.workflows.create({
        name: "conf-cycle",
        steps: [
          { name: "a", task_name: "conf.raw", depends_on: ["b"], queue: e.queue },
          { name: "b", task_name: "conf.raw", depends_on: ["a"], queue: e.queue },
        ],
      }),
    );
  });

  // 11. cron
  await step("cron", async () => {
    const created = await qf.cron.create({ name: "conf-cron", cron_expr: "*/5 * * * *", task_name: "conf.raw", queue: e.queue });
    const id = created.cron_id;
    const got = await qf.cron.get(id);
    expect(got.name === "conf-cron" && got.cron_expr === "*/5 * * * *", `cron: got ${JSON.stringify(got)}`);
    expect(!("timezone" in got) && !("next_run_local" in got), `cron: a zone on ${JSON.stringify(got)}`);
    const zoned = await qf.cron.create({
      name: "conf-cron-tz",
      cron_expr: "0 9 * * *",
      task_name: "conf.raw",
      queue: e.queue,
      timezone: "Europe/Berlin",
    });
    const berlin = await qf.cron.get(zoned.cron_id);
    const local = berlin.next_run_local;
    expect(berlin.timezone === "Europe/Berlin", `cron (zoned): timezone ${JSON.stringify(berlin.timezone)}`);
    expect(
      local !== undefined && /T09:00:00\+0[12]:00$/.test(local) && Date.parse(local) === Date.parse(berlin.next_run_at),
      `cron (zoned): next_run_local ${JSON.stringify(local)}, next_run_at ${berlin.next_run_at}`,
    );
    const listed = await qf.cron.list({ limit: 100 });
    expect(listed.crons.some((c) => c.id === id), "cron: not listed");
    expect(
      listed.crons.some((c) => c.id === zoned.cron_id && c.timezone === "Europe/Berlin" && c.next_run_local === local),
      "cron (zoned): not listed with its zone and local next run",
    );
    await qf.cron.delete(zoned.cron_id);
    await qf.cron.pause(id);
    expect((await qf.cron.get(id)).enabled === false, "cron: still enabled after pause");
    await qf.cron.resume(id);
    expect((await qf.cron.get(id)).enabled === true, "cron: not enabled after resume");
    await qf.cron.delete(id);
    await expectError("cron deleted", 404, () => qf.cron.get(id));
  });

  // 12. dlq, stats, queues, tasks
  await step("dlq", async () => {
    const dlq = await qf.dlq.list({ limit: 5 });
    expect(Array.isArray(dlq.dead_letters), "dlq: dead_letters is not a list");
  });
  await step("stats", async () => {
    const stats = await qf.stats();
    const fields = [
      "jobs_created",
      "jobs_completed",
      "jobs_failed",
      "jobs_retried",
      "jobs_dead_lettered",
      "workflows_created",
      "workflows_completed",
      "workflows_failed",
    ] as const;
    for (const field of fields) {
      const value = stats[field];
      expect(typeof value === "number" && value >= 0, `stats: ${field} = ${String(value)}`);
    }
  });
  await step("queues", async () => {
    const queues = await qf.queues.list();
    expect(queues.queues.some((q) => q.queue === e.queue), `queues: ${e.queue} not listed`);
    const paused = await qf.queues.pause(e.queue);
    expect(paused.paused === true, "queues: pause did not answer paused true");
    const resumed = await qf.queues.resume(e.queue);
    expect(resumed.paused === false, "queues: resume did not answer paused false");
  });
  await step("tasks", async () => {
    const tasks = await qf.tasks();
    expect(Array.isArray(tasks.tasks), "tasks: not a list");
  });
  await step("health", async () => {
    const health = await qf.health();
    expect(typeof health.status === "string", "health: no status");
  });

  emit("raw_calls_done", { ok: failures.length === 0, failures });
}

// --- raw_unique -----------------------------------------------------------------------------------

/** Two creates with one unique key (the typed config, `on_conflict` left to the server's default)
 * and different payloads, then the job read back. */
async function rawUnique(scenario: Scenario, e: Env): Promise<void> {
  const { unique_key: key, window_secs: windowSecs } = scenario.worker;
  if (key === undefined || windowSecs === undefined) {
    throw new Error("raw_unique needs worker.unique_key and worker.window_secs");
  }
  const qf = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: e.workerToken });
  const unique: UniquePolicy = { key, window_secs: windowSecs };
  const config: JobConfigRequest = { queue: e.queue, unique };
  const first = await qf.jobs.create({ task_name: "conf.unique", payload: { n: 1 }, config });
  const second = await qf.jobs.create({ task_name: "conf.unique", payload: { n: 2 }, config });
  const job = await qf.jobs.get(first.job_id);
  emit("unique_done", {
    same: first.job_id === second.job_id,
    unique: job.config.unique ?? null,
    payload: job.payload,
  });
}

// --- raw_durable_time -----------------------------------------------------------------------------

const TERMINAL_WORKFLOW: ReadonlySet<WorkflowStatus> = new Set(["completed", "failed", "partially_failed", "cancelled"]);

/** A wait-for-event step (its key a context placeholder) and a sleep after it: see the step waiting,
 * send its event, follow the workflow to its end, then read the event back. */
async function rawDurableTime(scenario: Scenario, e: Env): Promise<void> {
  const w = scenario.worker;
  if (!w.context || !w.key_template || !w.timeout_secs || !w.sleep_secs || !w.event_key || !w.payload) {
    throw new Error("raw_durable_time needs worker.context, key_template, timeout_secs, sleep_secs, event_key and payload");
  }
  const qf = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: e.workerToken });
  const body = wf("conf-durable")
    .waitForEvent("approve", w.key_template, { timeout_secs: w.timeout_secs })
    .sleep("nap", w.sleep_secs, { dependsOn: ["approve"] })
    .context(w.context)
    .build();
  const { workflow_id: id } = await qf.workflows.create(body);

  let waiting: WorkflowStepState | undefined;
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await delay(100)) {
    const approve = (await qf.workflows.steps(id)).steps.find((s) => s.name === "approve");
    if (approve?.status === "running" && approve.event_key !== undefined) {
      waiting = approve;
      break;
    }
  }
  const sent = await qf.events.send({ key: w.event_key, payload: w.payload });
  let got = await qf.workflows.get(id);
  for (const deadline = Date.now() + 20_000; !TERMINAL_WORKFLOW.has(got.status) && Date.now() < deadline; ) {
    await delay(200);
    got = await qf.workflows.get(id);
  }
  const listed = await qf.events.list({ key: w.event_key, limit: 10 });
  const mine = listed.events.find((ev) => ev.event_id === sent.event_id);
  const nap = got.context.nap as JsonObject | undefined;
  emit("durable_done", {
    waiting_key: waiting?.event_key ?? null,
    wake_at_set: waiting?.wake_at !== undefined,
    delivered: sent.delivered,
    status: got.status,
    approval: got.context.approve ?? null,
    slept: typeof nap?.slept_until === "string",
    listed: mine ? { key: mine.key, delivered: mine.delivered, payload: mine.payload } : null,
  });
}

// --- raw_cron_workflow ----------------------------------------------------------------------------

/** A workflow schedule as this SDK hands it back, in the contract's summary shape. */
function scheduleSummary(schedule: CronSchedule | undefined, queue: string): JsonObject | null {
  if (!schedule) return null;
  const workflow = schedule.workflow;
  return {
    task_name: schedule.task_name ?? null,
    name: workflow?.name ?? null,
    context: workflow?.context ?? null,
    steps:
      workflow?.steps.map((step) => ({
        name: step.name,
        task_name: step.task_name ?? null,
        depends_on: step.depends_on ?? null,
        payload: step.payload ?? null,
        sleep_secs: step.sleep_secs ?? null,
        on_failure: step.on_failure ?? null,
        our_queue: step.queue === queue,
      })) ?? null,
  };
}

/** A schedule that starts a workflow beside a task schedule: get, list, see it fire, delete. */
async function rawCronWorkflow(scenario: Scenario, e: Env): Promise<void> {
  const w = scenario.worker;
  if (!w.name || !w.cron_expr || !w.context || !w.payload || !w.sleep_secs) {
    throw new Error("raw_cron_workflow needs worker.name, cron_expr, context, payload and sleep_secs");
  }
  const qf = new QueueFlow({ baseUrl: e.baseUrl, token: e.tenantToken, workerToken: e.workerToken });
  const workflow = wf(w.name)
    .step("extract", "conf.cron", { payload: w.payload, queue: e.queue })
    .sleep("nap", w.sleep_secs, { dependsOn: ["extract"] })
    .context(w.context)
    .build();
  const { cron_id: id } = await qf.cron.create({ name: w.name, cron_expr: w.cron_expr, workflow });
  const { cron_id: taskId } = await qf.cron.create({
    name: "conf-cron-task",
    cron_expr: "0 0 1 1 *",
    task_name: "conf.cron",
    queue: e.queue,
  });
  const got = await qf.cron.get(id);
  const listed = await qf.cron.list({ limit: 100 });
  let fired: Workflow | undefined;
  for (const deadline = Date.now() + 20_000; !fired && Date.now() < deadline; ) {
    fired = (await qf.workflows.list({ limit: 100 })).workflows.find((x) => x.name.startsWith(`${w.name}@`));
    if (!fired) await delay(200);
  }
  await qf.cron.delete(id);
  await qf.cron.delete(taskId);
  let goneStatus: number | null = null;
  try {
    await qf.cron.get(id);
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    goneStatus = err.status;
  }
  const plain = listed.crons.find((c) => c.id === taskId);
  emit("cron_workflow_done", {
    got: scheduleSummary(got, e.queue),
    listed: scheduleSummary(listed.crons.find((c) => c.id === id), e.queue),
    plain: plain ? { task_name: plain.task_name ?? null, has_workflow: plain.workflow !== undefined } : null,
    fired_context: fired?.context ?? null,
    gone_status: goneStatus,
  });
}

// --- main -----------------------------------------------------------------------------------------

const MODES: Record<string, (scenario: Scenario, e: Env) => Promise<void>> = {
  loop: loopMode,
  raw_stale_lease: rawStaleLease,
  auth_errors: authErrors,
  raw_calls: rawCalls,
  raw_unique: rawUnique,
  raw_durable_time: rawDurableTime,
  raw_cron_workflow: rawCronWorkflow,
};

async function main(): Promise<number> {
  const path = process.argv[2];
  if (!path) {
    process.stderr.write("usage: runner <scenario.json>\n");
    return 2;
  }
  const scenario = JSON.parse(readFileSync(path, "utf8")) as Scenario;
  const mode = MODES[scenario.worker.mode];
  if (!mode) {
    process.stderr.write(`runner: unknown worker mode ${scenario.worker.mode}\n`);
    return 2;
  }
  await mode(scenario, env());
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`runner: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
