/**
 * Wire types: the request and response bodies of the QueueFlow REST API, field for field as the
 * server sends and accepts them (snake_case). Timestamps are RFC 3339 strings.
 */

export type JsonObject = Record<string, unknown>;

export type JobStatus = "pending" | "running" | "completed" | "failed" | "retrying" | "cancelled";
export type RetryBackoff = "fixed" | "linear" | "exponential";
export type StepStatus = "pending" | "running" | "completed" | "failed" | "cancelled" | "skipped";
export type WorkflowStatus = "created" | "running" | "completed" | "failed" | "partially_failed" | "cancelled";
export type ConditionOp = "eq" | "ne" | "gt" | "gte" | "lt" | "lte" | "exists" | "contains" | "in";

// --- configuration ---------------------------------------------------------------------------

/** What a create does when its unique key is held: see {@link UniquePolicy}. */
export type UniqueConflict = "skip" | "replace";

/**
 * A job's `config.unique` (an extension): within `window_secs` (1 to 31536000) of the job accepted
 * with `key` (1 to 255 bytes, no control characters; per tenant), another create with the key
 * inserts nothing. `skip` (the server's default when `on_conflict` is left out) answers the
 * holder's id; `replace` gives a holder that has not started the newcomer's payload and schedule
 * (answering its id), and enqueues the newcomer when the holder has started.
 */
export interface UniquePolicy {
  key: string;
  window_secs: number;
  on_conflict?: UniqueConflict;
}

/** Per-job execution policy on create; every field optional. */
export interface JobConfigRequest {
  priority?: number;
  max_retries?: number;
  /** Seconds. */
  timeout?: number;
  queue?: string;
  retry_backoff?: RetryBackoff;
  retry_delay_secs?: number;
  retry_max_delay_secs?: number;
  jitter_factor?: number;
  /** Flow-control keys (up to 4): the job starts only when each key's policy has room. */
  limits?: string[];
  /** Unique over a window (jobs created directly only: a workflow step or a cron schedule does not take one). */
  unique?: UniquePolicy;
}

/** The stored execution policy (stored field names), as on workflow steps and cron schedules. */
export interface JobConfig {
  priority?: number;
  max_retries?: number;
  timeout_secs?: number;
  retry_backoff?: RetryBackoff;
  retry_delay_secs?: number;
  retry_max_delay_secs?: number;
  jitter_factor?: number;
  /** Flow-control keys (up to 4); absent when the job has none. */
  limits?: string[];
}

/**
 * A job's config as the server reports it: the stored fields as they come, with the extensions
 * typed. `unique` is there (with all three fields) only when the job has a unique policy.
 */
export interface JobConfigResponse extends JsonObject {
  unique?: UniquePolicy;
}

// --- jobs ------------------------------------------------------------------------------------

export interface CreateJobRequest {
  task_name: string;
  payload?: JsonObject;
  config?: JobConfigRequest;
  /** RFC 3339; the job is not leased before it. */
  run_at?: string;
  metadata?: JsonObject;
  /** In a batch, the per-item idempotency key (single creates use the `Idempotency-Key` header). */
  idempotency_key?: string;
}

export interface CreateJobResponse {
  job_id: string;
}

export interface CreateBatchJobsRequest {
  jobs: CreateJobRequest[];
}

export interface CreateBatchJobsResponse {
  job_ids: string[];
  count: number;
}

export interface Job {
  id: string;
  queue_name: string;
  task_name: string;
  payload: JsonObject;
  config: JobConfigResponse;
  status: JobStatus;
  retry_count: number;
  delivery_count: number;
  created_at: string;
  scheduled_at: string;
  metadata: JsonObject;
  started_at?: string;
  completed_at?: string;
  next_retry_at?: string;
  error_message?: string;
  result?: JsonObject;
  idempotency_key?: string;
  tenant_id?: string;
  workflow_id?: string;
  workflow_step_id?: string;
  /** How far the job got, as its worker last reported it (an extension); absent when it never did. */
  progress?: Progress;
}

/** Parameters every list route shares. */
export interface ListParams {
  /** 1 to 100 (the server clamps); default 20. */
  limit?: number;
  offset?: number;
  /** The `next_cursor` of the previous page (keyset pagination). */
  cursor?: string;
  /** `"created_at DESC"` (default) or `"created_at ASC"`. */
  order_by?: "created_at DESC" | "created_at ASC";
  include_total?: boolean;
  /** RFC 3339. */
  created_after?: string;
  /** RFC 3339. */
  created_before?: string;
}

export interface ListJobsParams extends ListParams {
  status?: JobStatus;
  queue?: string;
  task_name?: string;
}

export interface Page {
  limit: number;
  offset: number;
  has_more: boolean;
  total?: number;
  next_cursor?: string;
}

export interface ListJobsResponse extends Page {
  jobs: Job[];
}

export interface CancelJobsRequest {
  queue?: string;
  task_name?: string;
  status?: "pending" | "retrying" | "running";
  created_after?: string;
  created_before?: string;
  limit?: number;
}

export interface CancelJobsResponse {
  cancelled: number;
}

// --- worker protocol -------------------------------------------------------------------------

export interface LeaseJobsRequest {
  /** 1 to 100; default 1. */
  max_jobs?: number;
  /** 1 to 3600; default 30. */
  lease_secs?: number;
  /** 0 to 30 (long-poll); default 0. */
  wait_secs?: number;
  /**
   * An extension: the worker's id (1 to 128 visible ASCII characters, no space), recorded on the
   * jobs this call leases (their attempts' `worker_id`) and in the worker registry.
   */
  worker_id?: string;
  /** An extension: what the worker says of itself; left out, the server keeps what it said last. */
  worker?: WorkerInfo;
}

export interface LeasedJob {
  job: Job;
  lease_token: string;
  /**
   * An extension: the W3C `traceparent` the job was created in (`00-<trace id>-<span id>-<flags>`);
   * absent when the job has none. The worker loop's span for the job is its child.
   */
  traceparent?: string;
  /** An extension: the W3C `tracestate` that came with `traceparent`, when there was one. */
  tracestate?: string;
}

export interface LeaseJobsResponse {
  jobs: LeasedJob[];
}

export interface HeartbeatRequest {
  lease_token: string;
  extend_secs: number;
  /** An extension: how far the job got; shown on the job (with the server's time) until its next claim. */
  progress?: ProgressReport;
}

export interface HeartbeatResponse {
  status: JobStatus;
}

export interface CompleteJobRequest {
  lease_token: string;
  result?: JsonObject;
}

/** One job of a batch acknowledgement (`POST /api/v1/jobs/complete`). */
export interface CompletionItem {
  id: string;
  lease_token: string;
  result?: JsonObject;
}

/** `POST /api/v1/jobs/complete`: 1 to 100 completions in one call (a server extension). */
export interface CompleteJobsRequest {
  jobs: CompletionItem[];
}

export type CompletionOutcome = "completed" | "conflict" | "not_found";

/**
 * The answer for one item, in request order: `status` is what `POST /api/v1/jobs/{id}/complete`
 * would have answered for it (204 completed, 409 lease lost, 404 no such job), `error` its error
 * message.
 */
export interface CompletionAnswer {
  id: string;
  outcome: CompletionOutcome;
  status: number;
  error?: string;
}

export interface CompleteJobsResponse {
  results: CompletionAnswer[];
}

export interface FailJobRequest {
  lease_token: string;
  error: string;
  retryable?: boolean;
}

// --- visibility: progress, job logs, attempts, workers (extensions, docs/visibility.md) -------

/** The most characters of a progress message. */
export const MAX_PROGRESS_MESSAGE = 1024;
/** The most lines of one `POST /api/v1/jobs/{id}/logs` call. */
export const MAX_LOG_LINES = 100;
/** The most bytes (UTF-8) of the messages of one `POST /api/v1/jobs/{id}/logs` call, and of one message. */
export const MAX_LOG_CALL_BYTES = 64 * 1024;
/** The most characters of a log level (letters only). */
export const MAX_LOG_LEVEL = 16;
/** The most characters of a worker id (visible ASCII, no space). */
export const MAX_WORKER_ID = 128;

/** A heartbeat's progress report: `percent` 0 to 100, `message` at most 1,024 characters. */
export interface ProgressReport {
  percent: number;
  message?: string;
}

/** A job's progress as the server shows it: the last report, with the server's time of it. */
export interface Progress extends ProgressReport {
  updated_at?: string;
}

/**
 * One line of `POST /api/v1/jobs/{id}/logs`: `level` 1 to 16 letters (any name; the worker loop's
 * default is `info`), `ts` an RFC 3339 instant (default: when the server stores the line).
 */
export interface LogLineRequest {
  message: string;
  level?: string;
  ts?: string;
}

/** The body of `POST /api/v1/jobs/{id}/logs` (worker routes): at most 100 lines and 64 KiB of messages. */
export interface PostJobLogsRequest {
  lease_token: string;
  lines: LogLineRequest[];
}

/** Lines stored, lines of this call dropped past the job's cap, and the job's last `seq`. */
export interface PostJobLogsResponse {
  stored: number;
  dropped: number;
  last_seq: number;
}

/** A stored line: `seq` counts from 1 per job across its attempts; `attempt` is the attempt that was running. */
export interface LogLine {
  seq: number;
  attempt: number;
  ts: string;
  message: string;
  level?: string;
}

export interface JobLogsParams {
  /** Lines after this `seq` (default 0: from the first). */
  after?: number;
  /** 1 to 1000 (the server clamps); default 100. */
  limit?: number;
}

/**
 * A page of a job's lines, oldest first. `has_more`: ask again with `after` set to the page's last
 * `seq`; `dropped` counts the job's lines refused past its cap; `last_seq` is its newest line.
 */
export interface JobLogsResponse {
  lines: LogLine[];
  last_seq: number;
  dropped: number;
  has_more: boolean;
}

/** How an attempt ended (`running`: it has not). */
export type AttemptOutcome = "running" | "completed" | "failed" | "retry" | "lease_expired" | "cancelled" | "released";

/**
 * One lease of a job: `attempt` is the job's `delivery_count` when it began, `worker_id` the lease
 * request's (absent when it named none).
 */
export interface JobAttempt {
  attempt: number;
  outcome: AttemptOutcome;
  worker_id?: string;
  started_at?: string;
  ended_at?: string;
  duration_secs?: number;
  error_message?: string;
}

export interface JobAttemptsResponse {
  attempts: JobAttempt[];
}

/** What a worker says of itself on lease (every field optional; text at most 255 characters, at most 256 tasks). */
export interface WorkerInfo {
  hostname?: string;
  sdk?: string;
  version?: string;
  tasks?: string[];
}

/**
 * A worker as `GET /api/v1/workers` lists it (the server's `Worker`): the queues it leased this
 * tenant's jobs from, how many of them it holds, when it was first and last seen, whether it is
 * live (seen within the last 2 minutes) and what it reported.
 */
export interface RegisteredWorker {
  worker_id: string;
  queues: string[];
  in_flight: number;
  first_seen_at: string;
  last_seen_at: string;
  live: boolean;
  info?: WorkerInfo;
}

export interface WorkersResponse {
  /** Most recently seen first. */
  workers: RegisteredWorker[];
}

// --- dead letters ----------------------------------------------------------------------------

export interface DeadLetter {
  id: number;
  job_id: string;
  reason: string;
  created_at: string;
  error_message?: string;
  queue_name?: string;
  task_name?: string;
  replayed_at?: string;
  replay_job_id?: string;
  tenant_id?: string;
}

export interface ListDeadLettersParams extends ListParams {
  queue?: string;
  task_name?: string;
  /** true: only replayed ones; false: only those not replayed yet. */
  replayed?: boolean;
}

export interface ListDeadLettersResponse extends Page {
  dead_letters: DeadLetter[];
}

export interface ReplayDeadLetterResponse {
  job_id: string;
}

export interface ReplayDeadLettersRequest {
  queue?: string;
  task_name?: string;
  created_after?: string;
  created_before?: string;
  limit?: number;
}

export interface ReplayedDeadLetter {
  dead_letter_id: number;
  job_id?: string;
  error?: string;
}

export interface ReplayDeadLettersResponse {
  replayed: number;
  results: ReplayedDeadLetter[];
}

// --- system ----------------------------------------------------------------------------------

export interface StatsSnapshot {
  jobs_created: number;
  jobs_completed: number;
  jobs_failed: number;
  jobs_retried: number;
  jobs_dead_lettered: number;
  workflows_created: number;
  workflows_completed: number;
  workflows_failed: number;
}

export interface TasksResponse {
  tasks: string[];
}

export interface WhoAmIResponse {
  tenant: string;
  access: "read_write" | "read_only";
}

export interface HealthStatus {
  status: string;
  timestamp: string;
  version: string;
}

export interface ReadyStatus {
  status: string;
}

// --- workflows -------------------------------------------------------------------------------

/** A leaf (`path` compared with `value` by `op`) or a combination (`all`, `any`, `not`). */
export interface StepCondition {
  op?: ConditionOp;
  path?: string;
  value?: unknown;
  all?: StepCondition[];
  any?: StepCondition[];
  not?: StepCondition;
}

export interface FanOut {
  path: string;
  item_key?: string;
  max_items?: number;
}

/** The longest `sleep_secs` and `timeout_secs` (a year). */
export const MAX_SLEEP_SECS = 31_536_000;
/** The longest event key, in UTF-8 bytes (a wait step's key template too). */
export const MAX_EVENT_KEY_BYTES = 256;

/**
 * A wait-for-event step's event: `key` (1 to 256 bytes) may hold `{{context.path}}` placeholders,
 * which the server resolves from the workflow context when the step starts.
 */
export interface WaitForEvent {
  key: string;
}

/**
 * One step: a task (`task_name`), a sub-workflow (`workflow`), or, as extensions, a sleep
 * (`sleep_secs` or `sleep_until`) or a wait for an event (`wait_for_event`, optionally with
 * `timeout_secs`). The builder's `sleep`, `sleepUntil` and `waitForEvent` declare the last two.
 */
export interface WorkflowStep {
  name: string;
  task_name?: string;
  depends_on?: string[];
  payload?: JsonObject;
  config?: JobConfig;
  on_failure?: "halt" | "skip" | "continue";
  on_success?: "continue";
  metadata?: JsonObject;
  queue?: string;
  when?: StepCondition;
  fan_out?: FanOut;
  /** A child workflow run as this step. */
  workflow?: CreateWorkflowRequest;
  /** A sleep of 1 to 31536000 seconds; it runs no job and completes with `{slept_until}`. */
  sleep_secs?: number;
  /** A sleep until this RFC 3339 instant (completes at once when it has passed). */
  sleep_until?: string;
  /** A wait for an event (`qf.events.send`); the step completes with the event's payload. */
  wait_for_event?: WaitForEvent;
  /** A wait's time-out in seconds (1 to 31536000): it then fails with `event_timeout`. */
  timeout_secs?: number;
}

export interface CreateWorkflowRequest {
  name: string;
  steps: WorkflowStep[];
  context?: JsonObject;
  metadata?: JsonObject;
  timeout_secs?: number;
}

export interface CreateWorkflowResponse {
  workflow_id: string;
}

export interface Workflow {
  id: string;
  name: string;
  status: WorkflowStatus;
  steps: WorkflowStep[];
  created_at: string;
  context: JsonObject;
  metadata: JsonObject;
  retry_count: number;
  started_at?: string;
  completed_at?: string;
  tenant_id?: string;
  timeout_secs?: number;
  deadline_at?: string;
  error_message?: string;
  parent_workflow_id?: string;
  parent_step_name?: string;
}

export interface ListWorkflowsParams extends ListParams {
  status?: WorkflowStatus;
}

export interface ListWorkflowsResponse extends Page {
  workflows: Workflow[];
}

export interface FanOutProgress {
  total: number;
  completed: number;
  failed: number;
}

export interface WorkflowStepState {
  name: string;
  status: StepStatus;
  job_id?: string;
  error?: string;
  started_at?: string;
  completed_at?: string;
  child_workflow_id?: string;
  fan_out?: FanOutProgress;
  /** While a sleep, or a wait with a time-out, runs: when it wakes (RFC 3339). */
  wake_at?: string;
  /** While a wait-for-event step waits: the key it waits for, its placeholders resolved. */
  event_key?: string;
}

export interface WorkflowStepStatesResponse {
  steps: WorkflowStepState[];
}

export interface WorkflowDiagramResponse {
  format: string;
  diagram: string;
}

/** The data of a workflow SSE `status` event. */
export interface WorkflowEvent {
  workflow_id: string;
  status: WorkflowStatus;
  steps: WorkflowStepState[];
  error_message?: string;
}

// --- events (what wait-for-event steps wait for) ---------------------------------------------

/** The body of `POST /api/v1/events`: `key` 1 to 256 bytes; `payload` absent is `{}`. */
export interface PostEventRequest {
  key: string;
  payload?: JsonObject;
}

export interface PostEventResponse {
  event_id: string;
  /** How many waiting steps the event completed when it arrived. */
  delivered: number;
}

/**
 * A kept event, as `GET /api/v1/events` lists it (the server's `Event`; named so as not to shadow
 * the global `Event`). It is kept until `expires_at` for steps that start waiting later.
 */
export interface KeptEvent {
  event_id: string;
  key: string;
  payload: JsonObject;
  /** How many waiting steps it completed when it arrived. */
  delivered: number;
  created_at: string;
  expires_at: string;
}

export interface ListEventsParams {
  /** Only this key's events. */
  key?: string;
  /** 1 to 100 (the server clamps); default 50. */
  limit?: number;
}

export interface ListEventsResponse {
  /** Newest first. */
  events: KeptEvent[];
}

// --- queues ----------------------------------------------------------------------------------

export interface QueueStats {
  queue: string;
  pending: number;
  scheduled: number;
  running: number;
  paused: boolean;
  oldest_pending_age_secs?: number;
}

export interface QueuesResponse {
  queues: QueueStats[];
}

export interface QueueControlResponse {
  queue: string;
  paused: boolean;
  pending: number;
  running: number;
}

// --- cron ------------------------------------------------------------------------------------

/** What every schedule takes, whether it enqueues a task or starts a workflow. */
export interface CronScheduleFields {
  name: string;
  cron_expr: string;
  /**
   * An extension: the IANA time zone (e.g. `"Europe/Berlin"`, 1 to 64 characters) whose wall clock
   * the expression is read on; left out, it is read in UTC. An unknown name is a 400.
   */
  timezone?: string;
}

/** A schedule that enqueues a job of `task_name` at each occurrence. */
export interface TaskCronRequest extends CronScheduleFields {
  task_name: string;
  payload?: JsonObject;
  queue?: string;
  config?: JobConfig;
  workflow?: never;
}

/**
 * A schedule that starts a workflow at each occurrence (an extension), named
 * `<name>@<occurrence>` (`nightly@2026-12-04T02:00:00Z`): `workflow` is a definition as
 * `qf.workflows.create` takes it (e.g. `wf("etl")...build()`); its steps carry their own payload,
 * queue and config, so the schedule has none.
 */
export interface WorkflowCronRequest extends CronScheduleFields {
  workflow: CreateWorkflowRequest;
  task_name?: never;
  payload?: never;
  queue?: never;
  config?: never;
}

/**
 * The body of `POST /api/v1/cron`: a task schedule or a workflow schedule, exactly one (the types
 * refuse both and neither; the server answers 400 to a body that has them).
 */
export type CreateCronRequest = TaskCronRequest | WorkflowCronRequest;

export interface CreateCronResponse {
  cron_id: string;
}

/**
 * A schedule as the server shows it: `task_name` for a task schedule, `workflow` for one that
 * starts a workflow (an extension); the other is absent.
 */
export interface CronSchedule {
  id: string;
  name: string;
  cron_expr: string;
  /** The task each occurrence enqueues; absent for a schedule that starts a workflow. */
  task_name?: string;
  /**
   * The workflow each occurrence starts (an extension), as the server stored it: each step's
   * defaults filled in (`depends_on: []`, `payload: {}`, `on_failure: "halt"`, ...), and the
   * workflow's `context` and `metadata` (`{}` when none was given). Absent for a task schedule.
   */
  workflow?: CreateWorkflowRequest;
  enabled: boolean;
  next_run_at: string;
  created_at: string;
  payload?: JsonObject;
  queue_name?: string;
  config?: JobConfig;
  last_enqueued_at?: string;
  tenant_id?: string;
  /** The IANA time zone the expression is read in (an extension); absent when it is read in UTC. */
  timezone?: string;
  /**
   * `next_run_at` on the schedule's zone's clock, RFC 3339 with the zone's offset
   * (`"2026-03-30T09:00:00+02:00"`); absent when the schedule has no time zone.
   */
  next_run_local?: string;
}

export type ListCronsParams = ListParams;

export interface ListCronsResponse extends Page {
  crons: CronSchedule[];
}

// --- worker keys -----------------------------------------------------------------------------

export interface CreateWorkerKeyRequest {
  name: string;
  /** Null or absent: every queue. */
  queues?: string[] | null;
  /** RFC 3339, in the future; null or absent: never expires. */
  expires_at?: string | null;
}

export interface WorkerKey {
  id: string;
  name: string;
  queues: string[] | null;
  created_at: string;
  expires_at: string | null;
}

export interface CreateWorkerKeyResponse extends WorkerKey {
  /** Shown in this answer only: a `workerToken` for this tenant's jobs. */
  token: string;
}

export interface ListWorkerKeysResponse {
  worker_keys: WorkerKey[];
}

// --- limits (flow control) -------------------------------------------------------------------

/** At most `count` starts in any `per_secs` seconds. */
export interface LimitRate {
  count: number;
  per_secs: number;
}

/** The body of `PUT /api/v1/limits/{key}`: the key's whole policy, at least one of the two. */
export interface PutLimitRequest {
  concurrency?: number | null;
  rate?: LimitRate | null;
}

/** A key's policy with its live figures. */
export interface LimitPolicy {
  /** A key ending in `*` is a wildcard: it applies separately to every key with that prefix. */
  key: string;
  concurrency: number | null;
  rate: LimitRate | null;
  /** Jobs holding a slot now (for a wildcard, summed over the keys it governs). */
  running: number;
  created_at: string;
  updated_at: string;
  /** How many more may start now: an exact key with a rate only. */
  rate_available?: number;
}

export interface LimitsResponse {
  limits: LimitPolicy[];
}
