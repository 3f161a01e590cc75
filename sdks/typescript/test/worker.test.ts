import { test } from "node:test";
import assert from "node:assert/strict";
import type { ServerResponse } from "node:http";

import {
  ConflictError,
  ForbiddenError,
  NotFoundError,
  NonRetryableError,
  QueueFlow,
  UnauthorizedError,
  type WorkerErrorInfo,
} from "../dist/index.js";
import { FakeServer, quiet, stopAfter, wait, type BatchItem } from "./fakeserver.js";
import { errorBody, fakeJob, json } from "./stub.js";

/** A lease body without the worker's id and description (see visibility.test.ts). */
function leaseParams(body: unknown): unknown {
  const { worker_id: _id, worker: _info, ...params } = body as Record<string, unknown>;
  return params;
}

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
    assert.deepEqual(leaseParams(fake.calls("lease")[0]!.body), { max_jobs: 3, lease_secs: 1, wait_secs: 0 });
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
    assert.deepEqual(leaseParams(fake.calls("lease")[0]!.body), { max_jobs: 2, lease_secs: 30, wait_secs: 0 });
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

// --- batch acknowledgement ----------------------------------------------------------------------

/** A handler that counts toward `stop` and returns the job's payload. */
const echoing =
  (stop: { tick: () => void }) =>
  (job: { payload: unknown }): unknown => {
    stop.tick();
    return job.payload;
  };

const completed = (items: BatchItem[]): { results: unknown[] } => ({
  results: items.map((i) => ({ id: i.id, outcome: "completed", status: 204 })),
});

test("successes go through the batch route when /openapi.json offers it; failures stay one call per job", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [1, 2, 3, 4, 5, 6].map((n) => fakeJob(`j${n}`, "ok", { n }));
  fake.pending.push(fakeJob("bad", "fails"));
  const stop = stopAfter(7);
  try {
    await fake.client().worker.run(
      "q",
      {
        ok: echoing(stop),
        fails: () => {
          stop.tick();
          throw new NonRetryableError("invalid input");
        },
      },
      { waitSecs: 0, concurrency: 4, batchSize: 7, signal: stop.signal, onError: quiet },
    );
    assert.equal(fake.calls("openapi").length, 1, "asked once");
    assert.ok(
      fake.log.findIndex((e) => e.kind === "openapi") < fake.log.findIndex((e) => e.kind === "complete_many"),
      "asked before the first acknowledgement",
    );
    assert.equal(fake.calls("complete").length, 0, "no per-job acknowledgement");
    const items = fake.calls("complete_many").flatMap((c) => (c.body as { jobs: BatchItem[] }).jobs);
    items.sort((x, y) => x.id.localeCompare(y.id));
    assert.deepEqual(
      items,
      [1, 2, 3, 4, 5, 6].map((n) => ({ id: `j${n}`, lease_token: `tok-j${n}`, result: { n } })),
    );
    assert.ok(fake.batches().some((b) => b.length > 1), `several per call: ${JSON.stringify(fake.batches())}`);
    assert.deepEqual(
      fake.calls("fail").map((c) => [c.id, c.body]),
      [["bad", { lease_token: "tok-bad", error: "invalid input", retryable: false }]],
    );
  } finally {
    await fake.close();
  }
});

test("one batch call at a time: an idle worker acknowledges at once, the next batch builds meanwhile", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [fakeJob("first", "now"), ...[1, 2, 3, 4, 5].map((n) => fakeJob(`later${n}`, "later"))];
  let inFlight = 0;
  let peak = 0;
  fake.batchAnswer = async (items, res) => {
    inFlight += 1;
    peak = Math.max(peak, inFlight);
    await wait(300);
    inFlight -= 1;
    json(res, 200, completed(items));
  };
  let firstDone = 0;
  const stop = stopAfter(6);
  try {
    await fake.client().worker.run(
      "q",
      {
        now: () => {
          firstDone = Date.now();
          stop.tick();
        },
        later: async () => {
          await wait(50);
          stop.tick();
        },
      },
      { waitSecs: 0, concurrency: 6, batchSize: 6, signal: stop.signal, onError: quiet },
    );
    assert.equal(peak, 1, "never two batch calls at once");
    const batches = fake.batches();
    assert.deepEqual(batches[0], ["first"]);
    assert.deepEqual(batches.slice(1).flat().sort(), ["later1", "later2", "later3", "later4", "later5"]);
    assert.equal(batches.length, 2, `the rest waited for the first call: ${JSON.stringify(batches)}`);
    const sentAt = fake.calls("complete_many")[0]!.at;
    assert.ok(sentAt - firstDone < 250, `the first success was sent at once (${sentAt - firstDone} ms)`);
  } finally {
    await fake.close();
  }
});

test("handlers that finish in the same turn of the event loop share one batch call", async () => {
  // Two leases of six: the first lease's successes wait for the /openapi.json probe anyway; the
  // second's show whether the flush waits for the handlers finishing beside the first of them.
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].map((n) => fakeJob(`j${n}`, "ok", { n }));
  const stop = stopAfter(12);
  try {
    await fake.client().worker.run(
      "q",
      { ok: echoing(stop) },
      { waitSecs: 0, concurrency: 6, batchSize: 6, signal: stop.signal, onError: quiet },
    );
    const batches = fake.batches();
    assert.deepEqual(batches.map((b) => b.length), [6, 6], `one call per lease: ${JSON.stringify(batches)}`);
  } finally {
    await fake.close();
  }
});

test("more than 100 waiting successes go out 100 at a time", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = Array.from({ length: 130 }, (_, i) => fakeJob(`m${i}`, "t"));
  fake.batchAnswer = async (items, res) => {
    await wait(200);
    json(res, 200, completed(items));
  };
  const stop = stopAfter(130);
  try {
    await fake.client().worker.run(
      "q",
      { t: () => stop.tick() },
      { waitSecs: 0, concurrency: 130, batchSize: 100, signal: stop.signal, onError: quiet },
    );
    const batches = fake.batches();
    assert.ok(batches.every((b) => b.length >= 1 && b.length <= 100), `sizes ${batches.map((b) => b.length).join(",")}`);
    assert.ok(batches.some((b) => b.length === 100), `sizes ${batches.map((b) => b.length).join(",")}`);
    const all = batches.flat();
    assert.equal(all.length, 130);
    assert.equal(new Set(all).size, 130, "each acknowledged once");
    assert.equal(fake.calls("complete").length, 0);
  } finally {
    await fake.close();
  }
});

test("a batch item's 409 or 404 is handled as the per-job answer: logged and dropped", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [fakeJob("ok", "t"), fakeJob("stale", "t"), fakeJob("gone", "t")];
  fake.batchAnswer = (items, res) =>
    json(res, 200, {
      results: items.map((i) =>
        i.id === "stale"
          ? { id: i.id, outcome: "conflict", status: 409, error: "lease is no longer held" }
          : i.id === "gone"
            ? { id: i.id, outcome: "not_found", status: 404, error: "job not found" }
            : { id: i.id, outcome: "completed", status: 204 },
      ),
    });
  const errors: Array<[unknown, WorkerErrorInfo]> = [];
  const stop = stopAfter(3);
  try {
    await fake.client().worker.run("q", { t: () => stop.tick() }, {
      waitSecs: 0,
      concurrency: 3,
      batchSize: 3,
      signal: stop.signal,
      onError: (e, info) => errors.push([e, info]),
    });
    assert.deepEqual(fake.batches().flat().sort(), ["gone", "ok", "stale"], "each sent once, never resent");
    assert.equal(fake.calls("complete").length, 0);
    assert.equal(fake.calls("fail").length, 0, "never turned into a failure report");
    const byJob = new Map(errors.map(([e, info]) => [info.jobId, [e, info] as const]));
    assert.equal(errors.length, 2);
    const [conflict, conflictInfo] = byJob.get("stale")!;
    assert.ok(conflict instanceof ConflictError);
    assert.equal(conflict.status, 409);
    assert.match(conflict.message, /lease is no longer held/);
    assert.equal(conflictInfo.phase, "report");
    const [missing, missingInfo] = byJob.get("gone")!;
    assert.ok(missing instanceof NotFoundError);
    assert.equal(missing.status, 404);
    assert.equal(missingInfo.phase, "report");
  } finally {
    await fake.close();
  }
});

for (const status of [404, 405]) {
  test(`a ${status} from the batch route itself: those items are resent per job, and so is everything after`, async () => {
    const fake = (await new FakeServer().start()).offerBatch();
    fake.pending = ["a", "b", "c", "d"].map((id) => fakeJob(id, "t", { id }));
    fake.batchAnswer = (_items, res) => errorBody(res, status, "no such route");
    const stop = stopAfter(4);
    try {
      await fake.client().worker.run("q", { t: (job) => { stop.tick(); return job.payload; } }, {
        waitSecs: 0,
        concurrency: 1,
        batchSize: 1, // one job at a time: b is leased once a's acknowledgement is answered
        signal: stop.signal,
        onError: quiet,
      });
      assert.equal(fake.calls("complete_many").length, 1, "the batch route is not tried again");
      assert.deepEqual(fake.batches()[0], ["a"]);
      assert.deepEqual(
        fake.calls("complete").map((c) => [c.id, c.body]),
        ["a", "b", "c", "d"].map((id) => [id, { lease_token: `tok-${id}`, result: { id } }]),
      );
      assert.equal(fake.calls("openapi").length, 1);
    } finally {
      await fake.close();
    }
  });
}

test("a batch call without an answer or with a 5xx is retried with back-off; the job stays heartbeated until answered", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [fakeJob("x", "t", { v: 1 })];
  let calls = 0;
  let answeredAt = 0;
  fake.batchAnswer = async (items, res) => {
    calls += 1;
    if (calls === 1) {
      await wait(700);
      errorBody(res, 503, "restarting");
    } else if (calls === 2) {
      res.socket?.destroy(); // no answer at all
    } else {
      answeredAt = Date.now();
      json(res, 200, completed(items));
    }
  };
  const errors: WorkerErrorInfo[] = [];
  let handlerDone = 0;
  const stop = stopAfter(1);
  try {
    await fake.client().worker.run(
      "q",
      {
        t: (job) => {
          handlerDone = Date.now();
          stop.tick();
          return job.payload;
        },
      },
      { leaseSecs: 1, waitSecs: 0, signal: stop.signal, onError: (_e, info) => errors.push(info) },
    );
    const batches = fake.calls("complete_many");
    assert.equal(batches.length, 3);
    for (const b of batches) assert.deepEqual(b.body, { jobs: [{ id: "x", lease_token: "tok-x", result: { v: 1 } }] });
    assert.ok(batches[2]!.at - batches[1]!.at >= 90, "backed off before resending");
    assert.equal(fake.calls("complete").length, 0);
    assert.deepEqual(errors, [], "retried quietly, as a per-job report is");
    const meanwhile = fake.calls("heartbeat", "x").filter((h) => h.at > handlerDone && h.at < answeredAt);
    assert.ok(meanwhile.length >= 1, "heartbeated while its acknowledgement was unanswered");
    assert.ok(answeredAt > 0 && answeredAt <= Date.now());
  } finally {
    await fake.close();
  }
});

for (const [label, answer] of [
  ["no answer", (res: ServerResponse) => res.socket?.destroy()],
  ["a 503", (res: ServerResponse) => errorBody(res, 503, "starting")],
] as const) {
  test(`${label} to /openapi.json: that flush goes per job and the next one asks again`, async () => {
    const fake = await new FakeServer().start();
    let probes = 0;
    fake.openapiAnswer = (res) => {
      probes += 1;
      if (probes === 1) answer(res);
      else json(res, 200, { paths: { "/api/v1/jobs/complete": { post: {} } } });
    };
    fake.pending = [fakeJob("a", "t"), fakeJob("b", "t")];
    const stop = stopAfter(2);
    try {
      await fake.client().worker.run("q", { t: () => stop.tick() }, {
        waitSecs: 0,
        concurrency: 1,
        batchSize: 1, // b is leased once a's acknowledgement is answered
        signal: stop.signal,
        onError: quiet,
      });
      assert.equal(fake.calls("openapi").length, 2);
      assert.deepEqual(fake.calls("complete").map((c) => c.id), ["a"]);
      assert.deepEqual(fake.batches(), [["b"]]);
    } finally {
      await fake.close();
    }
  });
}

for (const [label, answer] of [
  ["a 404", (res: ServerResponse) => errorBody(res, 404, "no route")],
  ["a document without the route", (res: ServerResponse) => json(res, 200, { paths: { "/api/v1/jobs": { post: {} } } })],
] as const) {
  test(`${label} from /openapi.json settles it: one call per job, asked once`, async () => {
    const fake = await new FakeServer().start();
    fake.openapiAnswer = answer;
    fake.pending = [fakeJob("a", "t"), fakeJob("b", "t"), fakeJob("c", "t")];
    const stop = stopAfter(3);
    try {
      await fake.client().worker.run("q", { t: () => stop.tick() }, {
        waitSecs: 0,
        concurrency: 1,
        batchSize: 3,
        signal: stop.signal,
        onError: quiet,
      });
      assert.equal(fake.calls("openapi").length, 1);
      assert.deepEqual(fake.calls("complete").map((c) => c.id), ["a", "b", "c"]);
      assert.equal(fake.calls("complete_many").length, 0);
    } finally {
      await fake.close();
    }
  });
}

test("a graceful stop returns only once the buffered acknowledgements are answered", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [fakeJob("a", "t"), fakeJob("b", "t"), fakeJob("c", "t")];
  let lastAnswer = 0;
  fake.batchAnswer = async (items, res) => {
    await wait(300);
    lastAnswer = Date.now();
    json(res, 200, completed(items));
  };
  let ran = 0;
  try {
    const handle = fake.client().worker.start("q", { t: () => void (ran += 1) }, {
      waitSecs: 0,
      concurrency: 3,
      batchSize: 3,
      onError: quiet,
    });
    while (ran < 3) await wait(10);
    await handle.stop();
    const stoppedAt = Date.now();
    assert.deepEqual(fake.batches().flat().sort(), ["a", "b", "c"]);
    assert.ok(lastAnswer > 0 && stoppedAt >= lastAnswer, "stop() waited for the last answer");
  } finally {
    await fake.close();
  }
});

test("a job taken back while its acknowledgement waits in the buffer is not acknowledged", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [fakeJob("a", "now"), fakeJob("b", "soon")];
  fake.heartbeatAnswer = (id, res) =>
    id === "b" ? errorBody(res, 409, "lease is no longer held") : json(res, 200, { status: "running" });
  fake.batchAnswer = async (items, res) => {
    await wait(1500); // b's heartbeat (every 500 ms) learns meanwhile that its lease is gone
    json(res, 200, completed(items));
  };
  const errors: WorkerErrorInfo[] = [];
  const stop = stopAfter(2);
  try {
    await fake.client().worker.run(
      "q",
      {
        now: () => stop.tick(),
        soon: async () => {
          await wait(100);
          stop.tick();
        },
      },
      { leaseSecs: 1, waitSecs: 0, concurrency: 2, batchSize: 2, signal: stop.signal, onError: (_e, info) => errors.push(info) },
    );
    assert.deepEqual(fake.batches(), [["a"]]);
    assert.equal(fake.calls("complete").length, 0);
    assert.equal(fake.calls("fail").length, 0);
    assert.deepEqual(errors.filter((e) => e.jobId === "b"), [], "nothing reported for b");
  } finally {
    await fake.close();
  }
});

test("a handler slot frees when the handler returns, while its job stays held until the acknowledgement is answered", async () => {
  const fake = (await new FakeServer().start()).offerBatch();
  fake.pending = [fakeJob("a", "t"), fakeJob("b", "t"), fakeJob("c", "t")];
  let firstAnswer = 0;
  fake.batchAnswer = async (items, res) => {
    await wait(700);
    if (firstAnswer === 0) firstAnswer = Date.now();
    json(res, 200, completed(items));
  };
  const started: Record<string, number> = {};
  const stop = stopAfter(3);
  try {
    await fake.client().worker.run(
      "q",
      {
        t: (job) => {
          started[job.id] = Date.now();
          stop.tick();
        },
      },
      { leaseSecs: 1, waitSecs: 0, concurrency: 1, batchSize: 3, signal: stop.signal, onError: quiet },
    );
    assert.ok(started.b! < firstAnswer && started.c! < firstAnswer, "b and c ran while a's acknowledgement was in flight");
    assert.deepEqual(fake.batches().flat().sort(), ["a", "b", "c"]);
    // a was heartbeated (every 500 ms) until its acknowledgement was answered, and not after.
    const beats = fake.calls("heartbeat", "a");
    assert.ok(beats.length >= 1, "heartbeated while its acknowledgement was in flight");
    assert.ok(beats.every((h) => h.at <= firstAnswer + 50), "no heartbeat after the answer");
  } finally {
    await fake.close();
  }
});
