/** `wf(name)`: build a workflow definition, checked before it is sent. */

import { WorkflowValidationError } from "./errors.js";
import type { CreateWorkflowRequest, JsonObject, WorkflowStep } from "./types.js";

/** A step's optional fields (everything but `name` and `task_name`), with `dependsOn` spelled in camelCase. */
export type StepOptions = Omit<WorkflowStep, "name" | "task_name" | "depends_on"> & { dependsOn?: string[] };

export class WorkflowBuilder {
  private readonly steps: WorkflowStep[] = [];
  private ctx: JsonObject | undefined;
  private meta: JsonObject | undefined;
  private timeout: number | undefined;

  constructor(private readonly name: string) {}

  /** Adds a step running `task`, after the steps named in `options.dependsOn`. */
  step(name: string, task: string, options: StepOptions = {}): this {
    const { dependsOn, ...rest } = options;
    const step: WorkflowStep = { name, task_name: task, ...rest };
    if (dependsOn && dependsOn.length > 0) step.depends_on = [...dependsOn];
    this.steps.push(step);
    return this;
  }

  /** The workflow's initial context. */
  context(value: JsonObject): this {
    this.ctx = value;
    return this;
  }

  metadata(value: JsonObject): this {
    this.meta = value;
    return this;
  }

  timeoutSecs(value: number): this {
    this.timeout = value;
    return this;
  }

  /** The request body; throws {@link WorkflowValidationError} for a definition the server would refuse. */
  build(): CreateWorkflowRequest {
    validateWorkflow(this.name, this.steps);
    const body: CreateWorkflowRequest = { name: this.name, steps: this.steps.map((s) => ({ ...s })) };
    if (this.ctx !== undefined) body.context = this.ctx;
    if (this.meta !== undefined) body.metadata = this.meta;
    if (this.timeout !== undefined) body.timeout_secs = this.timeout;
    return body;
  }
}

/** Starts a workflow definition: `wf("etl").step("extract", "etl.extract").step("load", "etl.load", {dependsOn: ["extract"]}).build()`. */
export function wf(name: string): WorkflowBuilder {
  return new WorkflowBuilder(name);
}

/** Checks names, dependencies and acyclicity; throws {@link WorkflowValidationError}. */
export function validateWorkflow(name: string, steps: WorkflowStep[]): void {
  if (!name.trim()) throw new WorkflowValidationError("a workflow needs a name");
  if (steps.length === 0) throw new WorkflowValidationError(`workflow ${name} has no steps`);
  const names = new Set<string>();
  for (const step of steps) {
    if (!step.name.trim()) throw new WorkflowValidationError("every step needs a name");
    if (names.has(step.name)) throw new WorkflowValidationError(`duplicate step name: ${step.name}`);
    names.add(step.name);
  }
  for (const step of steps) {
    for (const dep of step.depends_on ?? []) {
      if (!names.has(dep)) throw new WorkflowValidationError(`step ${step.name} depends on unknown step ${dep}`);
      if (dep === step.name) throw new WorkflowValidationError(`step ${step.name} depends on itself`);
    }
  }
  // Kahn's algorithm: whatever cannot be ordered is on a cycle.
  const indegree = new Map(steps.map((s) => [s.name, (s.depends_on ?? []).length]));
  const dependents = new Map<string, string[]>();
  for (const step of steps) {
    for (const dep of step.depends_on ?? []) dependents.set(dep, [...(dependents.get(dep) ?? []), step.name]);
  }
  const ready = steps.filter((s) => indegree.get(s.name) === 0).map((s) => s.name);
  let ordered = 0;
  while (ready.length > 0) {
    const next = ready.pop() as string;
    ordered += 1;
    for (const child of dependents.get(next) ?? []) {
      const left = (indegree.get(child) ?? 0) - 1;
      indegree.set(child, left);
      if (left === 0) ready.push(child);
    }
  }
  if (ordered < steps.length) {
    const stuck = [...indegree.entries()].filter(([, n]) => n > 0).map(([n]) => n);
    throw new WorkflowValidationError(`workflow ${name} has a dependency cycle among: ${stuck.join(", ")}`);
  }
}
