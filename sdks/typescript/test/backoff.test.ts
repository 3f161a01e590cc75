import { test } from "node:test";
import assert from "node:assert/strict";

import { backoffDelay, sleep } from "../dist/index.js";

test("backoff grows exponentially and stays within [d/2, d)", () => {
  const low = (attempt: number): number => backoffDelay(attempt, { baseMs: 200, capMs: 5000, random: () => 0 });
  const high = (attempt: number): number => backoffDelay(attempt, { baseMs: 200, capMs: 5000, random: () => 0.999999 });
  assert.equal(low(0), 100);
  assert.equal(low(1), 200);
  assert.equal(low(2), 400);
  assert.ok(high(0) < 200 && high(0) > 199);
  assert.ok(high(2) < 800);
});

test("backoff is capped", () => {
  for (const attempt of [5, 10, 50, 1000]) {
    const d = backoffDelay(attempt, { baseMs: 200, capMs: 5000, random: () => 0.999999 });
    assert.ok(d <= 5000, `attempt ${attempt}: ${d}`);
    assert.ok(d >= 2500);
  }
  assert.ok(backoffDelay(1e9) <= 5000, "defaults cap at 5 s");
});

test("backoff has jitter", () => {
  const values = new Set(Array.from({ length: 20 }, () => backoffDelay(4)));
  assert.ok(values.size > 1, "twenty draws are not all equal");
  for (const v of values) assert.ok(v > 0);
});

test("negative attempts are treated as the first", () => {
  assert.equal(backoffDelay(-3, { random: () => 0 }), backoffDelay(0, { random: () => 0 }));
});

test("sleep resolves early when its signal aborts", async () => {
  const controller = new AbortController();
  const started = Date.now();
  setTimeout(() => controller.abort(), 20);
  await sleep(5000, controller.signal);
  assert.ok(Date.now() - started < 1000);
  const pre = AbortSignal.abort();
  await sleep(5000, pre); // resolves at once
});
