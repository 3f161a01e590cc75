/**
 * The remote-worker protocol (lease, heartbeat, complete, fail) and the worker loop built on it.
 * See the protocol description in the QueueFlow docs ("Remote workers").
 */

import {
  AbortError,
  ApiError,
  ConflictError,
  NotFoundError,
  isNonRetryable,
  isTransient,
} from "./errors.js";
import { backoffDelay, sleep } from "./backoff.js";
import { seg, type CallOptions, type Transport } from "./http.js";
import type * as T from "./types.js";

/** What a handler receives besides the job. */
export interface JobContext {
  /**
   * Aborts when the server takes the job back: it was cancelled, finished elsewhere, or the lease
   * was lost (heartbeat answered a non-running status or 409). After that the runtime reports
   * nothing for the job, so the handler should stop as soon as it can. A graceful shutdown of the
   * loop does not abort it: running handlers are allowed to finish.
   */
  signal: AbortSignal;
  /** The leased job (same object as the handler's first argument). */
  job: T.Job;
  /** The lease token of this delivery. */
  leaseToken: string;
  /** Which delivery this is (1 for the first). */
  attempt: number;
}

/** A handler's value becomes the job's result: an object as is, `undefined`/`null` as `{}`, anything else as `{value}`. */
export type HandlerResult = T.JsonObject | void | undefined | null | unknown;

export type Handler = (job: T.Job, ctx: JobContext) => Promise<HandlerResult> | HandlerResult;

/** Task name -> handler. */
export type Handlers = Record<string, Handler>;

/** Where a worker-loop error happened, for `onError`. */
export interface WorkerErrorInfo {
  phase: "lease" | "heartbeat" | "report";
  queue: string;
  jobId?: string;
}

export interface RunOptions {
  /** Lease length in seconds (1..3600), also the heartbeat extension. Default 30. */
  leaseSecs?: number;
  /** Long-poll of each lease call in seconds (0..30). Default 20. */
  waitSecs?: number;
  /** Handlers running at once. Default 1. */
  concurrency?: number;
  /** Jobs per lease call (1..100). Default `concurrency`. Jobs waiting their turn are heartbeated too. */
  batchSize?: number;
  /** Aborting it stops the loop gracefully: no new leases, held jobs run and report, then `run` resolves. */
  signal?: AbortSignal;
  /**
   * Called for errors the loop survives: transient lease failures (it then backs off), heartbeat
   * failures, and failed reports. Default: a throttled `console.warn`.
   */
  onError?: (error: unknown, info: WorkerErrorInfo) => void;
}

/** A running worker loop, from {@link Worker.start}. */
export interface WorkerHandle {
  /** Stops leasing, waits for held jobs to finish and report; resolves like {@link WorkerHandle.done}. */
  stop(): Promise<void>;
  /** Settles when the loop has stopped: resolves after a graceful stop, rejects on a fatal error (401, 403, ...). */
  readonly done: Promise<void>;
}

/** Options of a raw lease call. */
export interface LeaseOptions {
  maxJobs?: number;
  leaseSecs?: number;
  waitSecs?: number;
}

/** Anything that names a held lease: a {@link T.LeasedJob}, or a job id and token. */
export type LeaseRef = T.LeasedJob | { jobId: string; leaseToken: string };

function refOf(lease: LeaseRef): { id: string; token: string } {
  return "job" in lease ? { id: lease.job.id, token: lease.lease_token } : { id: lease.jobId, token: lease.leaseToken };
}

function isPlainObject(value: unknown): value is T.JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Turns a handler's return value into a result object. */
export function toResult(value: unknown): T.JsonObject {
  if (value === undefined || value === null) return {};
  if (isPlainObject(value)) return value;
  return { value };
}

function messageOf(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  if (typeof err === "string") return err;
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

/** The default `onError`: at most one warning per phase every 5 s, with a count of those suppressed. */
function throttledWarn(): (error: unknown, info: WorkerErrorInfo) => void {
  const last = new Map<string, number>();
  const suppressed = new Map<string, number>();
  return (error, info) => {
    const now = Date.now();
    const key = info.phase;
    if (now - (last.get(key) ?? 0) < 5000) {
      suppressed.set(key, (suppressed.get(key) ?? 0) + 1);
      return;
    }
    const more = suppressed.get(key) ?? 0;
    last.set(key, now);
    suppressed.set(key, 0);
    const job = info.jobId ? ` job ${info.jobId}` : "";
    const extra = more > 0 ? ` (${more} similar suppressed)` : "";
    console.warn(`queueflow worker [${info.queue}] ${info.phase}${job}: ${messageOf(error)}${extra}`);
  };
}

/** The worker-protocol routes, on the worker token. */
export class Worker {
  constructor(
    private readonly transport: Transport,
    private readonly token: string,
  ) {}

  /**
   * `POST /api/v1/queues/{queue}/lease`: claim up to `maxJobs` jobs, waiting up to `waitSecs` for
   * one to arrive. The call's timeout is at least the long-poll plus 10 s.
   */
  lease(queue: string, options: LeaseOptions = {}, call: CallOptions = {}): Promise<T.LeaseJobsResponse> {
    const body: T.LeaseJobsRequest = {};
    if (options.maxJobs !== undefined) body.max_jobs = options.maxJobs;
    if (options.leaseSecs !== undefined) body.lease_secs = options.leaseSecs;
    if (options.waitSecs !== undefined) body.wait_secs = options.waitSecs;
    const floor = (options.waitSecs ?? 0) * 1000 + 10_000;
    const timeoutMs = Math.max(call.timeoutMs ?? this.transport.options.timeoutMs, floor);
    return this.transport.json<T.LeaseJobsResponse>({
      method: "POST",
      path: `/api/v1/queues/${seg(queue)}/lease`,
      token: this.token,
      body,
      idempotent: true,
      ...call,
      timeoutMs,
    });
  }

  /**
   * `POST /api/v1/jobs/{id}/heartbeat`: extend the lease by `extendSecs` from now. Anything but
   * `{status: "running"}` means the server owns the job now: stop and report nothing. A lost
   * lease is a {@link ConflictError} (409).
   */
  heartbeat(lease: LeaseRef, extendSecs: number, call: CallOptions = {}): Promise<T.HeartbeatResponse> {
    const { id, token } = refOf(lease);
    const body: T.HeartbeatRequest = { lease_token: token, extend_secs: extendSecs };
    return this.transport.json<T.HeartbeatResponse>({
      method: "POST",
      path: `/api/v1/jobs/${seg(id)}/heartbeat`,
      token: this.token,
      body,
      ...call,
    });
  }

  /** `POST /api/v1/jobs/{id}/complete`: record success (idempotent). 409 when the lease is no longer held. */
  async complete(lease: LeaseRef, result: T.JsonObject = {}, call: CallOptions = {}): Promise<void> {
    const { id, token } = refOf(lease);
    const body: T.CompleteJobRequest = { lease_token: token, result };
    await this.transport.json<void>({
      method: "POST",
      path: `/api/v1/jobs/${seg(id)}/complete`,
      token: this.token,
      body,
      ...call,
    });
  }

  /**
   * `POST /api/v1/jobs/{id}/fail`: record a failure. `retryable: true` (default) retries while
   * budget remains, then dead-letters; `false` dead-letters at once.
   */
  async fail(lease: LeaseRef, error: string, options: { retryable?: boolean } = {}, call: CallOptions = {}): Promise<void> {
    const { id, token } = refOf(lease);
    const body: T.FailJobRequest = { lease_token: token, error, retryable: options.retryable ?? true };
    await this.transport.json<void>({
      method: "POST",
      path: `/api/v1/jobs/${seg(id)}/fail`,
      token: this.token,
      body,
      ...call,
    });
  }

  /**
   * Runs the worker loop on `queue` until `options.signal` aborts (then drains gracefully and
   * resolves) or a fatal error (401, 403 or another non-transient 4xx from the lease call), with
   * which it rejects after draining. Transport errors and 5xx back off with jitter (up to 5 s)
   * and the loop carries on.
   */
  async run(queue: string, handlers: Handlers, options: RunOptions = {}): Promise<void> {
    return this.start(queue, handlers, options).done;
  }

  /** Like {@link Worker.run}, but returns a handle with `stop()` and `done`. */
  start(queue: string, handlers: Handlers, options: RunOptions = {}): WorkerHandle {
    const loop = new WorkerLoop(this, queue, handlers, options);
    return { stop: () => loop.stop(), done: loop.done };
  }
}

interface Held {
  leased: T.LeasedJob;
  controller: AbortController;
  lost: boolean;
  timer: ReturnType<typeof setInterval> | undefined;
  beating: boolean;
}

function positiveInt(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`worker option ${name} must be an integer in ${min}..${max}, not ${String(v)}`);
  }
  return v;
}

class WorkerLoop {
  readonly done: Promise<void>;
  private readonly stopController = new AbortController();
  private readonly leaseSecs: number;
  private readonly waitSecs: number;
  private readonly concurrency: number;
  private readonly batchSize: number;
  private readonly onError: (error: unknown, info: WorkerErrorInfo) => void;
  private readonly waiting: Held[] = [];
  private readonly tasks = new Set<Promise<void>>();
  private running = 0;
  private wakeUp: () => void = () => {};

  constructor(
    private readonly worker: Worker,
    private readonly queue: string,
    private readonly handlers: Handlers,
    options: RunOptions,
  ) {
    this.leaseSecs = positiveInt("leaseSecs", options.leaseSecs, 30, 1, 3600);
    this.waitSecs = positiveInt("waitSecs", options.waitSecs, 20, 0, 30);
    this.concurrency = positiveInt("concurrency", options.concurrency, 1, 1, 10_000);
    this.batchSize = positiveInt("batchSize", options.batchSize, Math.min(this.concurrency, 100), 1, 100);
    this.onError = options.onError ?? throttledWarn();
    const external = options.signal;
    if (external) {
      if (external.aborted) this.stopController.abort();
      else external.addEventListener("abort", () => this.stopController.abort(), { once: true });
    }
    this.stopController.signal.addEventListener("abort", () => this.wakeUp(), { once: true });
    this.done = this.loop();
  }

  stop(): Promise<void> {
    this.stopController.abort();
    return this.done;
  }

  private get stopping(): boolean {
    return this.stopController.signal.aborted;
  }

  private report(error: unknown, info: Omit<WorkerErrorInfo, "queue">): void {
    try {
      this.onError(error, { ...info, queue: this.queue });
    } catch {
      // an onError that throws must not break the loop
    }
  }

  /** Resolves at the next job finish or stop request. */
  private nextWake(): Promise<void> {
    return new Promise((resolve) => {
      this.wakeUp = () => {
        this.wakeUp = () => {};
        resolve();
      };
      if (this.stopping) this.wakeUp();
    });
  }

  private async loop(): Promise<void> {
    await Promise.resolve(); // let the constructor finish before the first await
    let failures = 0;
    let fatal: unknown;
    while (!this.stopping) {
      // Lease only when a handler slot is free and nothing leased is still waiting its turn.
      if (this.running >= this.concurrency || this.waiting.length > 0) {
        await this.nextWake();
        continue;
      }
      let leased: T.LeaseJobsResponse;
      try {
        leased = await this.worker.lease(
          this.queue,
          { maxJobs: this.batchSize, leaseSecs: this.leaseSecs, waitSecs: this.waitSecs },
          { signal: this.stopController.signal, maxRetries: 0 },
        );
        failures = 0;
      } catch (err) {
        if (this.stopping && err instanceof AbortError) break;
        if (err instanceof ApiError && !isTransient(err)) {
          fatal = err; // 401, 403, 400, 404...: retrying cannot help, so surface it
          break;
        }
        this.report(err, { phase: "lease" });
        await sleep(backoffDelay(failures++, { baseMs: 200, capMs: 5000 }), this.stopController.signal);
        continue;
      }
      for (const item of leased.jobs) this.waiting.push(this.hold(item));
      this.dispatch();
    }
    // Graceful drain: every job held (running or waiting its turn) runs and reports.
    while (this.tasks.size > 0) await Promise.allSettled([...this.tasks]);
    if (fatal !== undefined) throw fatal;
  }

  /** Starts heartbeating a leased job at half the lease, from the moment it is held. */
  private hold(leased: T.LeasedJob): Held {
    const held: Held = { leased, controller: new AbortController(), lost: false, timer: undefined, beating: false };
    const intervalMs = Math.max(250, (this.leaseSecs * 1000) / 2);
    held.timer = setInterval(() => void this.beat(held, intervalMs), intervalMs);
    return held;
  }

  private async beat(held: Held, intervalMs: number): Promise<void> {
    if (held.beating || held.lost) return;
    held.beating = true;
    try {
      const answer = await this.worker.heartbeat(held.leased, this.leaseSecs, { timeoutMs: Math.max(1000, intervalMs) });
      if (answer.status !== "running") this.lose(held, `job is ${answer.status}`);
    } catch (err) {
      if (err instanceof ConflictError || err instanceof NotFoundError) this.lose(held, "lease lost");
      else this.report(err, { phase: "heartbeat", jobId: held.leased.job.id });
    } finally {
      held.beating = false;
    }
  }

  private lose(held: Held, why: string): void {
    if (held.lost) return;
    held.lost = true;
    this.release(held);
    held.controller.abort(new AbortError(`job ${held.leased.job.id}: ${why}; the server owns its outcome`));
  }

  private release(held: Held): void {
    if (held.timer !== undefined) clearInterval(held.timer);
    held.timer = undefined;
  }

  private dispatch(): void {
    while (this.running < this.concurrency && this.waiting.length > 0) {
      const held = this.waiting.shift() as Held;
      this.running++;
      const task: Promise<void> = this.execute(held)
        .catch((err) => this.report(err, { phase: "report", jobId: held.leased.job.id }))
        .finally(() => {
          this.release(held);
          this.running--;
          this.tasks.delete(task);
          this.dispatch();
          this.wakeUp();
        });
      this.tasks.add(task);
    }
  }

  private async execute(held: Held): Promise<void> {
    if (held.lost) return; // taken back while it waited its turn
    const { job, lease_token } = held.leased;
    const handler = Object.prototype.hasOwnProperty.call(this.handlers, job.task_name)
      ? this.handlers[job.task_name]
      : undefined;
    if (handler === undefined) {
      await this.send(held, () =>
        this.worker.fail(held.leased, `no worker handler for task '${job.task_name}'`, { retryable: false }),
      );
      return;
    }
    const ctx: JobContext = { signal: held.controller.signal, job, leaseToken: lease_token, attempt: job.delivery_count };
    let outcome: { ok: true; result: T.JsonObject } | { ok: false; error: unknown };
    try {
      outcome = { ok: true, result: toResult(await handler(job, ctx)) };
    } catch (error) {
      outcome = { ok: false, error };
    }
    if (held.lost) return; // cancelled or lease lost: report nothing
    if (outcome.ok) {
      const result = outcome.result;
      await this.send(held, () => this.worker.complete(held.leased, result));
    } else {
      const message = messageOf(outcome.error);
      const retryable = !isNonRetryable(outcome.error);
      await this.send(held, () => this.worker.fail(held.leased, message, { retryable }));
    }
  }

  /**
   * Sends a report (complete or fail), keeping the heartbeat going meanwhile. A transient failure
   * (no answer, 5xx) is retried with backoff while the lease can still be held: the same report,
   * never a different one. Anything else (409: the lease is gone) is logged and dropped; the
   * server then redelivers or has already decided.
   */
  private async send(held: Held, call: () => Promise<void>): Promise<void> {
    const deadline = Date.now() + Math.max(this.leaseSecs * 1000, 10_000);
    for (let attempt = 0; ; attempt++) {
      try {
        await call();
        return;
      } catch (err) {
        const delay = backoffDelay(attempt, { baseMs: 200, capMs: 5000 });
        if (!isTransient(err) || held.lost || Date.now() + delay > deadline) {
          this.report(err, { phase: "report", jobId: held.leased.job.id });
          return;
        }
        await sleep(delay);
      } finally {
        // nothing: the caller's finally stops the heartbeat once the report is settled
      }
    }
  }
}

