/** The HTTP transport: URL building, auth, timeouts, error mapping, and safe retries. */

import { AbortError, ConnectionError, QueueFlowError, TimeoutError, apiErrorFor, isTransient } from "./errors.js";
import { backoffDelay, sleep } from "./backoff.js";
import { parseSseStream, type SseEvent } from "./sse.js";

export type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export type QueryValue = string | number | boolean | undefined | null;

export interface TransportOptions {
  baseUrl: string;
  timeoutMs: number;
  maxRetries: number;
  fetch: FetchLike;
  userAgent: string;
}

/** Options every call accepts. */
export interface CallOptions {
  /** Aborts the call (it then rejects with {@link AbortError}). */
  signal?: AbortSignal;
  /** Overrides the client's `timeoutMs` for this call. */
  timeoutMs?: number;
  /** Overrides the client's `maxRetries` for this call (idempotent calls only). */
  maxRetries?: number;
}

export interface RequestSpec extends CallOptions {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  token: string;
  query?: object;
  body?: unknown;
  headers?: Record<string, string>;
  /** Safe to send twice: retried on transport errors and 502/503/504 up to `maxRetries`. */
  idempotent?: boolean;
}

/** Encodes a path segment (job ids, queue names, ...). */
export function seg(value: string | number): string {
  return encodeURIComponent(String(value));
}

export function buildUrl(baseUrl: string, path: string, query?: object): string {
  const url = new URL(baseUrl.replace(/\/+$/, "") + path);
  if (query) {
    for (const [key, value] of Object.entries(query as Record<string, QueryValue>)) {
      if (value === undefined || value === null) continue;
      url.searchParams.set(key, String(value));
    }
  }
  return url.toString();
}

/** A 2xx response; call `release` once its body is read (it stops the call's timeout timer). */
export interface Sent {
  response: Response;
  release: () => void;
  timedOut: () => boolean;
}

const RETRY_STATUSES = new Set([502, 503, 504]);

export class Transport {
  constructor(readonly options: TransportOptions) {}

  /** Sends a request and returns the parsed JSON body (or `undefined` for 204). */
  async json<T>(spec: RequestSpec): Promise<T> {
    const { response, release, timedOut } = await this.send(spec);
    let text: string;
    try {
      text = await this.readText(response, spec, timedOut);
    } finally {
      release();
    }
    if (response.status === 204 || text.length === 0) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (err) {
      throw new QueueFlowError(`${spec.method} ${spec.path}: the server sent invalid JSON`, { cause: err });
    }
  }

  /**
   * Opens a server-sent events stream and yields its events until the server ends it. The
   * client timeout applies to connecting only; abort a long stream with `signal`.
   */
  async *stream(spec: RequestSpec): AsyncGenerator<SseEvent, void, undefined> {
    const controller = new AbortController();
    const onAbort = (): void => controller.abort(spec.signal?.reason);
    if (spec.signal?.aborted) throw new AbortError(`${spec.method} ${spec.path} was aborted`);
    spec.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      const { response, release } = await this.send({
        ...spec,
        signal: controller.signal,
        headers: { ...spec.headers, Accept: "text/event-stream" },
        streaming: true,
      } as RequestSpec & { streaming: boolean });
      release(); // the timeout covers connecting; a stream then lives as long as the server keeps it
      if (response.body === null) return;
      try {
        yield* parseSseStream(response.body as unknown as AsyncIterable<Uint8Array>);
      } catch (err) {
        if (spec.signal?.aborted) throw new AbortError(`${spec.method} ${spec.path} was aborted`, { cause: err });
        throw new ConnectionError(`${spec.method} ${spec.path}: the event stream broke`, { cause: err });
      }
    } finally {
      spec.signal?.removeEventListener("abort", onAbort);
      controller.abort(); // closes the connection if the consumer stopped early
    }
  }

  /** Sends with retries; resolves with a 2xx response, otherwise throws a QueueFlowError. */
  async send(spec: RequestSpec & { streaming?: boolean }): Promise<Sent> {
    const retries = spec.idempotent ? (spec.maxRetries ?? this.options.maxRetries) : 0;
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.once(spec);
      } catch (err) {
        const retryable =
          err instanceof ConnectionError ||
          (err instanceof QueueFlowError && "status" in err && RETRY_STATUSES.has((err as { status: number }).status));
        if (!retryable || attempt >= retries || spec.signal?.aborted) throw err;
        await sleep(backoffDelay(attempt, { baseMs: 250, capMs: 2000 }), spec.signal);
        if (spec.signal?.aborted) throw new AbortError(`${spec.method} ${spec.path} was aborted`);
      }
    }
  }

  private async once(spec: RequestSpec & { streaming?: boolean }): Promise<Sent> {
    const request = `${spec.method} ${spec.path}`;
    if (spec.signal?.aborted) throw new AbortError(`${request} was aborted`);
    const timeoutMs = spec.timeoutMs ?? this.options.timeoutMs;
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), timeoutMs);
    const signal = spec.signal ? AbortSignal.any([spec.signal, timeout.signal]) : timeout.signal;
    const headers: Record<string, string> = {
      Accept: "application/json",
      Authorization: `Bearer ${spec.token}`,
      "User-Agent": this.options.userAgent,
      ...spec.headers,
    };
    const init: RequestInit = { method: spec.method, headers, signal };
    if (spec.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(spec.body);
    }
    let response: Response;
    try {
      response = await this.options.fetch(buildUrl(this.options.baseUrl, spec.path, spec.query), init);
    } catch (err) {
      clearTimeout(timer);
      throw this.transportError(err, spec, timeout.signal, timeoutMs);
    }
    const release = (): void => clearTimeout(timer);
    if (response.status >= 400) {
      try {
        const text = await this.readText(response, spec, () => timeout.signal.aborted);
        throw apiErrorFor(response.status, text, request);
      } finally {
        release();
      }
    }
    return { response, release, timedOut: () => timeout.signal.aborted };
  }

  private async readText(response: Response, spec: RequestSpec, timedOut: () => boolean): Promise<string> {
    try {
      return await response.text();
    } catch (err) {
      const request = `${spec.method} ${spec.path}`;
      if (spec.signal?.aborted) throw new AbortError(`${request} was aborted`, { cause: err });
      if (timedOut()) throw new TimeoutError(`${request} timed out while reading the response`, { cause: err });
      throw new ConnectionError(`${request}: the response body was cut off`, { cause: err });
    }
  }

  private transportError(err: unknown, spec: RequestSpec, timeout: AbortSignal, timeoutMs: number): QueueFlowError {
    const request = `${spec.method} ${spec.path}`;
    if (err instanceof QueueFlowError) return err;
    if (spec.signal?.aborted) return new AbortError(`${request} was aborted`, { cause: err });
    if (timeout.aborted) return new TimeoutError(`${request} timed out after ${timeoutMs} ms`, { cause: err });
    const cause = (err as { cause?: { code?: string; message?: string } })?.cause;
    const detail = cause?.code ?? cause?.message ?? (err instanceof Error ? err.message : String(err));
    return new ConnectionError(`${request}: no answer from ${this.options.baseUrl} (${detail})`, { cause: err });
  }
}

export { isTransient };
