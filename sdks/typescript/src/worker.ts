/**
 * The remote-worker protocol (lease, heartbeat, complete, fail) and the worker loop built on it.
 * See the protocol description in the QueueFlow docs ("Remote workers").
 */

import { hostname } from "node:os";

import { context } from "@opentelemetry/api";

import {
  AbortError,
  ApiError,
  BadRequestError,
  ConflictError,
  ConnectionError,
  NotFoundError,
  TimeoutError,
  apiErrorFor,
  isNonRetryable,
  isTransient,
} from "./errors.js";
import { backoffDelay, sleep } from "./backoff.js";
import { seg, type CallOptions, type Transport } from "./http.js";
import { failSpan, startProcessSpan } from "./tracing.js";
import { MAX_WORKER_ID } from "./types.js";
import type * as T from "./types.js";
import { SDK_VERSION } from "./version.js";
import { LogBatcher, ProgressTracker } from "./visibility.js";

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
  /**
   * Reports how far the job got: `percent` 0 to 100, `message` at most 1,024 characters (anything
   * else throws a `RangeError` and sends nothing). The latest report travels on the job's next
   * heartbeat; a new one makes the loop send that heartbeat early, at most once a second. What is
   * still unsent when the handler ends is sent before its outcome.
   */
  progress(percent: number, message?: string): void;
  /**
   * Appends a line to the job's log (`level` 1 to 16 letters, default `info`; a message longer than
   * 64 KiB of UTF-8 is cut). Nothing is sent from the call: the loop posts the buffered lines at
   * most once a second (up to 100 lines a call), and the rest when the handler ends, before its
   * outcome. A failure to post is passed to `onError` and never changes the job's outcome.
   */
  log(message: string, level?: string): void;
}

/** A handler's value becomes the job's result: an object as is, `undefined`/`null` as `{}`, anything else as `{value}`. */
export type HandlerResult = T.JsonObject | void | undefined | null | unknown;

export type Handler = (job: T.Job, ctx: JobContext) => Promise<HandlerResult> | HandlerResult;

/** Task name -> handler. */
export type Handlers = Record<string, Handler>;

/** Where a worker-loop error happened, for `onError`. */
export interface WorkerErrorInfo {
  phase: "lease" | "heartbeat" | "report" | "logs";
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
   * The worker's id on every lease call (1 to 128 visible ASCII characters, no space): the server
   * records it on the jobs it leases (their attempts) and lists the worker under it. Default
   * `<hostname>:<process id>`.
   */
  workerId?: string;
  /**
   * Called for errors the loop survives: transient lease failures (it then backs off), heartbeat
   * failures, failed reports, and failed logs calls (and log lines that were not sent). Default: a
   * throttled `console.warn`.
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
  /** The worker's id (an extension): recorded on the leased jobs and in the worker registry. */
  workerId?: string;
  /** What the worker says of itself (an extension); left out, the server keeps what it said last. */
  worker?: T.WorkerInfo;
}

/** Options of a raw heartbeat. */
export interface HeartbeatOptions extends CallOptions {
  /** How far the job got (an extension): shown on the job until its next claim. */
  progress?: T.ProgressReport;
}

/** Anything that names a held lease: a {@link T.LeasedJob}, or a job id and token. */
export type LeaseRef = T.LeasedJob | { jobId: string; leaseToken: string };

/** One success for {@link Worker.completeMany}: the lease it settles and the job's result. */
export interface Completion {
  lease: LeaseRef;
  /** The job's result; default `{}`. */
  result?: T.JsonObject;
}

/** The most completions one {@link Worker.completeMany} call takes. */
export const MAX_COMPLETIONS = 100;

const COMPLETE_MANY_PATH = "/api/v1/jobs/complete";

const WORKER_ID = /^[!-~]+$/;
const MAX_WORKER_TEXT = 255;
const MAX_WORKER_TASKS = 256;

/** The default worker id: `<hostname>:<process id>`, kept to what the server takes. */
export function defaultWorkerId(): string {
  const suffix = `:${process.pid}`;
  const host = hostname().replace(/[^!-~]/g, "-").slice(0, MAX_WORKER_ID - suffix.length) || "localhost";
  return host + suffix;
}

function checkWorkerId(id: unknown): string {
  if (typeof id !== "string" || id.length > MAX_WORKER_ID || !WORKER_ID.test(id)) {
    throw new RangeError(
      `worker option workerId must be 1 to ${MAX_WORKER_ID} visible ASCII characters without spaces, not ${JSON.stringify(id)}`,
    );
  }
  return id;
}

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
    if (options.workerId !== undefined) body.worker_id = options.workerId;
    if (options.worker !== undefined) body.worker = options.worker;
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
   * `POST /api/v1/jobs/{id}/heartbeat`: extend the lease by `extendSecs` from now, and (an
   * extension) report the job's `progress`. Anything but `{status: "running"}` means the server
   * owns the job now: stop and report nothing. A lost lease is a {@link ConflictError} (409).
   */
  heartbeat(lease: LeaseRef, extendSecs: number, options: HeartbeatOptions = {}): Promise<T.HeartbeatResponse> {
    const { progress, ...call } = options;
    const { id, token } = refOf(lease);
    const body: T.HeartbeatRequest = { lease_token: token, extend_secs: extendSecs };
    if (progress !== undefined) body.progress = progress;
    return this.transport.json<T.HeartbeatResponse>({
      method: "POST",
      path: `/api/v1/jobs/${seg(id)}/heartbeat`,
      token: this.token,
      body,
      ...call,
    });
  }

  /**
   * `POST /api/v1/jobs/{id}/logs` (an extension): append 1 to {@link T.MAX_LOG_LINES} lines whose
   * messages take at most {@link T.MAX_LOG_CALL_BYTES} bytes of UTF-8 to the job's log, as the
   * holder of its latest lease. 409 when another lease holds the job, 404 for no such job (or a
   * server without the route). Not retried: a resent call would store its lines twice.
   */
  postLogs(lease: LeaseRef, lines: T.LogLineRequest[], call: CallOptions = {}): Promise<T.PostJobLogsResponse> {
    const { id, token } = refOf(lease);
    const body: T.PostJobLogsRequest = { lease_token: token, lines };
    return this.transport.json<T.PostJobLogsResponse>({
      method: "POST",
      path: `/api/v1/jobs/${seg(id)}/logs`,
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
   * `POST /api/v1/jobs/complete`: record 1 to {@link MAX_COMPLETIONS} successes in one call. The
   * route is a server extension: ask {@link Worker.offersCompleteMany} first; a server without it
   * answers 404 ({@link NotFoundError}) or 405. Each item is answered in `results`, in request
   * order, as `complete` would have answered it: `status` 204 (completed), 409 (the lease is no
   * longer held) or 404 (no such job). A failure of the whole call (no answer, 5xx) throws.
   */
  completeMany(completions: readonly Completion[], call: CallOptions = {}): Promise<T.CompleteJobsResponse> {
    const body: T.CompleteJobsRequest = {
      jobs: completions.map(({ lease, result }) => {
        const { id, token } = refOf(lease);
        return { id, lease_token: token, result: result ?? {} };
      }),
    };
    return this.transport.json<T.CompleteJobsResponse>({
      method: "POST",
      path: COMPLETE_MANY_PATH,
      token: this.token,
      body,
      ...call,
    });
  }

  /**
   * Whether the server offers {@link Worker.completeMany}: reads `GET /openapi.json` and looks
   * for `paths["/api/v1/jobs/complete"].post`. Any answer settles the question (an error status,
   * or a document without the route, is `false`); no answer or a 5xx leaves it open, and throws
   * that error.
   */
  async offersCompleteMany(call: CallOptions = {}): Promise<boolean> {
    let doc: unknown;
    try {
      doc = await this.transport.json<unknown>({
        method: "GET",
        path: "/openapi.json",
        token: this.token,
        idempotent: true,
        ...call,
      });
    } catch (err) {
      const open =
        err instanceof ConnectionError ||
        err instanceof TimeoutError ||
        err instanceof AbortError ||
        (err instanceof ApiError && err.status >= 500);
      if (open) throw err;
      return false; // an answer all the same: an error status, or a body that is not JSON
    }
    const paths = isPlainObject(doc) ? doc.paths : undefined;
    const route = isPlainObject(paths) ? paths[COMPLETE_MANY_PATH] : undefined;
    return isPlainObject(route) && route.post !== undefined && route.post !== null;
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
  /** The heartbeat in flight, if any: one at a time per job. */
  beating: Promise<void> | undefined;
  /** The handler's progress reports (they travel on heartbeats). */
  progress: ProgressTracker;
  /** The handler's log lines. */
  logs: LogBatcher;
}

/** A success waiting for its acknowledgement (batch route) to be answered. */
interface Ack {
  held: Held;
  result: T.JsonObject;
  /** After this (ms since the epoch) a transient failure is no longer retried. */
  deadline: number;
  /** The last transient failure, reported should the acknowledgement be given up. */
  lastError: unknown;
  /** Resolves the job's report: its heartbeat stops and it stops counting as held. */
  settle: () => void;
}

function positiveInt(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max) {
    throw new RangeError(`worker option ${name} must be an integer in ${min}..${max}, not ${String(v)}`);
  }
  return v;
}

/** A batch item's 409 or 404 as the error the per-job route would have thrown. */
function itemError(answer: T.CompletionAnswer): ApiError {
  return apiErrorFor(answer.status, answer.error ?? "", `POST ${COMPLETE_MANY_PATH} (job ${answer.id})`);
}

class WorkerLoop {
  readonly done: Promise<void>;
  private readonly stopController = new AbortController();
  private readonly leaseSecs: number;
  private readonly waitSecs: number;
  private readonly concurrency: number;
  private readonly batchSize: number;
  /** Jobs whose handler finished but whose report is not settled yet, beyond which leasing waits. */
  private readonly settlingCap: number;
  private readonly onError: (error: unknown, info: WorkerErrorInfo) => void;
  private readonly waiting: Held[] = [];
  private readonly tasks = new Set<Promise<void>>();
  private running = 0;
  private settling = 0;
  private wakeUp: () => void = () => {};
  /** Successes waiting for the next flush (batch acknowledgement). */
  private readonly acks: Ack[] = [];
  private flushing = false;
  /** Whether the server offers the batch route: `undefined` until an answer to the probe settles it. */
  private batchAcks: boolean | undefined = undefined;
  private ackFailures = 0;
  private readonly heartbeatMs: number;
  private readonly workerId: string;
  private readonly workerInfo: T.WorkerInfo;
  /** Whether lease calls carry `worker_id` and `worker`: until a server refuses them (400). */
  private identify = true;
  /** Whether a lease call has succeeded (later calls leave `worker` out). */
  private introduced = false;
  /** Whether heartbeats carry progress: until a server refuses it (400). */
  private sendProgress = true;

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
    this.settlingCap = Math.max(this.batchSize, this.concurrency);
    this.heartbeatMs = Math.max(250, (this.leaseSecs * 1000) / 2);
    this.workerId = options.workerId === undefined ? defaultWorkerId() : checkWorkerId(options.workerId);
    this.workerInfo = {
      hostname: hostname().slice(0, MAX_WORKER_TEXT) || undefined, // left out when the system has none
      sdk: "typescript",
      version: SDK_VERSION,
      tasks: Object.keys(handlers).sort().slice(0, MAX_WORKER_TASKS),
    };
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

  /** Resolves at the next handler finish, report settled, or stop request. */
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
      // Lease only when a handler slot is free, nothing leased is still waiting its turn, and not
      // too many finished jobs still wait for their report to be answered.
      if (this.running >= this.concurrency || this.waiting.length > 0 || this.settling >= this.settlingCap) {
        await this.nextWake();
        continue;
      }
      let leased: T.LeaseJobsResponse;
      const identified = this.identify;
      try {
        leased = await this.worker.lease(this.queue, this.leaseOptions(), {
          signal: this.stopController.signal,
          maxRetries: 0,
        });
        failures = 0;
        if (identified) this.introduced = true;
      } catch (err) {
        if (this.stopping && err instanceof AbortError) break;
        if (identified && err instanceof BadRequestError) {
          // A server that does not know the worker fields (an upstream one): lease without them.
          this.identify = false;
          this.report(err, { phase: "lease" });
          continue;
        }
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
    // Graceful drain: every job held (running, waiting its turn, or waiting for its report to be
    // answered, buffered acknowledgements included) runs and reports.
    while (this.tasks.size > 0) await Promise.allSettled([...this.tasks]);
    if (fatal !== undefined) throw fatal;
  }

  /** What the next lease call sends: always the batch and lease, and the worker's id and description. */
  private leaseOptions(): LeaseOptions {
    const options: LeaseOptions = { maxJobs: this.batchSize, leaseSecs: this.leaseSecs, waitSecs: this.waitSecs };
    if (!this.identify) return options;
    options.workerId = this.workerId;
    if (!this.introduced) options.worker = this.workerInfo;
    return options;
  }

  /** Starts heartbeating a leased job at half the lease, from the moment it is held. */
  private hold(leased: T.LeasedJob): Held {
    const jobId = leased.job.id;
    const held: Held = {
      leased,
      controller: new AbortController(),
      lost: false,
      timer: undefined,
      beating: undefined,
      progress: new ProgressTracker(() => void this.beat(held)),
      logs: new LogBatcher({
        post: (lines) => this.worker.postLogs(leased, lines, { maxRetries: 0 }),
        onError: (err) => {
          // A job the server took back refuses its lines (409): expected, not worth a warning.
          if (!(held.lost && err instanceof ApiError)) this.report(err, { phase: "logs", jobId });
        },
      }),
    };
    held.timer = setInterval(() => void this.beat(held), this.heartbeatMs);
    return held;
  }

  /** A heartbeat, carrying the job's progress when the server does not have its latest report. One at a time. */
  private beat(held: Held): Promise<void> {
    if (held.lost) return Promise.resolve();
    if (held.beating) return held.beating;
    const beating = this.beatOnce(held).finally(() => {
      held.beating = undefined;
    });
    held.beating = beating;
    return beating;
  }

  private async beatOnce(held: Held): Promise<void> {
    const carried = this.sendProgress ? held.progress.take() : undefined;
    let ok = false;
    try {
      const answer = await this.worker.heartbeat(held.leased, this.leaseSecs, {
        timeoutMs: Math.max(1000, this.heartbeatMs),
        ...(carried ? { progress: carried.report } : {}),
      });
      ok = true;
      if (answer.status !== "running") this.lose(held, `job is ${answer.status}`);
    } catch (err) {
      if (err instanceof ConflictError || err instanceof NotFoundError) this.lose(held, "lease lost");
      else {
        if (carried && err instanceof BadRequestError) {
          // A server that does not know `progress` (an upstream one): heartbeats go without it.
          this.sendProgress = false;
        }
        this.report(err, { phase: "heartbeat", jobId: held.leased.job.id });
      }
    } finally {
      // A report newer than what this heartbeat carried (or one it could not carry) asks for the next.
      if (this.sendProgress) held.progress.settled(carried?.version ?? 0, ok);
      else held.progress.close();
    }
  }

  private lose(held: Held, why: string): void {
    if (held.lost) return;
    held.lost = true;
    held.progress.close();
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
      // The handler slot frees as soon as the handler is done; the job itself stays held (and
      // heartbeated) until its report is answered.
      let handlerDone = false;
      const finishHandler = (): void => {
        if (handlerDone) return;
        handlerDone = true;
        this.running--;
        this.settling++;
        this.dispatch();
        this.wakeUp();
      };
      const task: Promise<void> = this.execute(held, finishHandler)
        .catch((err) => this.report(err, { phase: "report", jobId: held.leased.job.id }))
        .finally(() => {
          this.release(held);
          if (handlerDone) this.settling--;
          else this.running--;
          this.tasks.delete(task);
          this.dispatch();
          this.wakeUp();
        });
      this.tasks.add(task);
    }
  }

  private async execute(held: Held, finishHandler: () => void): Promise<void> {
    if (held.lost) return; // taken back while it waited its turn
    const { job, lease_token } = held.leased;
    const handler = Object.prototype.hasOwnProperty.call(this.handlers, job.task_name)
      ? this.handlers[job.task_name]
      : undefined;
    if (handler === undefined) {
      finishHandler();
      await this.send(held, () =>
        this.worker.fail(held.leased, `no worker handler for task '${job.task_name}'`, { retryable: false }),
      );
      return;
    }
    const ctx: JobContext = {
      signal: held.controller.signal,
      job,
      leaseToken: lease_token,
      attempt: job.delivery_count,
      progress: (percent, message) => held.progress.report(percent, message),
      log: (message, level) => held.logs.append(message, level),
    };
    // The handler runs inside its span (current, so spans it starts are children), which ends with it.
    const { span, context: spanContext } = startProcessSpan(this.queue, held.leased);
    let outcome: { ok: true; result: T.JsonObject } | { ok: false; error: unknown };
    try {
      outcome = { ok: true, result: toResult(await context.with(spanContext, () => handler(job, ctx))) };
    } catch (error) {
      outcome = { ok: false, error };
      failSpan(span, messageOf(error));
    } finally {
      span.end();
    }
    finishHandler();
    await this.flushReports(held);
    if (held.lost) return; // cancelled or lease lost: report nothing
    if (outcome.ok) {
      await this.acknowledge(held, outcome.result);
    } else {
      const message = messageOf(outcome.error);
      const retryable = !isNonRetryable(outcome.error);
      await this.send(held, () => this.worker.fail(held.leased, message, { retryable }));
    }
  }

  /**
   * The handler ended: before its outcome, what it reported and is not sent yet: the buffered log
   * lines, then the latest progress (one heartbeat). Failures are passed to `onError` only.
   */
  private async flushReports(held: Held): Promise<void> {
    held.progress.close();
    await held.logs.close();
    if (held.beating) await held.beating;
    if (held.progress.pending && this.sendProgress && !held.lost) await this.beat(held);
  }

  /** When a report that is sent (or buffered) now stops being retried. */
  private reportDeadline(): number {
    return Date.now() + Math.max(this.leaseSecs * 1000, 10_000);
  }

  /**
   * Sends a report (complete or fail), keeping the heartbeat going meanwhile. A transient failure
   * (no answer, 5xx) is retried with backoff while the lease can still be held: the same report,
   * never a different one. Anything else (409: the lease is gone) is logged and dropped; the
   * server then redelivers or has already decided.
   */
  private async send(held: Held, call: () => Promise<void>, deadline = this.reportDeadline()): Promise<void> {
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
      }
    }
  }

  // --- acknowledgements ------------------------------------------------------------------------

  /**
   * Acknowledges a success; resolves once the acknowledgement is answered (or given up). Through
   * the batch route when the server offers it (buffered, see {@link WorkerLoop.flush}), else one
   * call per job.
   */
  private acknowledge(held: Held, result: T.JsonObject): Promise<void> {
    if (this.batchAcks === false) return this.send(held, () => this.worker.complete(held.leased, result));
    return new Promise<void>((settle) => {
      this.acks.push({ held, result, deadline: this.reportDeadline(), lastError: undefined, settle });
      if (!this.flushing) {
        // The flush starts once this turn of the event loop is over, so that the handlers that
        // finish in it (a lease's quick jobs) add their successes first: started at once, the
        // first success of a lease went alone and the rest in a second call.
        this.flushing = true;
        setImmediate(() => void this.flush());
      }
    });
  }

  /**
   * Sends the buffered acknowledgements until none is left, one call at a time: up to
   * {@link MAX_COMPLETIONS} per call, and whatever arrives while a call is in flight goes in the
   * next one. There is no timer: the first success of an idle worker is sent in the event loop's
   * next turn.
   */
  private async flush(): Promise<void> {
    // (`flushing` was set when this flush was scheduled; it is cleared when the buffer is empty)
    let taken: Ack[] = [];
    try {
      while (this.acks.length > 0) {
        if (this.batchAcks === undefined) this.batchAcks = await this.probe();
        if (this.batchAcks === true) {
          taken = this.acks.splice(0, MAX_COMPLETIONS);
          await this.flushBatch(taken);
          taken = [];
        } else if (this.batchAcks === false) {
          for (const ack of this.acks.splice(0)) void this.completeOne(ack);
        } else {
          // Still unknown: this flush goes one call per job, and the next one asks again.
          taken = this.acks.splice(0);
          await Promise.all(taken.map((ack) => this.completeOne(ack)));
          taken = [];
        }
      }
    } catch (err) {
      // Not expected (each step handles its own errors), but never leave a held job hanging.
      for (const ack of [...taken, ...this.acks.splice(0)]) {
        this.report(err, { phase: "report", jobId: ack.held.leased.job.id });
        ack.settle();
      }
    } finally {
      this.flushing = false;
    }
  }

  /** Reads `/openapi.json`: `undefined` when it got no answer (or a 5xx), to ask again later. */
  private async probe(): Promise<boolean | undefined> {
    try {
      return await this.worker.offersCompleteMany({ maxRetries: 0 });
    } catch (err) {
      this.report(err, { phase: "report" });
      return undefined;
    }
  }

  /** Settles, without a call, acknowledgements of jobs the server took back meanwhile. */
  private dropLost(acks: Ack[]): Ack[] {
    const live: Ack[] = [];
    for (const ack of acks) {
      if (!ack.held.lost) {
        live.push(ack);
        continue;
      }
      if (ack.lastError !== undefined) this.report(ack.lastError, { phase: "report", jobId: ack.held.leased.job.id });
      ack.settle(); // cancelled or lease lost: report nothing
    }
    return live;
  }

  /** One buffered acknowledgement through the per-job route, with the report's usual retries. */
  private async completeOne(ack: Ack): Promise<void> {
    try {
      if (this.dropLost([ack]).length === 0) return;
      const { held, result } = ack;
      await this.send(held, () => this.worker.complete(held.leased, result), ack.deadline);
    } finally {
      ack.settle();
    }
  }

  private async flushBatch(taken: Ack[]): Promise<void> {
    const batch = this.dropLost(taken);
    if (batch.length === 0) return;
    let answer: T.CompleteJobsResponse;
    try {
      answer = await this.worker.completeMany(batch.map((ack) => ({ lease: ack.held.leased, result: ack.result })));
    } catch (err) {
      if (err instanceof ApiError && (err.status === 404 || err.status === 405)) {
        // The route is not there after all (a proxy, a downgrade): one call per job from now on,
        // these included.
        this.batchAcks = false;
        for (const ack of batch) void this.completeOne(ack);
      } else if (isTransient(err)) {
        await this.retryLater(batch, err);
      } else {
        // The whole call was refused (400, 401, 403, ...): each job gets the per-job route's answer.
        await Promise.all(batch.map((ack) => this.completeOne(ack)));
      }
      return;
    }
    this.ackFailures = 0;
    const results = Array.isArray(answer?.results) ? answer.results : [];
    const again: Ack[] = [];
    let transient: unknown;
    batch.forEach((ack, i) => {
      const item = results[i];
      const jobId = ack.held.leased.job.id;
      if (item === undefined || item.id !== jobId) {
        void this.completeOne(ack); // no answer for it in the batch: ask the per-job route
        return;
      }
      if (item.status >= 200 && item.status < 300) {
        ack.settle();
        return;
      }
      const err = itemError(item);
      if (isTransient(err)) {
        transient = err;
        again.push(ack);
        return;
      }
      this.report(err, { phase: "report", jobId }); // 409 lease lost, 404 gone: logged and dropped
      ack.settle();
    });
    if (again.length > 0) await this.retryLater(again, transient);
  }

  /**
   * A transient failure (no answer, 5xx): puts the acknowledgements back at the front of the
   * buffer and waits the loop's back-off before the next flush; those whose lease can no longer be
   * held (past their deadline, or taken back) are logged and given up.
   */
  private async retryLater(acks: Ack[], err: unknown): Promise<void> {
    const delay = backoffDelay(this.ackFailures++, { baseMs: 200, capMs: 5000 });
    const keep: Ack[] = [];
    for (const ack of acks) {
      ack.lastError = err;
      if (ack.held.lost || Date.now() + delay > ack.deadline) {
        this.report(err, { phase: "report", jobId: ack.held.leased.job.id });
        ack.settle();
      } else {
        keep.push(ack);
      }
    }
    if (keep.length === 0) return;
    this.acks.unshift(...keep);
    await sleep(delay);
  }
}
