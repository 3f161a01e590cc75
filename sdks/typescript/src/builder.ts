/** `wf(name)`: build a workflow definition, checked before it is sent. */

import { WorkflowValidationError } from "./errors.js";
import { MAX_EVENT_KEY_BYTES, MAX_SLEEP_SECS } from "./types.js";
import type { CreateWorkflowRequest, JsonObject, WorkflowStep } from "./types.js";

/** The fields of a sleep or a wait-for-event step, which a task step does not take. */
type DurableFields = "sleep_secs" | "sleep_until" | "wait_for_event" | "timeout_secs";

/** A task step's optional fields (everything but `name` and `task_name`), with `dependsOn` spelled in camelCase. */
export type StepOptions = Omit<WorkflowStep, "name" | "task_name" | "depends_on" | DurableFields> & {
  dependsOn?: string[];
};

/** The optional fields of a sleep step (it runs no job, so no payload, config, queue or fan-out). */
export type SleepStepOptions = Pick<WorkflowStep, "on_failure" | "on_success" | "metadata" | "when"> & {
  dependsOn?: string[];
};

/** The optional fields of a wait-for-event step: a sleep step's, and the time-out in seconds. */
export type WaitStepOptions = SleepStepOptions & Pick<WorkflowStep, "timeout_secs">;

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

  /** Adds a step that runs no job and completes `seconds` (1 to 31536000) after it starts, with `{slept_until}`. */
  sleep(name: string, seconds: number, options: SleepStepOptions = {}): this {
    return this.add({ name, sleep_secs: seconds }, options);
  }

  /** Adds a step that runs no job and completes at `until` (at once if that has passed when it starts). */
  sleepUntil(name: string, until: Date | string, options: SleepStepOptions = {}): this {
    const instant = until instanceof Date ? until.toISOString() : until;
    return this.add({ name, sleep_until: instant }, options);
  }

  /**
   * Adds a step that runs no job and waits for an event with `key` (`qf.events.send`), completing
   * with its payload; an event sent before the step starts is kept and received when it does. `key`
   * may hold `{{context.path}}` placeholders. With `timeout_secs` the step fails with
   * `event_timeout` when no event came in time.
   */
  waitForEvent(name: string, key: string, options: WaitStepOptions = {}): this {
    const { timeout_secs, ...rest } = options;
    const step: WorkflowStep = { name, wait_for_event: { key } };
    if (timeout_secs !== undefined) step.timeout_secs = timeout_secs;
    return this.add(step, rest);
  }

  private add(step: WorkflowStep, options: SleepStepOptions): this {
    const { dependsOn, ...rest } = options;
    const full: WorkflowStep = { ...step, ...rest };
    if (dependsOn && dependsOn.length > 0) full.depends_on = [...dependsOn];
    this.steps.push(full);
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
  for (const step of steps) validateDurableStep(step);
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

function isSeconds(value: unknown): boolean {
  return typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= MAX_SLEEP_SECS;
}

/** A sleep or wait-for-event step's own rules (a step without those fields passes untouched). */
function validateDurableStep(step: WorkflowStep): void {
  const where = `step ${step.name}`;
  const sleeps = step.sleep_secs !== undefined || step.sleep_until !== undefined;
  const waits = step.wait_for_event !== undefined;
  if (!sleeps && !waits) {
    if (step.timeout_secs !== undefined) throw new WorkflowValidationError(`${where}: timeout_secs belongs to a wait_for_event step`);
    return;
  }
  if (sleeps && waits) throw new WorkflowValidationError(`${where}: a step sleeps or waits for an event, not both`);
  if (step.task_name !== undefined || step.workflow !== undefined || step.fan_out !== undefined) {
    throw new WorkflowValidationError(`${where}: a sleep or a wait runs no task, sub-workflow or fan-out`);
  }
  if (step.sleep_secs !== undefined && step.sleep_until !== undefined) {
    throw new WorkflowValidationError(`${where}: sleep_secs and sleep_until exclude each other`);
  }
  if (step.sleep_secs !== undefined && !isSeconds(step.sleep_secs)) {
    throw new WorkflowValidationError(`${where}: sleep_secs must be an integer from 1 to ${MAX_SLEEP_SECS}`);
  }
  if (step.sleep_until !== undefined && Number.isNaN(Date.parse(step.sleep_until))) {
    throw new WorkflowValidationError(`${where}: sleep_until is not a date: ${step.sleep_until}`);
  }
  if (sleeps && step.timeout_secs !== undefined) {
    throw new WorkflowValidationError(`${where}: timeout_secs belongs to a wait_for_event step`);
  }
  if (waits) {
    const bytes = new TextEncoder().encode(step.wait_for_event?.key ?? "").length;
    if (bytes < 1 || bytes > MAX_EVENT_KEY_BYTES) {
      throw new WorkflowValidationError(`${where}: an event key must be 1 to ${MAX_EVENT_KEY_BYTES} bytes`);
    }
    if (step.timeout_secs !== undefined && !isSeconds(step.timeout_secs)) {
      throw new WorkflowValidationError(`${where}: timeout_secs must be an integer from 1 to ${MAX_SLEEP_SECS}`);
    }
  }
}
