import { test } from "node:test";
import assert from "node:assert/strict";

import { WorkflowValidationError, wf } from "../dist/index.js";

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
