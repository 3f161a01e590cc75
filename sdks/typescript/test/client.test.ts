import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";

import {
  AbortError,
  ConnectionError,
  NotFoundError,
  QueueFlow,
  TimeoutError,
  UnauthorizedError,
  wf,
  type CreateCronRequest,
  type CronSchedule,
  type Job,
  type KeptEvent,
  type PostEventResponse,
  type UniquePolicy,
  type WorkflowStepState,
} from "../dist/index.js";
import { errorBody, fakeJob, json, startStub } from "./stub.js";

test("requests carry the token, JSON bodies, and every list parameter", async () => {
  const stub = await startStub((req, res) => {
    if (req.path === "/api/v1/jobs" && req.method === "GET") json(res, 200, { jobs: [], limit: 2, offset: 0, has_more: false });
    else json(res, 201, { job_id: "j1" });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url + "/", token: "tenant-key" });
    await qf.jobs.list({
      queue: "q 1",
      status: "pending",
      task_name: "t",
      limit: 2,
      offset: 4,
      cursor: "abc=",
      include_total: true,
      order_by: "created_at ASC",
      created_after: "2026-01-01T00:00:00+00:00",
      created_before: undefined,
    });
    const listed = stub.requests[0]!;
    assert.equal(listed.headers.authorization, "Bearer tenant-key");
    assert.equal(listed.query.get("queue"), "q 1");
    assert.equal(listed.query.get("status"), "pending");
    assert.equal(listed.query.get("task_name"), "t");
    assert.equal(listed.query.get("limit"), "2");
    assert.equal(listed.query.get("offset"), "4");
    assert.equal(listed.query.get("cursor"), "abc=");
    assert.equal(listed.query.get("include_total"), "true");
    assert.equal(listed.query.get("order_by"), "created_at ASC");
    assert.equal(listed.query.get("created_after"), "2026-01-01T00:00:00+00:00", "a '+' survives encoding");
    assert.equal(listed.query.has("created_before"), false, "undefined parameters are left out");

    const created = await qf.jobs.create({ task_name: "t", payload: { a: 1 } }, { idempotencyKey: "k-1" });
    assert.equal(created.job_id, "j1");
    const sent = stub.requests[1]!;
    assert.equal(sent.method, "POST");
    assert.equal(sent.headers["idempotency-key"], "k-1");
    assert.equal(sent.headers["content-type"], "application/json");
    assert.deepEqual(sent.body, { task_name: "t", payload: { a: 1 } });
  } finally {
    await stub.close();
  }
});

test("the worker routes use the worker token; it defaults to the tenant token", async () => {
  const stub = await startStub((_req, res) => json(res, 200, { jobs: [] }));
  try {
    await new QueueFlow({ baseUrl: stub.url, token: "tenant", workerToken: "worker" }).worker.lease("q", { waitSecs: 0 });
    await new QueueFlow({ baseUrl: stub.url, token: "tenant" }).worker.lease("q", { maxJobs: 3, leaseSecs: 9, waitSecs: 0 });
    assert.equal(stub.requests[0]!.headers.authorization, "Bearer worker");
    assert.equal(stub.requests[1]!.headers.authorization, "Bearer tenant");
    assert.deepEqual(stub.requests[1]!.body, { max_jobs: 3, lease_secs: 9, wait_secs: 0 });
    assert.equal(stub.requests[1]!.path, "/api/v1/queues/q/lease");
  } finally {
    await stub.close();
  }
});

test("error statuses become typed errors with the body", async () => {
  const stub = await startStub((req, res) => {
    if (req.path.endsWith("/whoami")) errorBody(res, 401, "missing or invalid token");
    else errorBody(res, 404, "job not found: nope");
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "t" });
    await assert.rejects(qf.jobs.get("nope"), (err: unknown) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal(err.status, 404);
      assert.equal(err.body?.error, "job not found: nope");
      assert.equal(typeof err.body?.timestamp, "string");
      return true;
    });
    await assert.rejects(qf.whoami(), UnauthorizedError);
  } finally {
    await stub.close();
  }
});

test("idempotent calls retry 502/503/504; other calls do not", async () => {
  let gets = 0;
  let posts = 0;
  const stub = await startStub((req, res) => {
    if (req.method === "GET") {
      gets += 1;
      if (gets < 3) errorBody(res, 503, "draining");
      else json(res, 200, { tasks: ["a"] });
    } else {
      posts += 1;
      errorBody(res, 503, "draining");
    }
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "t", maxRetries: 2 });
    assert.deepEqual(await qf.tasks(), { tasks: ["a"] });
    assert.equal(gets, 3);
    await assert.rejects(qf.jobs.create({ task_name: "x" }), (err: unknown) => (err as { status?: number }).status === 503);
    assert.equal(posts, 1, "a create without an idempotency key is not retried");
    await assert.rejects(qf.jobs.create({ task_name: "x" }, { idempotencyKey: "k" }));
    assert.equal(posts, 4, "with a key it is retried twice");
  } finally {
    await stub.close();
  }
});

test("no server: ConnectionError", async () => {
  const port = await new Promise<number>((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
  const qf = new QueueFlow({ baseUrl: `http://127.0.0.1:${port}`, token: "t", maxRetries: 0 });
  await assert.rejects(qf.health(), ConnectionError);
});

test("a slow answer: TimeoutError; an aborted call: AbortError", async () => {
  const stub = await startStub(async (_req, res) => {
    await new Promise((r) => setTimeout(r, 400));
    json(res, 200, { status: "ok" });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "t", timeoutMs: 50, maxRetries: 0 });
    await assert.rejects(qf.ready(), TimeoutError);
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 30);
    await assert.rejects(qf.ready({ signal: controller.signal, timeoutMs: 5000 }), AbortError);
  } finally {
    await stub.close();
  }
});

test("jobs.events streams status events until the server closes", async () => {
  const stub = await startStub(async (req, res) => {
    assert.equal(req.headers.accept, "text/event-stream");
    res.writeHead(200, { "Content-Type": "text/event-stream" });
    res.write(`event: status\ndata: ${JSON.stringify({ ...fakeJob("j1"), status: "pending" })}\n\n`);
    await new Promise((r) => setTimeout(r, 20));
    res.write(": keep-alive\n\n");
    res.write(`event: status\ndata: ${JSON.stringify({ ...fakeJob("j1"), status: "completed" })}`);
    await new Promise((r) => setTimeout(r, 20));
    res.end("\n\n");
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "t" });
    const seen: Job[] = [];
    for await (const job of qf.jobs.events("j1")) seen.push(job);
    assert.deepEqual(seen.map((j) => j.status), ["pending", "completed"]);
    assert.equal(stub.requests[0]!.path, "/api/v1/jobs/j1/events");
  } finally {
    await stub.close();
  }
});

test("jobs.waitFor polls until terminal, and times out", async () => {
  let polls = 0;
  const stub = await startStub((req, res) => {
    polls += 1;
    const status = req.path.endsWith("/done") && polls >= 3 ? "completed" : "running";
    json(res, 200, { ...fakeJob("x"), status });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "t" });
    const job = await qf.jobs.waitFor("done", { intervalMs: 10 });
    assert.equal(job.status, "completed");
    await assert.rejects(qf.jobs.waitFor("never", { intervalMs: 10, timeoutMs: 60 }), TimeoutError);
  } finally {
    await stub.close();
  }
});

test("constructor validates its options", () => {
  assert.throws(() => new QueueFlow({ baseUrl: "", token: "t" }), TypeError);
  assert.throws(() => new QueueFlow({ baseUrl: "http://x", token: "" }), TypeError);
});

test("worker.completeMany sends the batch acknowledgement; offersCompleteMany reads /openapi.json", async () => {
  let doc: ((res: import("node:http").ServerResponse) => void) | undefined;
  const stub = await startStub((req, res) => {
    if (req.path === "/openapi.json") return doc!(res);
    const jobs = (req.body as { jobs: Array<{ id: string }> }).jobs;
    json(res, 200, {
      results: jobs.map((j, i) =>
        i === 0 ? { id: j.id, outcome: "completed", status: 204 } : { id: j.id, outcome: "conflict", status: 409, error: "lease is no longer held" },
      ),
    });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant", workerToken: "worker" });
    const leased = { job: fakeJob("j1") as unknown as Job, lease_token: "t1" };
    const answer = await qf.worker.completeMany([
      { lease: leased, result: { ok: true } },
      { lease: { jobId: "j2", leaseToken: "t2" } },
    ]);
    const sent = stub.requests[0]!;
    assert.equal(sent.method, "POST");
    assert.equal(sent.path, "/api/v1/jobs/complete");
    assert.equal(sent.headers.authorization, "Bearer worker");
    assert.deepEqual(sent.body, {
      jobs: [
        { id: "j1", lease_token: "t1", result: { ok: true } },
        { id: "j2", lease_token: "t2", result: {} },
      ],
    });
    assert.deepEqual(answer.results, [
      { id: "j1", outcome: "completed", status: 204 },
      { id: "j2", outcome: "conflict", status: 409, error: "lease is no longer held" },
    ]);

    doc = (res) => json(res, 200, { paths: { "/api/v1/jobs/complete": { post: { summary: "x" } } } });
    assert.equal(await qf.worker.offersCompleteMany(), true);
    assert.equal(stub.requests.at(-1)!.method, "GET");
    doc = (res) => json(res, 200, { paths: { "/api/v1/jobs/complete": { get: {} } } });
    assert.equal(await qf.worker.offersCompleteMany(), false);
    doc = (res) => errorBody(res, 404, "not found");
    assert.equal(await qf.worker.offersCompleteMany(), false);
    doc = (res) => {
      res.writeHead(200, { "Content-Type": "text/html" });
      res.end("<html>not json</html>");
    };
    assert.equal(await qf.worker.offersCompleteMany(), false, "an answer all the same");
    doc = (res) => errorBody(res, 503, "starting");
    await assert.rejects(qf.worker.offersCompleteMany({ maxRetries: 0 }), (err: unknown) => {
      assert.equal((err as { status?: number }).status, 503);
      return true;
    });
    doc = (res) => res.socket?.destroy();
    await assert.rejects(qf.worker.offersCompleteMany({ maxRetries: 0 }), ConnectionError);
  } finally {
    await stub.close();
  }
});

test("workerKeys mint, list and revoke with the tenant token", async () => {
  const key = { id: "k1", name: "runners", queues: ["emails"], created_at: "2026-12-03T14:00:00Z", expires_at: null };
  const stub = await startStub((req, res) => {
    if (req.method === "POST") json(res, 201, { ...key, token: "qfwk_x" });
    else if (req.method === "GET") json(res, 200, { worker_keys: [key] });
    else json(res, 204);
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant", workerToken: "worker" });
    const minted = await qf.workerKeys.create({ name: "runners", queues: ["emails"] });
    assert.equal(minted.token, "qfwk_x");
    assert.deepEqual((await qf.workerKeys.list()).worker_keys, [key]);
    await qf.workerKeys.delete("k1");
    assert.deepEqual(
      stub.requests.map((r) => `${r.method} ${r.path}`),
      ["POST /api/v1/worker-keys", "GET /api/v1/worker-keys", "DELETE /api/v1/worker-keys/k1"],
    );
    assert.ok(stub.requests.every((r) => r.headers.authorization === "Bearer tenant"));
    assert.deepEqual(stub.requests[0]!.body, { name: "runners", queues: ["emails"] });
  } finally {
    await stub.close();
  }
});

test("limits put, get, list and delete a policy with the key encoded and the tenant token", async () => {
  const policy = {
    key: "customer:*",
    concurrency: 1,
    rate: { count: 10, per_secs: 1.5 },
    running: 0,
    created_at: "2026-12-03T14:00:00Z",
    updated_at: "2026-12-03T14:00:00Z",
  };
  const exact = { ...policy, key: "api:stripe", concurrency: null, running: 2, rate_available: 7 };
  const stub = await startStub((req, res) => {
    if (req.method === "PUT") json(res, 200, policy);
    else if (req.method === "GET" && req.path === "/api/v1/limits") json(res, 200, { limits: [exact, policy] });
    else if (req.method === "GET" && req.path === "/api/v1/limits/api%3Astripe") json(res, 200, exact);
    else if (req.method === "GET") errorBody(res, 404, "no policy");
    else json(res, 204);
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant", workerToken: "worker" });
    const put = await qf.limits.put("customer:*", { concurrency: 1, rate: { count: 10, per_secs: 1.5 } });
    assert.equal(put.rate_available, undefined);
    assert.deepEqual(put, policy);
    assert.deepEqual((await qf.limits.list()).limits.map((p) => p.key), ["api:stripe", "customer:*"]);
    const got = await qf.limits.get("api:stripe");
    assert.equal(got.concurrency, null);
    assert.equal(got.rate_available, 7);
    await qf.limits.delete("customer:*");
    await assert.rejects(qf.limits.get("customer:42"), NotFoundError);
    assert.deepEqual(
      stub.requests.map((r) => `${r.method} ${r.path}`),
      [
        "PUT /api/v1/limits/customer%3A*",
        "GET /api/v1/limits",
        "GET /api/v1/limits/api%3Astripe",
        "DELETE /api/v1/limits/customer%3A*",
        "GET /api/v1/limits/customer%3A42",
      ],
    );
    assert.ok(stub.requests.every((r) => r.headers.authorization === "Bearer tenant"));
    assert.deepEqual(stub.requests[0]!.body, { concurrency: 1, rate: { count: 10, per_secs: 1.5 } });
  } finally {
    await stub.close();
  }
});

test("a job config's limits go out when set and come back in the job's config", async () => {
  const stub = await startStub((req, res) => {
    if (req.method === "POST") json(res, 201, { job_id: "j1" });
    else json(res, 200, { ...fakeJob("j1"), config: { priority: 0, limits: ["customer:42", "api:stripe"] } });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant" });
    await qf.jobs.create({ task_name: "charge", config: { limits: ["customer:42", "api:stripe"] } });
    await qf.jobs.create({ task_name: "charge", config: { priority: 1 } });
    const job = await qf.jobs.get("j1");
    assert.deepEqual(stub.requests[0]!.body, { task_name: "charge", config: { limits: ["customer:42", "api:stripe"] } });
    assert.deepEqual(stub.requests[1]!.body, { task_name: "charge", config: { priority: 1 } });
    assert.deepEqual(job.config.limits, ["customer:42", "api:stripe"]);
  } finally {
    await stub.close();
  }
});

test("a job config's unique policy goes out when set and comes back typed in the job's config", async () => {
  const held: UniquePolicy = { key: "report:42", window_secs: 600, on_conflict: "skip" };
  const stub = await startStub((req, res) => {
    if (req.method === "POST" && req.path === "/api/v1/jobs/batch") json(res, 201, { job_ids: ["j1", "j2"], count: 2 });
    else if (req.method === "POST") json(res, 201, { job_id: "j1" });
    else if (req.path === "/api/v1/jobs/j1") json(res, 200, { ...fakeJob("j1"), config: { priority: 0, unique: held } });
    else json(res, 200, { ...fakeJob("j2"), config: { priority: 0 } });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant" });
    await qf.jobs.create({ task_name: "report", config: { unique: { key: "report:42", window_secs: 600 } } });
    await qf.jobs.createBatch([
      { task_name: "report", config: { unique: { key: "report:43", window_secs: 60, on_conflict: "replace" } } },
      { task_name: "report", config: { priority: 2 } },
    ]);
    const job = await qf.jobs.get("j1");
    const plain = await qf.jobs.get("j2");
    assert.deepEqual(stub.requests[0]!.body, { task_name: "report", config: { unique: { key: "report:42", window_secs: 600 } } });
    assert.deepEqual(stub.requests[1]!.body, {
      jobs: [
        { task_name: "report", config: { unique: { key: "report:43", window_secs: 60, on_conflict: "replace" } } },
        { task_name: "report", config: { priority: 2 } },
      ],
    });
    const unique: UniquePolicy | undefined = job.config.unique;
    assert.deepEqual(unique, held);
    assert.equal(job.config.priority, 0);
    assert.equal(plain.config.unique, undefined);
    assert.ok(!("unique" in plain.config));
  } finally {
    await stub.close();
  }
});

test("a cron schedule's timezone goes out when set and comes back with its local next run", async () => {
  const schedule: CronSchedule = {
    id: "c1",
    name: "standup",
    cron_expr: "0 9 * * 1-5",
    task_name: "remind",
    enabled: true,
    next_run_at: "2026-03-30T07:00:00Z",
    created_at: "2026-03-27T12:00:00Z",
  };
  const zoned: CronSchedule = { ...schedule, timezone: "Europe/Berlin", next_run_local: "2026-03-30T09:00:00+02:00" };
  const plain: CronSchedule = { ...schedule, id: "c2", name: "nightly" };
  const stub = await startStub((req, res) => {
    if (req.method === "POST") json(res, 201, { cron_id: "c1" });
    else if (req.path === "/api/v1/cron/c1") json(res, 200, zoned);
    else if (req.path === "/api/v1/cron/c2") json(res, 200, plain);
    else json(res, 200, { crons: [zoned, plain], limit: 50, offset: 0, has_more: false });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant" });
    const standup: CreateCronRequest = { name: "standup", cron_expr: "0 9 * * 1-5", task_name: "remind", timezone: "Europe/Berlin" };
    await qf.cron.create(standup);
    await qf.cron.create({ name: "nightly", cron_expr: "0 2 * * *", task_name: "remind" });
    const got = await qf.cron.get("c1");
    const bare = await qf.cron.get("c2");
    const listed = await qf.cron.list();
    assert.deepEqual(stub.requests[0]!.body, {
      name: "standup",
      cron_expr: "0 9 * * 1-5",
      task_name: "remind",
      timezone: "Europe/Berlin",
    });
    assert.deepEqual(stub.requests[1]!.body, { name: "nightly", cron_expr: "0 2 * * *", task_name: "remind" });
    assert.equal(got.timezone, "Europe/Berlin");
    assert.equal(got.next_run_local, "2026-03-30T09:00:00+02:00");
    assert.equal(Date.parse(got.next_run_local!), Date.parse(got.next_run_at)); // one instant, two clocks
    assert.deepEqual(listed.crons[0], zoned);
    assert.equal(bare.timezone, undefined);
    assert.equal(bare.next_run_local, undefined);
    assert.ok(!("timezone" in bare) && !("next_run_local" in bare));
    assert.ok(!("timezone" in listed.crons[1]!) && !("next_run_local" in listed.crons[1]!));
  } finally {
    await stub.close();
  }
});

test("a workflow schedule goes out without a task and comes back by get and list", async () => {
  // As the server answers it: the workflow stored with each step's defaults filled in, no task_name.
  const stored = {
    name: "etl",
    steps: [
      { name: "extract", task_name: "etl.extract", depends_on: [], payload: {}, on_failure: "halt", on_success: "continue", metadata: {}, queue: "etl" },
      { name: "nap", depends_on: ["extract"], payload: {}, on_failure: "halt", on_success: "continue", metadata: {}, sleep_secs: 60 },
    ],
    context: {},
    metadata: {},
  };
  const base = { cron_expr: "0 2 * * *", enabled: true, next_run_at: "2026-12-04T02:00:00Z", created_at: "2026-12-03T00:00:00Z" };
  const scheduled = { ...base, id: "c1", name: "nightly", workflow: stored, future_field: 1 };
  const plain = { ...base, id: "c2", name: "remind", task_name: "remind", queue_name: "q" };
  const stub = await startStub((req, res) => {
    if (req.method === "POST") json(res, 201, { cron_id: "c1" });
    else if (req.path === "/api/v1/cron/c1") json(res, 200, scheduled);
    else json(res, 200, { crons: [scheduled, plain], limit: 50, offset: 0, has_more: false });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant" });
    const workflow = wf("etl").step("extract", "etl.extract", { queue: "etl" }).sleep("nap", 60, { dependsOn: ["extract"] }).build();
    const request: CreateCronRequest = { name: "nightly", cron_expr: "0 2 * * *", workflow, timezone: "Europe/Berlin" };
    assert.equal((await qf.cron.create(request)).cron_id, "c1");
    const got: CronSchedule = await qf.cron.get("c1");
    const listed = await qf.cron.list();
    assert.deepEqual(stub.requests[0]!.body, {
      name: "nightly",
      cron_expr: "0 2 * * *",
      workflow: {
        name: "etl",
        steps: [
          { name: "extract", task_name: "etl.extract", queue: "etl" },
          { name: "nap", sleep_secs: 60, depends_on: ["extract"] },
        ],
      },
      timezone: "Europe/Berlin",
    });
    assert.equal(got.task_name, undefined);
    assert.deepEqual(got.workflow, stored);
    assert.equal(got.workflow?.steps[1]?.sleep_secs, 60);
    assert.deepEqual(listed.crons[0], scheduled);
    assert.equal(listed.crons[1]!.task_name, "remind");
    assert.ok(!("workflow" in listed.crons[1]!));
  } finally {
    await stub.close();
  }
});

test("a schedule request is a task schedule or a workflow schedule, never both or neither", () => {
  const workflow = wf("etl").step("a", "etl.a").build();
  const task: CreateCronRequest = { name: "n", cron_expr: "* * * * *", task_name: "t", queue: "q" };
  const started: CreateCronRequest = { name: "n", cron_expr: "* * * * *", workflow };
  // @ts-expect-error: both a task and a workflow
  const both: CreateCronRequest = { name: "n", cron_expr: "* * * * *", task_name: "t", workflow };
  // @ts-expect-error: neither
  const neither: CreateCronRequest = { name: "n", cron_expr: "* * * * *" };
  // @ts-expect-error: a workflow schedule has no queue (its steps carry their own)
  const queued: CreateCronRequest = { name: "n", cron_expr: "* * * * *", workflow, queue: "q" };
  assert.equal([task, started, both, neither, queued].length, 5);
});

test("events.send and events.list, and a waiting step's state", async () => {
  const kept = {
    event_id: "e1",
    key: "approval:42",
    payload: { by: "ada" },
    delivered: 1,
    created_at: "2026-12-03T14:00:00Z",
    expires_at: "2026-12-04T14:00:00Z",
  };
  const stub = await startStub((req, res) => {
    if (req.method === "POST") json(res, 202, { event_id: "e1", delivered: 1 });
    else if (req.path === "/api/v1/events") json(res, 200, { events: [kept] });
    else
      json(res, 200, {
        steps: [
          { name: "approve", status: "running", wake_at: "2026-12-03T15:00:00Z", event_key: "approval:42" },
          { name: "nap", status: "pending" },
        ],
      });
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant", workerToken: "worker", maxRetries: 0 });
    const sent: PostEventResponse = await qf.events.send({ key: "approval:42", payload: { by: "ada" } });
    assert.deepEqual(sent, { event_id: "e1", delivered: 1 });
    await qf.events.send({ key: "ping" });
    const listed = await qf.events.list({ key: "approval:42", limit: 5 });
    const events: KeptEvent[] = listed.events;
    assert.deepEqual(events, [kept]);
    await qf.events.list();
    const states = await qf.workflows.steps("w1");
    const approve: WorkflowStepState = states.steps[0]!;
    assert.equal(approve.wake_at, "2026-12-03T15:00:00Z");
    assert.equal(approve.event_key, "approval:42");
    assert.equal(states.steps[1]!.event_key, undefined);
    assert.deepEqual(
      stub.requests.map((r) => `${r.method} ${r.path}${r.query.size ? "?" + r.query.toString() : ""}`),
      [
        "POST /api/v1/events",
        "POST /api/v1/events",
        "GET /api/v1/events?key=approval%3A42&limit=5",
        "GET /api/v1/events",
        "GET /api/v1/workflows/w1/steps",
      ],
    );
    assert.deepEqual(stub.requests[0]!.body, { key: "approval:42", payload: { by: "ada" } });
    assert.deepEqual(stub.requests[1]!.body, { key: "ping" });
    assert.ok(stub.requests.every((r) => r.headers.authorization === "Bearer tenant"));
  } finally {
    await stub.close();
  }
});

test("a workflow with sleep and wait steps is sent as built", async () => {
  const stub = await startStub((_req, res) => json(res, 201, { workflow_id: "w1" }));
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant" });
    const body = wf("ship")
      .waitForEvent("approve", "approval:{{context.order}}", { timeout_secs: 60 })
      .sleep("nap", 1, { dependsOn: ["approve"] })
      .context({ order: 42 })
      .build();
    assert.deepEqual(await qf.workflows.create(body), { workflow_id: "w1" });
    assert.deepEqual(stub.requests[0]!.body, {
      name: "ship",
      steps: [
        { name: "approve", wait_for_event: { key: "approval:{{context.order}}" }, timeout_secs: 60 },
        { name: "nap", sleep_secs: 1, depends_on: ["approve"] },
      ],
      context: { order: 42 },
    });
  } finally {
    await stub.close();
  }
});
