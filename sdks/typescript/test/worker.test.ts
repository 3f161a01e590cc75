import { test } from "node:test";
import assert from "node:assert/strict";

import {
  ForbiddenError,
  NonRetryableError,
  QueueFlow,
  UnauthorizedError,
  type WorkerErrorInfo,
} from "../dist/index.js";
import { errorBody, fakeJob, json, startStub, type Recorded, type Stub } from "./stub.js";
import type { ServerResponse } from "node:http";

/** A fake protocol server: hands out `jobs` on lease, records every call, scriptable per route. */
class FakeServer {
  stub!: Stub;
  pending: Array<Record<string, unknown>> = [];
  log: Array<{ at: number; kind: string; id?: string; body?: unknown }> = [];
  leaseAnswer?: (req: Recorded, res: ServerResponse) => boolean;
  heartbeatAnswer: (id: string, res: ServerResponse) => void = (_id, res) => json(res, 200, { status: "running" });
  reportAnswer: (kind: string, id: string, res: ServerResponse) => void = (_k, _id, res) => json(res, 204);
  batchPerLease = 100;

  async start(): Promise<this> {
    this.stub = await startStub(async (req, res) => {
      const now = Date.now();
      const m = /^\/api\/v1\/(?:queues\/[^/]+\/(lease)|jobs\/([^/]+)\/(heartbeat|complete|fail))$/.exec(req.path);
      if (!m) return errorBody(res, 404, "no route");
      if (m[1] === "lease") {
        this.log.push({ at: now, kind: "lease", body: req.body });
        if (this.leaseAnswer?.(req, res)) return;
        const max = Math.min((req.body as { max_jobs?: number }).max_jobs ?? 1, this.batchPerLease);
        const jobs = this.pending.splice(0, max).map((job) => ({ job, lease_token: `tok-${String(job.id)}` }));
        if (jobs.length === 0) await new Promise((r) => setTimeout(r, 30)); // a short long-poll
        return json(res, 200, { jobs });
      }
      const id = m[2]!;
      const kind = m[3]!;
      this.log.push({ at: now, kind, id, body: req.body });
      if (kind === "heartbeat") return this.heartbeatAnswer(id, res);
      return this.reportAnswer(kind, id, res);
    });
    return this;
  }

  client(): QueueFlow {
    return new QueueFlow({ baseUrl: this.stub.url, token: "tenant", workerToken: "worker" });
  }

  calls(kind: string, id?: string): Array<{ at: number; kind: string; id?: string; body?: unknown }> {
    return this.log.filter((e) => e.kind === kind && (id === undefined || e.id === id));
  }

  close(): Promise<void> {
    return this.stub.close();
  }
}

const quiet = (): void => {};

function stopAfter(n: number): { signal: AbortSignal; tick: () => void } {
  const controller = new AbortController();
  let seen = 0;
  return {
    signal: controller.signal,
    tick: () => {
      seen += 1;
      if (seen >= n) controller.abort();
    },
  };
}

const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test("a leased batch runs one at a time and every held job is heartbeated, waiting ones included", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "slow", { n: 1 }), fakeJob("b", "slow", { n: 2 }), fakeJob("c", "slow", { n: 3 })];
  const started: Record<string, number> = {};
  const stop = stopAfter(3);
  try {
    await fake.client().worker.run(
      "q",
      {
        slow: async (job) => {
          started[job.id] = Date.now();
          await wait(700);
          stop.tick();
          return job.payload;
        },
      },
      { leaseSecs: 1, waitSecs: 0, concurrency: 1, batchSize: 3, signal: stop.signal, onError: quiet },
    );
    assert.deepEqual(fake.calls("lease")[0]!.body, { max_jobs: 3, lease_secs: 1, wait_secs: 0 });
    // c waits ~1.4 s for its turn with a 1 s lease: it must have been heartbeated before it started.
    const early = fake.calls("heartbeat", "c").filter((h) => h.at < started.c!);
    assert.ok(early.length >= 2, `c was heartbeated ${early.length} times while waiting`);
    assert.deepEqual(early[0]!.body, { lease_token: "tok-c", extend_secs: 1 });
    assert.deepEqual(
      fake.calls("complete").map((c) => [c.id, c.body]),
      [
        ["a", { lease_token: "tok-a", result: { n: 1 } }],
        ["b", { lease_token: "tok-b", result: { n: 2 } }],
        ["c", { lease_token: "tok-c", result: { n: 3 } }],
      ],
    );
    assert.ok(started.b! >= started.a! + 650 && started.c! >= started.b! + 650, "one at a time");
  } finally {
    await fake.close();
  }
});

test("outcomes: result, undefined, retryable and permanent failures, unknown task", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [
    fakeJob("obj", "ret", { v: 1 }),
    fakeJob("undef", "none"),
    fakeJob("boom", "throws"),
    fakeJob("perm", "permanent"),
    fakeJob("tag", "tagged"),
    fakeJob("num", "number"),
    fakeJob("lost", "nobody-handles-this"),
  ];
  const stop = stopAfter(6);
  try {
    await fake.client().worker.run(
      "q",
      {
        ret: async (job) => {
          stop.tick();
          return { got: job.payload };
        },
        none: async () => {
          stop.tick();
        },
        throws: async () => {
          stop.tick();
          throw new Error("boom");
        },
        permanent: async () => {
          stop.tick();
          throw new NonRetryableError("invalid input");
        },
        tagged: async () => {
          stop.tick();
          throw Object.assign(new Error("tagged"), { retryable: false });
        },
        number: () => {
          stop.tick();
          return 42;
        },
      },
      { leaseSecs: 30, waitSecs: 0, concurrency: 1, batchSize: 1, signal: stop.signal, onError: quiet },
    );
    const completes = Object.fromEntries(fake.calls("complete").map((c) => [c.id, (c.body as { result: unknown }).result]));
    assert.deepEqual(completes, { obj: { got: { v: 1 } }, undef: {}, num: { value: 42 } });
    const fails = Object.fromEntries(fake.calls("fail").map((c) => [c.id, c.body]));
    assert.deepEqual(fails.boom, { lease_token: "tok-boom", error: "boom", retryable: true });
    assert.deepEqual(fails.perm, { lease_token: "tok-perm", error: "invalid input", retryable: false });
    assert.deepEqual(fails.tag, { lease_token: "tok-tag", error: "tagged", retryable: false });
    // The loop stopped after the 6th handler; the job without a handler may or may not have been leased.
    if (fails.lost) {
      assert.deepEqual(fails.lost, {
        lease_token: "tok-lost",
        error: "no worker handler for task 'nobody-handles-this'",
        retryable: false,
      });
    }
  } finally {
    await fake.close();
  }
});

for (const [label, answer] of [
  ["a non-running heartbeat status", (res: ServerResponse) => json(res, 200, { status: "cancelled" })],
  ["a 409 heartbeat", (res: ServerResponse) => errorBody(res, 409, "lease is no longer held")],
] as const) {
  test(`${label} aborts ctx.signal and nothing is reported`, async () => {
    const fake = await new FakeServer().start();
    fake.pending = [fakeJob("x", "long")];
    fake.heartbeatAnswer = (_id, res) => answer(res);
    const stop = stopAfter(1);
    let observed: unknown;
    try {
      await fake.client().worker.run(
        "q",
        {
          long: async (_job, ctx) => {
            await new Promise<void>((resolve) => {
              const timer = setTimeout(resolve, 10_000);
              ctx.signal.addEventListener("abort", () => {
                clearTimeout(timer);
                resolve();
              });
            });
            observed = ctx.signal.reason;
            stop.tick();
            ctx.signal.throwIfAborted();
          },
        },
        { leaseSecs: 1, waitSecs: 0, signal: stop.signal, onError: quiet },
      );
      assert.ok(observed instanceof Error, "the handler saw the abort");
      assert.equal(fake.calls("complete").length, 0);
      assert.equal(fake.calls("fail").length, 0);
      assert.equal(fake.calls("heartbeat", "x").length, 1, "no heartbeats after the server took the job back");
    } finally {
      await fake.close();
    }
  });
}

for (const [status, cls] of [
  [401, UnauthorizedError],
  [403, ForbiddenError],
] as const) {
  test(`a ${status} from lease rejects run() instead of spinning`, async () => {
    const fake = await new FakeServer().start();
    fake.leaseAnswer = (_req, res) => {
      errorBody(res, status, "nope");
      return true;
    };
    try {
      await assert.rejects(fake.client().worker.run("q", {}, { waitSecs: 0, onError: quiet }), (err: unknown) => {
        assert.ok(err instanceof cls);
        assert.equal(err.status, status);
        assert.equal(err.body?.error, "nope");
        return true;
      });
      assert.equal(fake.calls("lease").length, 1);
    } finally {
      await fake.close();
    }
  });
}

test("transport errors and 5xx on lease back off and the loop recovers", async () => {
  const fake = await new FakeServer().start();
  let leases = 0;
  fake.leaseAnswer = (_req, res) => {
    leases += 1;
    if (leases === 1) {
      res.socket?.destroy(); // no answer at all
      return true;
    }
    if (leases <= 3) {
      errorBody(res, 503, "down");
      return true;
    }
    if (leases === 4) fake.pending.push(fakeJob("late", "t"));
    return false;
  };
  const errors: WorkerErrorInfo[] = [];
  const stop = stopAfter(1);
  const started = Date.now();
  try {
    await fake.client().worker.run(
      "q",
      { t: () => stop.tick() },
      { waitSecs: 0, signal: stop.signal, onError: (_e, info) => errors.push(info) },
    );
    assert.equal(fake.calls("complete", "late").length, 1);
    assert.equal(errors.filter((e) => e.phase === "lease").length, 3);
    const gaps = fake.calls("lease").slice(0, 4).map((c, i, all) => (i === 0 ? 0 : c.at - all[i - 1]!.at));
    assert.ok(gaps.slice(1).every((g) => g >= 90), `backed off between attempts: ${gaps.join(",")}`);
    assert.ok(Date.now() - started < 5000);
  } finally {
    await fake.close();
  }
});

test("a rejected report is logged, never turned into a failure report", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "t")];
  fake.reportAnswer = (_kind, _id, res) => errorBody(res, 409, "lease is no longer held");
  const errors: Array<[unknown, WorkerErrorInfo]> = [];
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run("q", { t: () => stop.tick() }, {
      waitSecs: 0,
      signal: stop.signal,
      onError: (e, info) => errors.push([e, info]),
    });
    assert.equal(fake.calls("complete").length, 1);
    assert.equal(fake.calls("fail").length, 0);
    assert.equal(errors.length, 1);
    assert.equal(errors[0]![1].phase, "report");
    assert.equal(errors[0]![1].jobId, "a");
  } finally {
    await fake.close();
  }
});

test("a report that got no answer is resent (the same report), then succeeds", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "t")];
  let tries = 0;
  fake.reportAnswer = (_kind, _id, res) => {
    tries += 1;
    if (tries === 1) errorBody(res, 503, "restarting");
    else json(res, 204);
  };
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run("q", { t: () => { stop.tick(); throw new Error("boom"); } }, {
      waitSecs: 0,
      signal: stop.signal,
      onError: quiet,
    });
    assert.equal(fake.calls("fail").length, 2);
    assert.equal(fake.calls("complete").length, 0);
  } finally {
    await fake.close();
  }
});

test("concurrency runs handlers at once; stop() drains running handlers", async () => {
  const fake = await new FakeServer().start();
  fake.pending = [fakeJob("a", "t"), fakeJob("b", "t")];
  let running = 0;
  let peak = 0;
  let finished = 0;
  try {
    const handle = fake.client().worker.start(
      "q",
      {
        t: async () => {
          running += 1;
          peak = Math.max(peak, running);
          await wait(300);
          running -= 1;
          finished += 1;
        },
      },
      { waitSecs: 0, concurrency: 2, onError: quiet },
    );
    await wait(100);
    await handle.stop();
    assert.equal(peak, 2);
    assert.equal(finished, 2, "stop() waited for both handlers");
    assert.equal(fake.calls("complete").length, 2);
    assert.deepEqual(fake.calls("lease")[0]!.body, { max_jobs: 2, lease_secs: 30, wait_secs: 0 });
  } finally {
    await fake.close();
  }
});

test("invalid options are rejected", () => {
  const qf = new QueueFlow({ baseUrl: "http://127.0.0.1:1", token: "t" });
  assert.throws(() => qf.worker.start("q", {}, { leaseSecs: 0 }), RangeError);
  assert.throws(() => qf.worker.start("q", {}, { batchSize: 101 }), RangeError);
  assert.throws(() => qf.worker.start("q", {}, { concurrency: 1.5 }), RangeError);
});
