/** unofficial-queueflow-client: an unofficial TypeScript client and remote-worker runtime for QueueFlow. */

export { QueueFlow, SDK_VERSION, Jobs, Workflows, Events, Cron, DeadLetters, Queues, System, WorkerKeys, Limits } from "./client.js";
export type { QueueFlowOptions, WaitOptions } from "./client.js";
export { Worker, toResult, defaultWorkerId, MAX_COMPLETIONS } from "./worker.js";
export { TRACER_NAME } from "./tracing.js";
export { wf, WorkflowBuilder, validateWorkflow } from "./builder.js";
export type { StepOptions, SleepStepOptions, WaitStepOptions } from "./builder.js";
export type {
  Completion,
  Handler,
  HandlerResult,
  Handlers,
  HeartbeatOptions,
  JobContext,
  LeaseOptions,
  LeaseRef,
  RunOptions,
  WorkerErrorInfo,
  WorkerHandle,
} from "./worker.js";
export {
  QueueFlowError,
  ApiError,
  BadRequestError,
  UnauthorizedError,
  ForbiddenError,
  NotFoundError,
  ConflictError,
  ConnectionError,
  TimeoutError,
  AbortError,
  WorkflowValidationError,
  NonRetryableError,
  apiErrorFor,
  isTransient,
  isNonRetryable,
} from "./errors.js";
export type { ErrorBody } from "./errors.js";
export type { CallOptions, FetchLike } from "./http.js";
export { PushVerifier, PushVerificationError, DEFAULT_PUSH_TOLERANCE_SECS } from "./push.js";
export type { PushDelivery, PushHeaders, PushRejection, PushVerifierOptions, PushVerifyOptions } from "./push.js";
export { backoffDelay, sleep } from "./backoff.js";
export { SseParser, parseSseStream } from "./sse.js";
export type { SseEvent } from "./sse.js";
export * from "./types.js";
