import { test } from "node:test";
import assert from "node:assert/strict";
import { hostname } from "node:os";

import {
  ApiError,
  ConflictError,
  NonRetryableError,
  QueueFlow,
  SDK_VERSION,
  defaultWorkerId,
  type LogLineRequest,
  type WorkerErrorInfo,
} from "../dist/index.js";
import {
  LogBatcher,
  MAX_BUFFERED_LINES,
  ProgressTracker,
  checkProgress,
  fitMessage,
  sendable,
  type Clock,
} from "../dist/visibility.js";
import { FakeServer, quiet, stopAfter, wait } from "./fakeserver.js";
import { errorBody, fakeJob, json, startStub } from "./stub.js";

/** Time that moves only when told to; timers fire in order as it passes them. */
class FakeClock implements Clock {
  private time = 0;
  private seq = 0;
  private timers: Array<{ at: number; id: number; callback: () => void }> = [];

  now(): number {
    return this.time;
  }

  setTimeout(callback: () => void, ms: number): unknown {
    const id = ++this.seq;
    this.timers.push({ at: this.time + ms, id, callback });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.timers = this.timers.filter((t) => t.id !== handle);
  }

  /** Moves time on by `ms`, firing the timers due meanwhile (and letting their promises settle). */
  async advance(ms: number): Promise<void> {
    const end = this.time + ms;
    for (;;) {
      await settle();
      const due = this.timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at || a.id - b.id)[0];
      if (due === undefined) break;
      this.timers = this.timers.filter((t) => t !== due);
      this.time = Math.max(this.time, due.at);
      due.callback();
    }
    this.time = end;
    await settle();
  }
}

/** Lets pending promise callbacks (and the I/O-free work they start) run. */
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** A log sink that records each call (with the fake time it was made) and answers as told. */
function recordingSink(clock: FakeClock, answer: (n: number) => Promise<unknown> = () => Promise.resolve({})) {
  const calls: Array<{ at: number; lines: LogLineRequest[] }> = [];
  const errors: unknown[] = [];
  return {
    calls,
    errors,
    sink: {
      post: (lines: LogLineRequest[]) => {
        calls.push({ at: clock.now(), lines });
        return answer(calls.length);
      },
      onError: (err: unknown) => errors.push(err),
    },
  };
}

const bytes = (lines: LogLineRequest[]): number => lines.reduce((n, l) => n + Buffer.byteLength(l.message, "utf8"), 0);

// --- the log batcher, on a fake clock --------------------------------------------------------------

test("250 lines logged at once go in 3 calls (100, 100, 50), one a second", async () => {
  const clock = new FakeClock();
  const { calls, sink } = recordingSink(clock);
  const logs = new LogBatcher(sink, clock);
  for (let n = 1; n <= 250; n++) logs.append(`line ${n}`);
  assert.equal(calls.length, 0, "nothing is sent from the call itself");
  await clock.advance(5000);
  assert.deepEqual(
    calls.map((c) => c.lines.length),
    [100, 100, 50],
  );
  assert.deepEqual(
    calls.map((c) => c.at),
    [0, 1000, 2000],
  );
  assert.deepEqual(
    calls.flatMap((c) => c.lines.map((l) => l.message)),
    Array.from({ length: 250 }, (_, i) => `line ${i + 1}`),
  );
  assert.ok(calls[0]!.lines.every((l) => l.level === "info" && typeof l.ts === "string"));
  await logs.close();
  assert.equal(calls.length, 3);
});

test("250 lines and the handler ends at once: the end flush sends them in 3 calls, without waiting out the pace", async () => {
  const clock = new FakeClock();
  const { calls, sink } = recordingSink(clock);
  const logs = new LogBatcher(sink, clock);
  for (let n = 1; n <= 250; n++) logs.append(`line ${n}`, "debug");
  await logs.close();
  assert.deepEqual(
    calls.map((c) => c.lines.length),
    [100, 100, 50],
  );
  assert.deepEqual(
    calls.map((c) => c.at),
    [0, 0, 0],
  );
  assert.equal(logs.buffered, 0);
  logs.append("too late");
  await clock.advance(5000);
  assert.equal(calls.length, 3, "a line after the end is not sent");
});

test("logging at a steady rate for 3 s makes one call a second", async () => {
  const clock = new FakeClock();
  const { calls, sink } = recordingSink(clock);
  const logs = new LogBatcher(sink, clock);
  for (let t = 0; t < 3000; t += 50) {
    logs.append(`at ${t}`);
    await clock.advance(50);
  }
  await logs.close();
  // At 0 (the first line), 1000, 2000, 3000: the fourth is the end's flush or the last tick.
  assert.equal(calls.length, 4, `calls at ${calls.map((c) => c.at).join(", ")}`);
  for (let i = 1; i < calls.length; i++) assert.ok(calls[i]!.at - calls[i - 1]!.at >= 1000);
  assert.equal(
    calls.reduce((n, c) => n + c.lines.length, 0),
    60,
  );
});

test("a call waits for the one in flight, and the next comes a second after the last began", async () => {
  const clock = new FakeClock();
  let release: () => void = () => {};
  const { calls, sink } = recordingSink(clock, (n) => (n === 1 ? new Promise((r) => (release = () => r({})) ) : Promise.resolve({})));
  const logs = new LogBatcher(sink, clock);
  logs.append("one");
  await clock.advance(0);
  logs.append("two");
  await clock.advance(2500); // the first call is still unanswered
  assert.equal(calls.length, 1);
  release();
  await clock.advance(0);
  assert.equal(calls.length, 2, "sent once the first was answered (its second had passed)");
  assert.equal(calls[1]!.at, 2500);
});

test("calls hold at most 64 KiB of messages; a longer message is cut to 64 KiB at a character boundary", async () => {
  const clock = new FakeClock();
  const { calls, sink } = recordingSink(clock);
  const logs = new LogBatcher(sink, clock);
  const kib30 = "x".repeat(30 * 1024);
  for (let i = 0; i < 5; i++) logs.append(kib30);
  logs.append("a".repeat(70_000));
  logs.append("€".repeat(30_000)); // 3 bytes each
  logs.append("😀".repeat(20_000)); // 4 bytes each, two UTF-16 units
  await logs.close();
  assert.deepEqual(
    calls.map((c) => c.lines.length),
    [2, 2, 1, 1, 1, 1],
  );
  for (const call of calls) assert.ok(bytes(call.lines) <= 65_536, `a call of ${bytes(call.lines)} bytes`);
  const [cutAscii, cutEuro, cutEmoji] = calls.slice(3).map((c) => c.lines[0]!.message);
  assert.equal(cutAscii!.length, 65_536);
  assert.equal(cutEuro, "€".repeat(21_845)); // 65,535 bytes: the next character would not fit
  assert.equal(cutEmoji, "😀".repeat(16_384));
  assert.equal(fitMessage("short"), "short");
});

test("text the server cannot take (NUL, lone surrogates) is replaced, not sent as is", () => {
  assert.equal(sendable("a\u0000b"), "a\uFFFDb");
  assert.equal(sendable("x\uD800y"), "x\uFFFDy");
  assert.equal(sendable("x\uDC00"), "x\uFFFD");
  assert.equal(sendable("😀"), "😀");
});

test("past 10,000 buffered lines the newest are dropped and counted", async () => {
  const clock = new FakeClock();
  const { calls, errors, sink } = recordingSink(clock);
  const logs = new LogBatcher(sink, clock);
  for (let n = 0; n < MAX_BUFFERED_LINES + 50; n++) logs.append(`l${n}`);
  assert.equal(logs.buffered, MAX_BUFFERED_LINES);
  await logs.close();
  const sent = calls.flatMap((c) => c.lines.map((l) => l.message));
  assert.equal(calls.length, 100);
  assert.equal(sent[0], "l0");
  assert.equal(sent.at(-1), `l${MAX_BUFFERED_LINES - 1}`);
  assert.equal(errors.length, 1);
  assert.match(String(errors[0]), /50 log lines were not sent \(50 past the buffer's 10000 lines\)/);
});

test("a call without an answer is resent with the next; a refused one ends posting for the job", async () => {
  const clock = new FakeClock();
  const refused = new ConflictError(409, { error: "lease is no longer held", timestamp: "t" }, "", "POST /logs");
  const unavailable = new ApiError(503, undefined, "", "POST /logs");
  const outcomes = [() => Promise.reject(unavailable), () => Promise.resolve({}), () => Promise.reject(refused)];
  const { calls, errors, sink } = recordingSink(clock, (n) => outcomes[n - 1]!());
  const logs = new LogBatcher(sink, clock);
  logs.append("a");
  await clock.advance(0); // call 1: a 503
  logs.append("b");
  await clock.advance(1000); // call 2: a again, and b
  logs.append("c");
  await clock.advance(1000); // call 3: a 409
  logs.append("d");
  await clock.advance(5000);
  await logs.close();
  assert.deepEqual(
    calls.map((c) => c.lines.map((l) => l.message)),
    [["a"], ["a", "b"], ["c"]],
  );
  assert.deepEqual(errors.slice(0, 2), [unavailable, refused]);
  assert.match(String(errors[2]), /2 log lines were not sent \(2 after a logs call failed\)/);
  assert.equal(errors.length, 3);
});

test("the end's flush gives up at the first failure, whatever it was", async () => {
  const clock = new FakeClock();
  const { calls, errors, sink } = recordingSink(clock, () => Promise.reject(new ApiError(503, undefined, "", "POST /logs")));
  const logs = new LogBatcher(sink, clock);
  for (let n = 0; n < 250; n++) logs.append(`l${n}`);
  await logs.close();
  assert.equal(calls.length, 1, "no retry: the job's outcome is waiting");
  assert.match(String(errors.at(-1)), /250 log lines were not sent/);
});

test("log and progress arguments are checked: the SDK's own errors, nothing buffered or sent", async () => {
  const clock = new FakeClock();
  const { calls, sink } = recordingSink(clock);
  const logs = new LogBatcher(sink, clock);
  assert.throws(() => logs.append("x", "not a level"), RangeError);
  assert.throws(() => logs.append("x", ""), RangeError);
  assert.throws(() => logs.append("x", "a".repeat(17)), RangeError);
  assert.throws(() => logs.append(42 as unknown as string), TypeError);
  assert.equal(logs.buffered, 0);
  await logs.close();
  assert.equal(calls.length, 0);
  for (const bad of [-1, 100.5, Number.NaN, Number.POSITIVE_INFINITY, "50" as unknown as number]) {
    assert.throws(() => checkProgress(bad, undefined), RangeError, String(bad));
  }
  assert.throws(() => checkProgress(1, "m".repeat(1025)), RangeError);
  assert.deepEqual(checkProgress(0, "😀".repeat(1024)), { percent: 0, message: "😀".repeat(1024) });
  assert.deepEqual(checkProgress(42.5, undefined), { percent: 42.5 });
});

// --- progress, on a fake clock ---------------------------------------------------------------------

test("a new progress report asks for an early heartbeat, at most one a second", async () => {
  const clock = new FakeClock();
  const beats: number[] = [];
  let tracker!: ProgressTracker;
  const sent: unknown[] = [];
  tracker = new ProgressTracker(() => {
    beats.push(clock.now());
    const carried = tracker.take();
    sent.push(carried?.report);
    if (carried) tracker.settled(carried.version, true);
  }, clock);
  tracker.report(10, "a");
  await clock.advance(0);
  assert.deepEqual(beats, [0]);
  tracker.report(20);
  tracker.report(30, "c");
  await clock.advance(400);
  assert.deepEqual(beats, [0], "not again within the second");
  await clock.advance(600);
  assert.deepEqual(beats, [0, 1000]);
  assert.deepEqual(sent, [{ percent: 10, message: "a" }, { percent: 30, message: "c" }]);
  assert.equal(tracker.pending, false);
  await clock.advance(5000);
  assert.equal(beats.length, 2, "nothing new, no heartbeat");
  tracker.report(40);
  tracker.close();
  await clock.advance(5000);
  assert.equal(beats.length, 2, "closed: the loop sends what is pending itself");
  assert.equal(tracker.pending, true);
});

// --- through the worker loop -------------------------------------------------------------------------

test("lease calls carry worker_id, and worker (hostname, sdk, version, sorted tasks) until one succeeded", async () => {
  const fake = await new FakeServer().start();
  let leases = 0;
  fake.leaseAnswer = (_req, res) => {
    leases += 1;
    if (leases === 1) {
      errorBody(res, 503, "starting"); // not a success: the next call still introduces the worker
      return true;
    }
    if (leases === 3) fake.pending.push(fakeJob("a", "zeta"));
    return false;
  };
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run(
      "q",
      { zeta: () => stop.tick(), alpha: () => {}, "mid.task": () => {} },
      { waitSecs: 0, workerId: "box-1:42", signal: stop.signal, onError: quiet },
    );
    const bodies = fake.calls("lease").map((c) => c.body as Record<string, unknown>);
    assert.ok(bodies.length >= 3);
    const worker = { hostname: hostname(), sdk: "typescript", version: SDK_VERSION, tasks: ["alpha", "mid.task", "zeta"] };
    assert.deepEqual(bodies[0], { max_jobs: 1, lease_secs: 30, wait_secs: 0, worker_id: "box-1:42", worker });
    assert.deepEqual(bodies[1], { max_jobs: 1, lease_secs: 30, wait_secs: 0, worker_id: "box-1:42", worker });
    for (const body of bodies.slice(2)) assert.deepEqual(body, { max_jobs: 1, lease_secs: 30, wait_secs: 0, worker_id: "box-1:42" });
  } finally {
    await fake.close();
  }
});

test("the default worker id is <hostname>:<pid>; a bad one is refused before any call", async () => {
  assert.equal(defaultWorkerId(), `${hostname().replace(/[^!-~]/g, "-")}:${process.pid}`);
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "t")];
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run("q", { t: () => stop.tick() }, { waitSecs: 0, signal: stop.signal, onError: quiet });
    assert.equal((fake.calls("lease")[0]!.body as { worker_id: string }).worker_id, defaultWorkerId());
  } finally {
    await fake.close();
  }
  const qf = new QueueFlow({ baseUrl: "http://127.0.0.1:1", token: "t" });
  for (const bad of ["", "has space", "x".repeat(129), "naïve"]) {
    assert.throws(() => qf.worker.start("q", {}, { workerId: bad }), RangeError, bad);
  }
});

test("a server that refuses the worker fields (400) is leased from without them", async () => {
  const fake = await new FakeServer().start();
  fake.leaseAnswer = (req, res) => {
    if ((req.body as Record<string, unknown>).worker_id === undefined) return false;
    errorBody(res, 400, "unknown field `worker_id`");
    return true;
  };
  fake.pending = [fakeJob("a", "t")];
  const errors: WorkerErrorInfo[] = [];
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run("q", { t: () => stop.tick() }, {
      waitSecs: 0,
      signal: stop.signal,
      onError: (_e, info) => errors.push(info),
    });
    assert.equal(fake.calls("complete").length, 1);
    assert.deepEqual(errors.map((e) => e.phase), ["lease"]);
    assert.ok(fake.calls("lease").slice(1).every((c) => (c.body as Record<string, unknown>).worker_id === undefined));
  } finally {
    await fake.close();
  }
});

test("the buffered lines and the last progress are sent when the handler ends, before its outcome", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "chatty", { n: 1 }), fakeJob("b", "fails")];
  const stop = stopAfter(2);
  try {
    await fake.client().worker.run(
      "q",
      {
        chatty: (job, ctx) => {
          ctx.progress(40, "loading");
          for (let n = 1; n <= 250; n++) ctx.log(`line ${n}`);
          ctx.progress(100, "done");
          stop.tick();
          return job.payload;
        },
        fails: (_job, ctx) => {
          ctx.log("failing on purpose", "error");
          stop.tick();
          throw new Error("boom");
        },
      },
      { waitSecs: 0, signal: stop.signal, onError: quiet },
    );
    const logsOfA = fake.calls("logs", "a");
    assert.deepEqual(
      logsOfA.map((c) => (c.body as { lines: unknown[] }).lines.length),
      [100, 100, 50],
    );
    const lines = logsOfA.flatMap((c) => (c.body as { lines: LogLineRequest[] }).lines);
    assert.deepEqual(
      lines.map((l) => [l.message, l.level]),
      Array.from({ length: 250 }, (_, i) => [`line ${i + 1}`, "info"]),
    );
    assert.ok(logsOfA.every((c) => (c.body as { lease_token: string }).lease_token === "tok-a"));
    const beats = fake.calls("heartbeat", "a");
    assert.deepEqual(beats.at(-1)!.body, { lease_token: "tok-a", extend_secs: 30, progress: { percent: 100, message: "done" } });
    const order = fake.log.filter((e) => e.id === "a").map((e) => e.kind);
    assert.deepEqual(order.slice(-2), ["heartbeat", "complete"], `order ${order.join(",")}`);
    assert.ok(order.lastIndexOf("logs") < order.indexOf("complete"));

    assert.deepEqual(
      fake.calls("logs", "b").map((c) => c.body),
      [{ lease_token: "tok-b", lines: [{ message: "failing on purpose", level: "error", ts: (fake.calls("logs", "b")[0]!.body as { lines: LogLineRequest[] }).lines[0]!.ts }] }],
    );
    const orderB = fake.log.filter((e) => e.id === "b").map((e) => e.kind);
    assert.deepEqual(orderB, ["logs", "fail"], "no progress, no heartbeat; logs before the failure");
  } finally {
    await fake.close();
  }
});

test("a 409 (or no route) on the logs call changes nothing of the job's outcome", async () => {
  const fake = await new FakeServer().start();
  fake.logsAnswer = (id, _lines, res) =>
    id === "gone" ? errorBody(res, 404, "not found") : errorBody(res, 409, "lease is no longer held");
  fake.pending = [fakeJob("ok", "t", { v: 1 }), fakeJob("bad", "fails"), fakeJob("gone", "t", { v: 2 })];
  const errors: Array<[unknown, WorkerErrorInfo]> = [];
  const stop = stopAfter(3);
  try {
    await fake.client().worker.run(
      "q",
      {
        t: (job, ctx) => {
          ctx.log("hello");
          ctx.log("again");
          stop.tick();
          return job.payload;
        },
        fails: (_job, ctx) => {
          ctx.log("about to fail", "error");
          stop.tick();
          throw new NonRetryableError("invalid input");
        },
      },
      { waitSecs: 0, signal: stop.signal, onError: (e, info) => errors.push([e, info]) },
    );
    assert.deepEqual(
      fake.calls("complete").map((c) => [c.id, c.body]),
      [
        ["ok", { lease_token: "tok-ok", result: { v: 1 } }],
        ["gone", { lease_token: "tok-gone", result: { v: 2 } }],
      ],
    );
    assert.deepEqual(
      fake.calls("fail").map((c) => [c.id, c.body]),
      [["bad", { lease_token: "tok-bad", error: "invalid input", retryable: false }]],
    );
    assert.equal(fake.calls("logs", "ok").length, 1, "refused once: no more calls for the job");
    const conflict = errors.find(([e, info]) => info.jobId === "ok" && e instanceof ConflictError);
    assert.ok(conflict, "the 409 went to onError");
    assert.equal(conflict[1].phase, "logs");
    assert.ok(errors.every(([, info]) => info.phase === "logs"), "nothing but the logs calls failed");
  } finally {
    await fake.close();
  }
});

test("progress arrives on a heartbeat early, at most one a second, and the last one before the outcome", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "t")];
  const stop = stopAfter(1);
  let handlerStarted = 0;
  try {
    await fake.client().worker.run(
      "q",
      {
        t: async (_job, ctx) => {
          handlerStarted = Date.now();
          ctx.progress(10, "started");
          await wait(300);
          ctx.progress(20);
          ctx.progress(30, "thirty");
          await wait(1500);
          for (let p = 40; p <= 90; p += 10) ctx.progress(p);
          stop.tick();
        },
      },
      { leaseSecs: 60, waitSecs: 0, signal: stop.signal, onError: quiet }, // regular heartbeats every 30 s
    );
    const beats = fake.calls("heartbeat", "a");
    const carried = beats.map((b) => (b.body as { progress?: unknown }).progress);
    assert.deepEqual(carried[0], { percent: 10, message: "started" });
    assert.ok(beats[0]!.at - handlerStarted < 250, `sent early (${beats[0]!.at - handlerStarted} ms)`);
    assert.deepEqual(carried[1], { percent: 30, message: "thirty" }, "the latest, not each report");
    assert.ok(beats[1]!.at - beats[0]!.at >= 950, `a second apart (${beats[1]!.at - beats[0]!.at} ms)`);
    assert.deepEqual(carried.at(-1), { percent: 90 });
    assert.ok(beats.length <= 4, `${beats.length} heartbeats in about 2 s`);
    assert.ok(carried.every((p) => p !== undefined));
    assert.equal(fake.log.filter((e) => e.id === "a").at(-1)!.kind, "complete");
  } finally {
    await fake.close();
  }
});

test("a server that refuses progress on heartbeats (400) gets heartbeats without it", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "t")];
  let refused = 0;
  fake.heartbeatAnswer = (id, res) => {
    const last = fake.calls("heartbeat", id).at(-1)!.body as { progress?: unknown };
    if (last.progress !== undefined) {
      refused += 1;
      return errorBody(res, 400, "unknown field `progress`");
    }
    json(res, 200, { status: "running" });
  };
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run(
      "q",
      {
        t: async (_job, ctx) => {
          ctx.progress(10);
          await wait(1300);
          ctx.progress(50);
          await wait(600); // a regular heartbeat (every 500 ms) meanwhile
          stop.tick();
        },
      },
      { leaseSecs: 1, waitSecs: 0, signal: stop.signal, onError: quiet },
    );
    assert.equal(refused, 1, "refused once, then never sent again");
    assert.equal(fake.calls("complete").length, 1);
    assert.ok(fake.calls("heartbeat", "a").length >= 3);
  } finally {
    await fake.close();
  }
});

test("a handler that logs at a steady rate for 3 s makes about one logs call a second", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "t")];
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run(
      "q",
      {
        t: async (_job, ctx) => {
          for (let i = 0; i < 60; i++) {
            ctx.log(`tick ${i}`);
            await wait(50);
          }
          stop.tick();
        },
      },
      { waitSecs: 0, signal: stop.signal, onError: quiet },
    );
    const calls = fake.calls("logs", "a");
    // One at once, then one a second for about 3 s, then the end's flush: 4, give or take the timing.
    assert.ok(calls.length >= 3 && calls.length <= 5, `${calls.length} calls`);
    for (let i = 1; i < calls.length - 1; i++) {
      assert.ok(calls[i]!.at - calls[i - 1]!.at >= 950, `calls ${i - 1} and ${i} ${calls[i]!.at - calls[i - 1]!.at} ms apart`);
    }
    const sent = calls.flatMap((c) => (c.body as { lines: LogLineRequest[] }).lines.map((l) => l.message));
    assert.deepEqual(sent, Array.from({ length: 60 }, (_, i) => `tick ${i}`));
  } finally {
    await fake.close();
  }
});

// --- the tenant's raw calls -------------------------------------------------------------------------

test("raw calls: a job's logs (after, limit, every page), its attempts, the workers; a heartbeat with progress", async () => {
  const line = (seq: number) => ({ seq, attempt: 1, ts: "2026-01-01T00:00:00Z", level: "info", message: `m${seq}` });
  const stub = await startStub((req, res) => {
    if (req.path === "/api/v1/jobs/j1/logs") {
      const after = Number(req.query.get("after") ?? 0);
      const limit = Number(req.query.get("limit") ?? 100);
      const lines = [1, 2, 3, 4, 5].filter((s) => s > after).slice(0, limit).map(line);
      return json(res, 200, { lines, last_seq: 5, dropped: 0, has_more: (lines.at(-1)?.seq ?? 5) < 5 });
    }
    if (req.path === "/api/v1/jobs/j1/attempts") {
      return json(res, 200, {
        attempts: [
          { attempt: 1, outcome: "retry", worker_id: "w:1", started_at: "s", ended_at: "e", duration_secs: 1.5, error_message: "boom" },
          { attempt: 2, outcome: "running", started_at: "s" },
        ],
      });
    }
    if (req.path === "/api/v1/workers") {
      return json(res, 200, {
        workers: [{ worker_id: "w:1", queues: ["q"], in_flight: 1, first_seen_at: "f", last_seen_at: "l", live: true }],
      });
    }
    if (req.path === "/api/v1/jobs/j1/heartbeat") return json(res, 200, { status: "running" });
    if (req.path === "/api/v1/jobs/j1/logs") return json(res, 200, {});
    return errorBody(res, 404, "no route");
  });
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant", workerToken: "worker" });
    const page = await qf.jobs.logs("j1", { after: 1, limit: 2 });
    assert.deepEqual(page.lines.map((l) => l.seq), [2, 3]);
    assert.equal(page.has_more, true);
    assert.equal(stub.requests.at(-1)!.query.toString(), "after=1&limit=2");
    const all = [];
    for await (const l of qf.jobs.iterateLogs("j1", { limit: 2 })) all.push(l.message);
    assert.deepEqual(all, ["m1", "m2", "m3", "m4", "m5"]);
    const { attempts } = await qf.jobs.attempts("j1");
    assert.deepEqual(attempts.map((a) => [a.attempt, a.outcome, a.worker_id]), [[1, "retry", "w:1"], [2, "running", undefined]]);
    const { workers } = await qf.system.workers();
    assert.equal(workers[0]!.info, undefined, "an entry without info still reads");
    assert.equal(workers[0]!.live, true);
    assert.ok(stub.requests.filter((r) => r.path !== "/api/v1/jobs/j1/heartbeat").every((r) => r.headers.authorization === "Bearer tenant"));

    const answer = await qf.worker.heartbeat({ jobId: "j1", leaseToken: "tok" }, 30, { progress: { percent: 5, message: "m" } });
    assert.equal(answer.status, "running");
    const beat = stub.requests.at(-1)!;
    assert.deepEqual(beat.body, { lease_token: "tok", extend_secs: 30, progress: { percent: 5, message: "m" } });
    assert.equal(beat.headers.authorization, "Bearer worker");
  } finally {
    await stub.close();
  }
});

test("raw call: posting log lines with the lease token, on the worker token", async () => {
  const stub = await startStub((_req, res) => json(res, 200, { stored: 2, dropped: 0, last_seq: 7 }));
  try {
    const qf = new QueueFlow({ baseUrl: stub.url, token: "tenant", workerToken: "worker" });
    const answer = await qf.worker.postLogs({ jobId: "j 1", leaseToken: "tok" }, [
      { message: "one" },
      { message: "two", level: "warn", ts: "2026-01-01T00:00:00Z" },
    ]);
    assert.deepEqual(answer, { stored: 2, dropped: 0, last_seq: 7 });
    const req = stub.requests[0]!;
    assert.equal(req.method, "POST");
    assert.equal(req.path, "/api/v1/jobs/j%201/logs");
    assert.equal(req.headers.authorization, "Bearer worker");
    assert.deepEqual(req.body, {
      lease_token: "tok",
      lines: [{ message: "one" }, { message: "two", level: "warn", ts: "2026-01-01T00:00:00Z" }],
    });
  } finally {
    await stub.close();
  }
});
