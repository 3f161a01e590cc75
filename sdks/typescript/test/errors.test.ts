import { test } from "node:test";
import assert from "node:assert/strict";

import {
  ApiError,
  BadRequestError,
  ConflictError,
  ConnectionError,
  ForbiddenError,
  NonRetryableError,
  NotFoundError,
  QueueFlowError,
  TimeoutError,
  UnauthorizedError,
  apiErrorFor,
  isNonRetryable,
  isTransient,
} from "../dist/index.js";

const BODY = JSON.stringify({ error: "job not found: x", timestamp: "2026-01-01T00:00:00Z" });

test("each status maps to its ApiError subclass", () => {
  const cases: Array<[number, new (...args: never[]) => ApiError]> = [
    [400, BadRequestError],
    [401, UnauthorizedError],
    [403, ForbiddenError],
    [404, NotFoundError],
    [409, ConflictError],
  ];
  for (const [status, cls] of cases) {
    const err = apiErrorFor(status, BODY, "GET /x");
    assert.ok(err instanceof cls, `${status} -> ${cls.name}`);
    assert.ok(err instanceof ApiError);
    assert.ok(err instanceof QueueFlowError);
    assert.ok(err instanceof Error);
    assert.equal(err.status, status);
    assert.equal(err.name, cls.name);
  }
  const other = apiErrorFor(500, BODY, "GET /x");
  assert.equal(other.constructor, ApiError);
  assert.equal(other.status, 500);
});

test("the server's error body is parsed and exposed", () => {
  const err = apiErrorFor(404, BODY, "GET /api/v1/jobs/x");
  assert.deepEqual(err.body, { error: "job not found: x", timestamp: "2026-01-01T00:00:00Z" });
  assert.equal(err.serverMessage, "job not found: x");
  assert.equal(err.request, "GET /api/v1/jobs/x");
  assert.match(err.message, /GET \/api\/v1\/jobs\/x failed with 404: job not found: x/);
});

test("a body that is not the error shape leaves body undefined but keeps the text", () => {
  const html = apiErrorFor(502, "<html>bad gateway</html>", "GET /x");
  assert.equal(html.body, undefined);
  assert.equal(html.rawBody, "<html>bad gateway</html>");
  assert.equal(html.serverMessage, "<html>bad gateway</html>");
  const partial = apiErrorFor(400, JSON.stringify({ error: "x" }), "GET /x");
  assert.equal(partial.body, undefined, "timestamp missing: not the error body");
  const empty = apiErrorFor(503, "", "GET /x");
  assert.match(empty.message, /HTTP 503/);
});

test("transient errors: no answer, timeouts, 408, 429 and 5xx", () => {
  assert.equal(isTransient(new ConnectionError("refused")), true);
  assert.equal(isTransient(new TimeoutError("slow")), true);
  for (const status of [408, 429, 500, 502, 503, 504]) assert.equal(isTransient(apiErrorFor(status, "", "x")), true, String(status));
  for (const status of [400, 401, 403, 404, 409]) assert.equal(isTransient(apiErrorFor(status, "", "x")), false, String(status));
  assert.equal(isTransient(new Error("plain")), false);
});

test("non-retryable handler errors", () => {
  assert.equal(isNonRetryable(new NonRetryableError("bad input")), true);
  assert.equal(new NonRetryableError("x").retryable, false);
  const tagged = Object.assign(new Error("tagged"), { retryable: false });
  assert.equal(isNonRetryable(tagged), true);
  assert.equal(isNonRetryable(Object.assign(new Error("x"), { retryable: true })), false);
  assert.equal(isNonRetryable(new Error("plain")), false);
  assert.equal(isNonRetryable("a string"), false);
  assert.equal(isNonRetryable(undefined), false);
});
