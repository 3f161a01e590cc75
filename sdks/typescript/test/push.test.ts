import { test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { readFileSync } from "node:fs";

import { PushVerificationError, PushVerifier, QueueFlowError, type PushDelivery } from "../dist/index.js";
import { pushHandler } from "../dist-examples/push-fetch.js";

interface Vector {
  name: string;
  secret: string;
  headers: Record<string, string>;
  body: string;
  now: number;
  expect: { valid: boolean; reason?: string; delivery?: Record<string, unknown> };
}

const vectors = JSON.parse(
  readFileSync(new URL("../../conformance/push/vectors.json", import.meta.url), "utf-8"),
) as { tolerance_secs: number; cases: Vector[] };
const byName = new Map(vectors.cases.map((c) => [c.name, c]));
// Extra cases in the same format (QF_PUSH_VECTORS_EXTRA=<file>), e.g. real deliveries a server test captured.
const extra = process.env.QF_PUSH_VECTORS_EXTRA;
const extraCases = extra ? (JSON.parse(readFileSync(extra, "utf-8")) as { cases: Vector[] }).cases : [];
const good = byName.get("good_signature")!;

function summary(d: PushDelivery): Record<string, unknown> {
  return {
    id: d.id,
    timestamp: d.timestamp.getTime() / 1000,
    job_id: d.job.id,
    task_name: d.job.task_name,
    payload: d.job.payload,
    lease_token: d.lease_token,
    attempt: d.attempt,
    traceparent: d.traceparent ?? null,
  };
}

async function outcome(c: Vector, headers: Vector["headers"] | Headers = c.headers) {
  try {
    const verifier = new PushVerifier(c.secret);
    return { valid: true, delivery: summary(await verifier.verify(headers, c.body, { now: new Date(c.now * 1000) })) };
  } catch (err) {
    assert.ok(err instanceof PushVerificationError, `not a PushVerificationError: ${String(err)}`);
    return { valid: false, reason: err.reason };
  }
}

test("the vectors file has cases and the 300 s tolerance", () => {
  assert.equal(vectors.tolerance_secs, 300);
  assert.ok(vectors.cases.length > 20);
});

for (const c of [...vectors.cases, ...extraCases]) {
  test(`push vector ${c.name} (a header record)`, async () => {
    assert.deepEqual(await outcome(c), c.expect);
  });
  test(`push vector ${c.name} (fetch Headers, body as bytes)`, async () => {
    const got = await (async () => {
      try {
        const verifier = new PushVerifier(c.secret);
        const d = await verifier.verify(new Headers(c.headers), new TextEncoder().encode(c.body), {
          now: new Date(c.now * 1000),
        });
        return { valid: true, delivery: summary(d) };
      } catch (err) {
        assert.ok(err instanceof PushVerificationError);
        return { valid: false, reason: err.reason };
      }
    })();
    assert.deepEqual(got, c.expect);
  });
}

test("a malformed secret throws when the verifier is built, as a QueueFlowError", () => {
  assert.throws(
    () => new PushVerifier("my-secret"),
    (err: unknown) => err instanceof PushVerificationError && err instanceof QueueFlowError && err.reason === "malformed_secret",
  );
});

test("the tolerance is an option", async () => {
  const stale = byName.get("old_timestamp")!; // 301 s old
  await new PushVerifier(stale.secret, { toleranceSecs: 600 }).verify(stale.headers, stale.body, {
    now: new Date(stale.now * 1000),
  });
  const recent = byName.get("a_retry_is_a_new_attempt")!; // 10 s old
  await assert.rejects(
    new PushVerifier(recent.secret, { toleranceSecs: 5 }).verify(recent.headers, recent.body, {
      now: new Date(recent.now * 1000),
    }),
    (err: unknown) => err instanceof PushVerificationError && err.reason === "timestamp_too_old",
  );
});

// --- the fetch-handler example --------------------------------------------------------------------

/** A delivery as the server signs one (written from the spec, with node:crypto, not the SDK's code). */
function signed(body: string, secret: string, stamp = Math.floor(Date.now() / 1000)): Request {
  const key = Buffer.from(secret.slice("whsec_".length), "base64");
  const mac = createHmac("sha256", key).update(`d-1.${stamp}.${body}`).digest("base64");
  return new Request("http://receiver.test/queueflow", {
    method: "POST",
    body,
    headers: {
      "content-type": "application/json",
      "webhook-id": "d-1",
      "webhook-timestamp": String(stamp),
      "webhook-signature": `v1,${mac}`,
    },
  });
}

test("the fetch example answers a signed delivery with the task's result", async () => {
  const handler = pushHandler(new PushVerifier(good.secret));
  const resp = await handler(signed(good.body, good.secret));
  assert.equal(resp.status, 200);
  assert.deepEqual(await resp.json(), { sent_to: "zoë@example.com" });
});

test("the fetch example refuses a tampered body, an old delivery and another secret with a retryable 503", async () => {
  const handler = pushHandler(new PushVerifier(good.secret));
  const sig = signed(good.body, good.secret).headers;
  const tampered = new Request("http://receiver.test/queueflow", {
    method: "POST",
    body: good.body.replace('"attempt":1', '"attempt":2'),
    headers: sig,
  });
  const other = `whsec_${Buffer.from("another endpoint").toString("base64")}`;
  const answers = [
    await handler(tampered),
    await handler(signed(good.body, good.secret, Math.floor(Date.now() / 1000) - 3600)),
    await handler(signed(good.body, other)),
  ];
  assert.deepEqual(
    await Promise.all(answers.map(async (r) => [r.status, r.headers.get("retry-after"), await r.json()])),
    [
      [503, "60", { error: "signature_mismatch" }],
      [503, "60", { error: "timestamp_too_old" }],
      [503, "60", { error: "signature_mismatch" }],
    ],
  );
});
