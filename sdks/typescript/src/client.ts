/** The REST client: `new QueueFlow({baseUrl, token})` and its resource groups. */

import { AbortError, TimeoutError } from "./errors.js";
import { sleep } from "./backoff.js";
import { Transport, seg, type CallOptions, type FetchLike, type RequestSpec } from "./http.js";
import type { SseEvent } from "./sse.js";
import type * as T from "./types.js";
import { SDK_VERSION } from "./version.js";
import { Worker } from "./worker.js";

export { SDK_VERSION };

export interface QueueFlowOptions {
  /** The server, e.g. `http://localhost:8000`. */
  baseUrl: string;
  /** A tenant API key (`Authorization: Bearer <token>`). */
  token: string;
  /** The worker token for `qf.worker` (the worker protocol routes). Defaults to `token`. */
  workerToken?: string;
  /** Per-request timeout in ms. Default 30000. Leases get at least their long-poll plus 10 s. */
  timeoutMs?: number;
  /**
   * Retries of idempotent calls (reads, leases, creates with an idempotency key) on network
   * errors and 502/503/504. Default 2.
   */
  maxRetries?: number;
  /** A `fetch` implementation; default the global one. */
  fetch?: FetchLike;
}

/** Options of the `waitFor` helpers. */
export interface WaitOptions {
  /** Give up after this many ms with {@link TimeoutError}. Default 60000. */
  timeoutMs?: number;
  /** Poll interval in ms. Default 500. */
  intervalMs?: number;
  /** Abort the wait ({@link AbortError}). */
  signal?: AbortSignal;
}

const TERMINAL_JOB: ReadonlySet<T.JobStatus> = new Set(["completed", "failed", "cancelled"]);
const TERMINAL_WORKFLOW: ReadonlySet<T.WorkflowStatus> = new Set([
  "completed",
  "failed",
  "partially_failed",
  "cancelled",
]);

type PostOptions = CallOptions & { idempotent?: boolean; headers?: Record<string, string> };

/** Shared plumbing of the resource groups. */
class Group {
  constructor(
    protected readonly transport: Transport,
    protected readonly token: string,
  ) {}

  protected call<R>(spec: Omit<RequestSpec, "token">): Promise<R> {
    return this.transport.json<R>({ ...spec, token: this.token });
  }

  protected getJson<R>(path: string, query?: object, options?: CallOptions): Promise<R> {
    return this.call<R>({ method: "GET", path, query, idempotent: true, ...options });
  }

  protected postJson<R>(path: string, body?: unknown, options?: PostOptions): Promise<R> {
    return this.call<R>({ method: "POST", path, body, ...options });
  }

  protected async *sse(path: string, options?: CallOptions): AsyncGenerator<SseEvent, void, undefined> {
    yield* this.transport.stream({ method: "GET", path, token: this.token, idempotent: true, ...options });
  }
}

async function poll<R>(
  fetchOnce: (options: CallOptions) => Promise<R>,
  done: (value: R) => boolean,
  what: string,
  options: WaitOptions = {},
): Promise<R> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const intervalMs = options.intervalMs ?? 500;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (options.signal?.aborted) throw new AbortError(`waiting for ${what} was aborted`);
    const value = await fetchOnce(options.signal ? { signal: options.signal } : {});
    if (done(value)) return value;
    const left = deadline - Date.now();
    if (left <= 0) throw new TimeoutError(`${what} did not finish within ${timeoutMs} ms`);
    await sleep(Math.min(intervalMs, left), options.signal);
  }
}

/** Parses the JSON data of the `status` events of a stream. */
async function* statusEvents<E>(stream: AsyncGenerator<SseEvent, void, undefined>): AsyncGenerator<E, void, undefined> {
  for await (const event of stream) {
    if (event.event !== "status") continue;
    yield JSON.parse(event.data) as E;
  }
}

/** `/api/v1/jobs`. */
export class Jobs extends Group {
  /**
   * `POST /api/v1/jobs`. With `idempotencyKey` (sent as the `Idempotency-Key` header) creating
   * again answers the first job's id, and the call is retried safely on transport errors.
   */
  create(body: T.CreateJobRequest, options: CallOptions & { idempotencyKey?: string } = {}): Promise<T.CreateJobResponse> {
    const { idempotencyKey, ...rest } = options;
    return this.postJson<T.CreateJobResponse>("/api/v1/jobs", body, {
      ...rest,
      ...(idempotencyKey ? { headers: { "Idempotency-Key": idempotencyKey }, idempotent: true } : {}),
    });
  }

  /** `POST /api/v1/jobs/batch`: many jobs in one transaction. */
  createBatch(jobs: T.CreateJobRequest[], options?: CallOptions): Promise<T.CreateBatchJobsResponse> {
    const body: T.CreateBatchJobsRequest = { jobs };
    return this.postJson<T.CreateBatchJobsResponse>("/api/v1/jobs/batch", body, options);
  }

  /** `GET /api/v1/jobs`: one page. Follow `next_cursor` with `{cursor}`, or use {@link Jobs.iterate}. */
  list(params: T.ListJobsParams = {}, options?: CallOptions): Promise<T.ListJobsResponse> {
    return this.getJson<T.ListJobsResponse>("/api/v1/jobs", params, options);
  }

  /** Every matching job, page after page (cursor pagination). */
  async *iterate(params: Omit<T.ListJobsParams, "cursor" | "offset"> = {}, options?: CallOptions): AsyncGenerator<T.Job> {
    let cursor: string | undefined;
    do {
      const page = await this.list({ ...params, ...(cursor ? { cursor } : {}) }, options);
      yield* page.jobs;
      cursor = page.has_more ? page.next_cursor : undefined;
    } while (cursor);
  }

  /** `GET /api/v1/jobs/{id}`. */
  get(id: string, options?: CallOptions): Promise<T.Job> {
    return this.getJson<T.Job>(`/api/v1/jobs/${seg(id)}`, undefined, options);
  }

  /** `POST /api/v1/jobs/{id}/cancel`. A job already finished is a {@link ConflictError}. */
  async cancel(id: string, options?: CallOptions): Promise<void> {
    await this.postJson<void>(`/api/v1/jobs/${seg(id)}/cancel`, undefined, options);
  }

  /** `POST /api/v1/jobs/cancel`: cancel this tenant's jobs matching a filter. */
  cancelMany(filter: T.CancelJobsRequest = {}, options?: CallOptions): Promise<T.CancelJobsResponse> {
    return this.postJson<T.CancelJobsResponse>("/api/v1/jobs/cancel", filter, options);
  }

  /**
   * `GET /api/v1/jobs/{id}/events`: the job on every status change, streamed (server-sent
   * events) until it reaches a terminal status. Break out of the loop, or abort `signal`, to stop.
   */
  events(id: string, options?: CallOptions): AsyncGenerator<T.Job, void, undefined> {
    return statusEvents<T.Job>(this.sse(`/api/v1/jobs/${seg(id)}/events`, options));
  }

  /** Polls the job until it is completed, failed or cancelled. */
  waitFor(id: string, options?: WaitOptions): Promise<T.Job> {
    return poll((o) => this.get(id, o), (job) => TERMINAL_JOB.has(job.status), `job ${id}`, options);
  }

  /**
   * `GET /api/v1/jobs/{id}/logs` (an extension): one page of the lines its workers posted, oldest
   * first, after `seq` `after` (default 0). Follow `has_more` with `after` set to the page's last
   * `seq`, or use {@link Jobs.iterateLogs}.
   */
  logs(id: string, params: T.JobLogsParams = {}, options?: CallOptions): Promise<T.JobLogsResponse> {
    return this.getJson<T.JobLogsResponse>(`/api/v1/jobs/${seg(id)}/logs`, params, options);
  }

  /** Every line of the job's log after `after`, page after page (`limit` lines a call). */
  async *iterateLogs(id: string, params: T.JobLogsParams = {}, options?: CallOptions): AsyncGenerator<T.LogLine> {
    let after = params.after ?? 0;
    for (;;) {
      const page = await this.logs(id, { ...params, after }, options);
      yield* page.lines;
      const last = page.lines.at(-1);
      if (!page.has_more || last === undefined) return;
      after = last.seq;
    }
  }

  /** `GET /api/v1/jobs/{id}/attempts` (an extension): every attempt (lease) of the job, in order. */
  attempts(id: string, options?: CallOptions): Promise<T.JobAttemptsResponse> {
    return this.getJson<T.JobAttemptsResponse>(`/api/v1/jobs/${seg(id)}/attempts`, undefined, options);
  }
}

/** `/api/v1/workflows`. */
export class Workflows extends Group {
  /** `POST /api/v1/workflows`. An invalid DAG (cycle, unknown dependency, ...) is a {@link BadRequestError}. */
  create(body: T.CreateWorkflowRequest, options?: CallOptions): Promise<T.CreateWorkflowResponse> {
    return this.postJson<T.CreateWorkflowResponse>("/api/v1/workflows", body, options);
  }

  /** `GET /api/v1/workflows`. */
  list(params: T.ListWorkflowsParams = {}, options?: CallOptions): Promise<T.ListWorkflowsResponse> {
    return this.getJson<T.ListWorkflowsResponse>("/api/v1/workflows", params, options);
  }

  /** `GET /api/v1/workflows/{id}`. */
  get(id: string, options?: CallOptions): Promise<T.Workflow> {
    return this.getJson<T.Workflow>(`/api/v1/workflows/${seg(id)}`, undefined, options);
  }

  /** `GET /api/v1/workflows/{id}/steps`: live state of every step, in declaration order. */
  steps(id: string, options?: CallOptions): Promise<T.WorkflowStepStatesResponse> {
    return this.getJson<T.WorkflowStepStatesResponse>(`/api/v1/workflows/${seg(id)}/steps`, undefined, options);
  }

  /** `GET /api/v1/workflows/{id}/diagram`: a Mermaid diagram of the DAG. */
  diagram(id: string, options?: CallOptions): Promise<T.WorkflowDiagramResponse> {
    return this.getJson<T.WorkflowDiagramResponse>(`/api/v1/workflows/${seg(id)}/diagram`, undefined, options);
  }

  /** `POST /api/v1/workflows/{id}/cancel`. */
  async cancel(id: string, options?: CallOptions): Promise<void> {
    await this.postJson<void>(`/api/v1/workflows/${seg(id)}/cancel`, undefined, options);
  }

  /** `POST /api/v1/workflows/{id}/retry`: re-run what did not complete (failed, partially_failed or cancelled). */
  async retry(id: string, options?: CallOptions): Promise<void> {
    await this.postJson<void>(`/api/v1/workflows/${seg(id)}/retry`, undefined, options);
  }

  /** `GET /api/v1/workflows/{id}/events`: streamed workflow and step states until terminal. */
  events(id: string, options?: CallOptions): AsyncGenerator<T.WorkflowEvent, void, undefined> {
    return statusEvents<T.WorkflowEvent>(this.sse(`/api/v1/workflows/${seg(id)}/events`, options));
  }

  /** Polls the workflow until it reaches a terminal status. */
  waitFor(id: string, options?: WaitOptions): Promise<T.Workflow> {
    return poll((o) => this.get(id, o), (wf) => TERMINAL_WORKFLOW.has(wf.status), `workflow ${id}`, options);
  }
}

/** `/api/v1/events`: the events that wait-for-event workflow steps wait for (an extension). */
export class Events extends Group {
  /**
   * `POST /api/v1/events`: every step of the tenant waiting for `key` completes with `payload`
   * (`delivered` says how many); the event is kept for steps that start waiting later. Not
   * retried: each call is a new event.
   */
  send(body: T.PostEventRequest, options?: CallOptions): Promise<T.PostEventResponse> {
    return this.postJson<T.PostEventResponse>("/api/v1/events", body, options);
  }

  /** `GET /api/v1/events`: the tenant's kept events, newest first (`key`: one key's; `limit` 1 to 100). */
  list(params: T.ListEventsParams = {}, options?: CallOptions): Promise<T.ListEventsResponse> {
    return this.getJson<T.ListEventsResponse>("/api/v1/events", params, options);
  }
}

/** `/api/v1/cron`. */
export class Cron extends Group {
  /**
   * `POST /api/v1/cron`: a task schedule (`task_name`) or, an extension, a workflow schedule
   * (`workflow`, e.g. `{ name, cron_expr, workflow: wf("etl").step(...).build() }`).
   */
  create(body: T.CreateCronRequest, options?: CallOptions): Promise<T.CreateCronResponse> {
    return this.postJson<T.CreateCronResponse>("/api/v1/cron", body, options);
  }

  list(params: T.ListCronsParams = {}, options?: CallOptions): Promise<T.ListCronsResponse> {
    return this.getJson<T.ListCronsResponse>("/api/v1/cron", params, options);
  }

  get(id: string, options?: CallOptions): Promise<T.CronSchedule> {
    return this.getJson<T.CronSchedule>(`/api/v1/cron/${seg(id)}`, undefined, options);
  }

  /** `DELETE /api/v1/cron/{id}` (jobs it already enqueued stay). */
  async delete(id: string, options?: CallOptions): Promise<void> {
    await this.call<void>({ method: "DELETE", path: `/api/v1/cron/${seg(id)}`, ...options });
  }

  async pause(id: string, options?: CallOptions): Promise<void> {
    await this.postJson<void>(`/api/v1/cron/${seg(id)}/pause`, undefined, options);
  }

  /** Resumes from the next future occurrence. */
  async resume(id: string, options?: CallOptions): Promise<void> {
    await this.postJson<void>(`/api/v1/cron/${seg(id)}/resume`, undefined, options);
  }
}

/** `/api/v1/worker-keys`: keys this tenant mints for its own workers (a `workerToken` for its jobs only). */
export class WorkerKeys extends Group {
  /** `POST /api/v1/worker-keys`: the answer's `token` is shown only here. */
  create(body: T.CreateWorkerKeyRequest, options?: CallOptions): Promise<T.CreateWorkerKeyResponse> {
    return this.postJson<T.CreateWorkerKeyResponse>("/api/v1/worker-keys", body, options);
  }

  /** `GET /api/v1/worker-keys`: without tokens. */
  list(options?: CallOptions): Promise<T.ListWorkerKeysResponse> {
    return this.getJson<T.ListWorkerKeysResponse>("/api/v1/worker-keys", undefined, options);
  }

  /** `DELETE /api/v1/worker-keys/{id}`: revokes the key. */
  async delete(id: string, options?: CallOptions): Promise<void> {
    await this.call<void>({ method: "DELETE", path: `/api/v1/worker-keys/${seg(id)}`, ...options });
  }
}

/** `/api/v1/limits`: flow-control policies of this tenant's limit keys (a job names its keys in `config.limits`). */
export class Limits extends Group {
  /**
   * `PUT /api/v1/limits/{key}`: sets (replaces) the key's policy; a key ending in `*` is a wildcard.
   * Retried like a read: sending the same whole policy twice leaves the same policy.
   */
  put(key: string, body: T.PutLimitRequest, options?: CallOptions): Promise<T.LimitPolicy> {
    const path = `/api/v1/limits/${seg(key)}`;
    return this.call<T.LimitPolicy>({ method: "PUT", path, body, idempotent: true, ...options });
  }

  /** `GET /api/v1/limits/{key}`: the key's own policy (a `NotFoundError` when it has none). */
  get(key: string, options?: CallOptions): Promise<T.LimitPolicy> {
    return this.getJson<T.LimitPolicy>(`/api/v1/limits/${seg(key)}`, undefined, options);
  }

  /** `GET /api/v1/limits`: every policy of the tenant, with its live figures. */
  list(options?: CallOptions): Promise<T.LimitsResponse> {
    return this.getJson<T.LimitsResponse>("/api/v1/limits", undefined, options);
  }

  /** `DELETE /api/v1/limits/{key}`: a `NotFoundError` when there was none. */
  async delete(key: string, options?: CallOptions): Promise<void> {
    await this.call<void>({ method: "DELETE", path: `/api/v1/limits/${seg(key)}`, ...options });
  }
}

/** `/api/v1/dlq`: dead letters. */
export class DeadLetters extends Group {
  list(params: T.ListDeadLettersParams = {}, options?: CallOptions): Promise<T.ListDeadLettersResponse> {
    return this.getJson<T.ListDeadLettersResponse>("/api/v1/dlq", params, options);
  }

  get(id: number | string, options?: CallOptions): Promise<T.DeadLetter> {
    return this.getJson<T.DeadLetter>(`/api/v1/dlq/${seg(id)}`, undefined, options);
  }

  /** `POST /api/v1/dlq/{id}/replay`: the dead job again, as a fresh job. */
  replay(id: number | string, options?: CallOptions): Promise<T.ReplayDeadLetterResponse> {
    return this.postJson<T.ReplayDeadLetterResponse>(`/api/v1/dlq/${seg(id)}/replay`, undefined, options);
  }

  /** `POST /api/v1/dlq/replay`: replay every dead letter matching a filter. */
  replayMany(filter: T.ReplayDeadLettersRequest = {}, options?: CallOptions): Promise<T.ReplayDeadLettersResponse> {
    return this.postJson<T.ReplayDeadLettersResponse>("/api/v1/dlq/replay", filter, options);
  }
}

/** `/api/v1/queues`: the caller's backlog per queue, and pausing its claims. */
export class Queues extends Group {
  list(options?: CallOptions): Promise<T.QueuesResponse> {
    return this.getJson<T.QueuesResponse>("/api/v1/queues", undefined, options);
  }

  pause(queue: string, options?: CallOptions): Promise<T.QueueControlResponse> {
    return this.postJson<T.QueueControlResponse>(`/api/v1/queues/${seg(queue)}/pause`, undefined, options);
  }

  resume(queue: string, options?: CallOptions): Promise<T.QueueControlResponse> {
    return this.postJson<T.QueueControlResponse>(`/api/v1/queues/${seg(queue)}/resume`, undefined, options);
  }
}

/** Stats, tasks, identity, and the unauthenticated health probes. */
export class System extends Group {
  /** `GET /api/v1/stats`: durable counters for the tenant. */
  stats(options?: CallOptions): Promise<T.StatsSnapshot> {
    return this.getJson<T.StatsSnapshot>("/api/v1/stats", undefined, options);
  }

  /** `GET /api/v1/tasks`: tasks that live in-process workers handle. */
  tasks(options?: CallOptions): Promise<T.TasksResponse> {
    return this.getJson<T.TasksResponse>("/api/v1/tasks", undefined, options);
  }

  /**
   * `GET /api/v1/workers` (an extension): the workers that leased this tenant's jobs (or hold its
   * worker keys), most recently seen first.
   */
  workers(options?: CallOptions): Promise<T.WorkersResponse> {
    return this.getJson<T.WorkersResponse>("/api/v1/workers", undefined, options);
  }

  /** `GET /api/v1/whoami`: the caller's tenant and access. */
  whoami(options?: CallOptions): Promise<T.WhoAmIResponse> {
    return this.getJson<T.WhoAmIResponse>("/api/v1/whoami", undefined, options);
  }

  /** `GET /health`: liveness (the database answers). */
  health(options?: CallOptions): Promise<T.HealthStatus> {
    return this.getJson<T.HealthStatus>("/health", undefined, options);
  }

  /** `GET /ready`: readiness. A draining server answers 503 ({@link ApiError}). */
  ready(options?: CallOptions): Promise<T.ReadyStatus> {
    return this.getJson<T.ReadyStatus>("/ready", undefined, { maxRetries: 0, ...options });
  }
}

/**
 * The QueueFlow client.
 *
 * ```ts
 * const qf = new QueueFlow({ baseUrl: "http://localhost:8000", token: process.env.QF_TOKEN! });
 * const { job_id } = await qf.jobs.create({ task_name: "send-email", payload: { to: "a@b.c" } });
 * const job = await qf.jobs.waitFor(job_id);
 * ```
 */
export class QueueFlow {
  readonly jobs: Jobs;
  readonly workflows: Workflows;
  /** Events for wait-for-event workflow steps. */
  readonly events: Events;
  readonly cron: Cron;
  readonly dlq: DeadLetters;
  readonly queues: Queues;
  readonly system: System;
  readonly workerKeys: WorkerKeys;
  readonly limits: Limits;
  /** The worker protocol (lease, heartbeat, complete, fail) and the worker loop, on the worker token. */
  readonly worker: Worker;

  constructor(options: QueueFlowOptions) {
    if (!options || !options.baseUrl) throw new TypeError("QueueFlow: baseUrl is required");
    if (!options.token) throw new TypeError("QueueFlow: token is required");
    const fetchImpl = options.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (!fetchImpl) throw new TypeError("QueueFlow: no global fetch; pass options.fetch (Node 18 or newer has one)");
    const transport = new Transport({
      baseUrl: options.baseUrl,
      timeoutMs: options.timeoutMs ?? 30_000,
      maxRetries: options.maxRetries ?? 2,
      fetch: fetchImpl,
      userAgent: `unofficial-queueflow-client-typescript/${SDK_VERSION}`,
    });
    this.jobs = new Jobs(transport, options.token);
    this.workflows = new Workflows(transport, options.token);
    this.events = new Events(transport, options.token);
    this.cron = new Cron(transport, options.token);
    this.dlq = new DeadLetters(transport, options.token);
    this.queues = new Queues(transport, options.token);
    this.system = new System(transport, options.token);
    this.workerKeys = new WorkerKeys(transport, options.token);
    this.limits = new Limits(transport, options.token);
    this.worker = new Worker(transport, options.workerToken ?? options.token);
  }

  /** Shortcut for `qf.system.stats()`. */
  stats(options?: CallOptions): Promise<T.StatsSnapshot> {
    return this.system.stats(options);
  }

  /** Shortcut for `qf.system.tasks()`. */
  tasks(options?: CallOptions): Promise<T.TasksResponse> {
    return this.system.tasks(options);
  }

  /** Shortcut for `qf.system.whoami()`. */
  whoami(options?: CallOptions): Promise<T.WhoAmIResponse> {
    return this.system.whoami(options);
  }

  /** Shortcut for `qf.system.health()`. */
  health(options?: CallOptions): Promise<T.HealthStatus> {
    return this.system.health(options);
  }

  /** Shortcut for `qf.system.ready()`. */
  ready(options?: CallOptions): Promise<T.ReadyStatus> {
    return this.system.ready(options);
  }
}
