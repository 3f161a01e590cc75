/**
 * The SDK's error hierarchy.
 *
 * Everything the SDK throws extends {@link QueueFlowError}. An HTTP answer with a 4xx or 5xx
 * status becomes an {@link ApiError} (or one of its per-status subclasses) carrying the status
 * and the server's `{error, timestamp}` body; a request that never got an answer becomes a
 * {@link ConnectionError}, a {@link TimeoutError} or an {@link AbortError}.
 */

/** The server's error body: every 4xx and 5xx answer carries one. */
export interface ErrorBody {
  error: string;
  timestamp: string;
}

/** Base class of every error the SDK throws. */
export class QueueFlowError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The server answered with an error status. */
export class ApiError extends QueueFlowError {
  /** The HTTP status. */
  readonly status: number;
  /** The parsed `{error, timestamp}` body, or `undefined` when the server sent something else. */
  readonly body: ErrorBody | undefined;
  /** The response text as received (useful when `body` is undefined, e.g. from a proxy). */
  readonly rawBody: string;
  /** HTTP method and path of the failed call, e.g. `POST /api/v1/jobs`. */
  readonly request: string;

  constructor(status: number, body: ErrorBody | undefined, rawBody: string, request: string) {
    const detail = body?.error ?? (rawBody.trim().slice(0, 200) || `HTTP ${status}`);
    super(`${request} failed with ${status}: ${detail}`);
    this.status = status;
    this.body = body;
    this.rawBody = rawBody;
    this.request = request;
  }

  /** The server's message (`body.error`), or the raw text when there was no error body. */
  get serverMessage(): string {
    return this.body?.error ?? this.rawBody;
  }
}

/** 400: the request was invalid (bad field, bound, cycle in a workflow, ...). */
export class BadRequestError extends ApiError {}
/** 401: missing or unknown credential. */
export class UnauthorizedError extends ApiError {}
/** 403: the credential is valid but not allowed here (read-only key, tenant token on a worker route, ...). */
export class ForbiddenError extends ApiError {}
/** 404: no such job, workflow, schedule or dead letter (for this tenant). */
export class NotFoundError extends ApiError {}
/** 409: the resource is in a state that forbids the call (already cancelled, lease lost, ...). */
export class ConflictError extends ApiError {}

/** The request did not get an HTTP answer: connection refused or reset, DNS failure, ... */
export class ConnectionError extends QueueFlowError {}

/** A call's `timeoutMs`, or a `waitFor` deadline, passed. */
export class TimeoutError extends QueueFlowError {}

/** The caller's `AbortSignal` fired. */
export class AbortError extends QueueFlowError {}

/** A workflow definition is invalid before it is sent (see `wf()`). */
export class WorkflowValidationError extends QueueFlowError {}

/**
 * Thrown by a worker handler to fail its job permanently: the job is dead-lettered at once,
 * without retries. Any error with a `retryable` property set to `false` is treated the same.
 */
export class NonRetryableError extends QueueFlowError {
  readonly retryable = false as const;
}

function isErrorBody(value: unknown): value is ErrorBody {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.error === "string" && typeof v.timestamp === "string";
}

/** Maps a status and response text to the matching {@link ApiError} subclass. */
export function apiErrorFor(status: number, rawBody: string, request: string): ApiError {
  let body: ErrorBody | undefined;
  try {
    const parsed: unknown = JSON.parse(rawBody);
    if (isErrorBody(parsed)) body = parsed;
  } catch {
    body = undefined;
  }
  switch (status) {
    case 400:
      return new BadRequestError(status, body, rawBody, request);
    case 401:
      return new UnauthorizedError(status, body, rawBody, request);
    case 403:
      return new ForbiddenError(status, body, rawBody, request);
    case 404:
      return new NotFoundError(status, body, rawBody, request);
    case 409:
      return new ConflictError(status, body, rawBody, request);
    default:
      return new ApiError(status, body, rawBody, request);
  }
}

/**
 * Whether an error is worth retrying later: no answer at all, a timeout, or a transient server
 * status (408, 429, 5xx).
 */
export function isTransient(err: unknown): boolean {
  if (err instanceof ConnectionError || err instanceof TimeoutError) return true;
  if (err instanceof ApiError) return err.status === 408 || err.status === 429 || err.status >= 500;
  return false;
}

/** Whether a handler's error asks for a permanent failure. */
export function isNonRetryable(err: unknown): boolean {
  if (err instanceof NonRetryableError) return true;
  return typeof err === "object" && err !== null && (err as { retryable?: unknown }).retryable === false;
}
