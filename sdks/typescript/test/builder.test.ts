import { test } from "node:test";
import assert from "node:assert/strict";

import { WorkflowValidationError, validateWorkflow, wf } from "../dist/index.js";

test("wf() builds the wire body", () => {
  const body = wf("etl")
    .step("extract", "etl.extract", { payload: { src: "s3://x" } })
    .step("load", "etl.load", { dependsOn: ["extract"], queue: "etl", on_failure: "halt" })
    .context({ run: 1 })
    .timeoutSecs(600)
    .build();
  assert.deepEqual(body, {
    name: "etl",
    steps: [
      { name: "extract", task_name: "etl.extract", payload: { src: "s3://x" } },
      { name: "load", task_name: "etl.load", queue: "etl", on_failure: "halt", depends_on: ["extract"] },
    ],
    context: { run: 1 },
    timeout_secs: 600,
  });
});

test("wf() refuses cycles, unknown dependencies, duplicates and empty workflows", () => {
  assert.throws(() => wf("c").step("a", "t", { dependsOn: ["b"] }).step("b", "t", { dependsOn: ["a"] }).build(), (err: unknown) => {
    assert.ok(err instanceof WorkflowValidationError);
    assert.match((err as Error).message, /cycle among: a, b|cycle among: b, a/);
    return true;
  });
  assert.throws(() => wf("u").step("a", "t", { dependsOn: ["zzz"] }).build(), /unknown step zzz/);
  assert.throws(() => wf("d").step("a", "t").step("a", "t").build(), /duplicate step name/);
  assert.throws(() => wf("s").step("a", "t", { dependsOn: ["a"] }).build(), /depends on itself/);
  assert.throws(() => wf("e").build(), WorkflowValidationError);
});

test("wf() declares sleep and wait-for-event steps as the server reads them", () => {
  const body = wf("ship")
    .waitForEvent("approve", "approval:{{context.order}}", { timeout_secs: 3600, on_failure: "skip" })
    .sleep("nap", 90, { dependsOn: ["approve"] })
    .sleepUntil("later", new Date(Date.UTC(2027, 0, 2, 3, 4, 5)), { dependsOn: ["nap"] })
    .sleepUntil("at", "2027-01-02T03:04:05+01:00")
    .waitForEvent("plain", "k")
    .context({ order: 42 })
    .build();
  assert.deepEqual(body, {
    name: "ship",
    steps: [
      { name: "approve", wait_for_event: { key: "approval:{{context.order}}" }, timeout_secs: 3600, on_failure: "skip" },
      { name: "nap", sleep_secs: 90, depends_on: ["approve"] },
      { name: "later", sleep_until: "2027-01-02T03:04:05.000Z", depends_on: ["nap"] },
      { name: "at", sleep_until: "2027-01-02T03:04:05+01:00" },
      { name: "plain", wait_for_event: { key: "k" } },
    ],
    context: { order: 42 },
  });
});

test("wf() refuses sleep and wait steps the server would refuse", () => {
  assert.throws(() => wf("s").sleep("a", 0).build(), /sleep_secs must be an integer from 1 to 31536000/);
  assert.throws(() => wf("s").sleep("a", 31_536_001).build(), WorkflowValidationError);
  assert.throws(() => wf("s").sleep("a", 1.5).build(), WorkflowValidationError);
  assert.throws(() => wf("s").sleepUntil("a", "soon").build(), /not a date/);
  assert.throws(() => wf("s").sleepUntil("a", new Date(Number.NaN)), RangeError, "an invalid Date has no ISO form");
  assert.throws(() => wf("w").waitForEvent("a", "").build(), /1 to 256 bytes/);
  assert.throws(() => wf("w").waitForEvent("a", "é".repeat(129)).build(), /1 to 256 bytes/);
  assert.throws(() => wf("w").waitForEvent("a", "k", { timeout_secs: 0 }).build(), /timeout_secs must be/);
  // Steps written by hand go through the same checks.
  assert.throws(() => validateWorkflow("t", [{ name: "a", task_name: "t", timeout_secs: 5 }]), /belongs to a wait_for_event step/);
  assert.throws(() => validateWorkflow("m", [{ name: "a", task_name: "t", sleep_secs: 5 }]), /runs no task/);
  assert.throws(() => validateWorkflow("b", [{ name: "a", sleep_secs: 5, wait_for_event: { key: "k" } }]), /not both/);
  assert.throws(() => validateWorkflow("x", [{ name: "a", sleep_secs: 5, sleep_until: "2027-01-01T00:00:00Z" }]), /exclude each other/);
});
