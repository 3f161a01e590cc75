/**
 * What a running handler reports through its context (docs/visibility.md): progress, which travels
 * on the job's heartbeats, and log lines, which the worker loop posts in batches. One
 * {@link ProgressTracker} and one {@link LogBatcher} per job; the loop wires them to its calls.
 *
 * The pace, per job: at most one logs request and one early progress heartbeat a second; each logs
 * request at most {@link MAX_LOG_LINES} lines and {@link MAX_LOG_CALL_BYTES} bytes of messages.
 */

import { isTransient } from "./errors.js";
import { MAX_LOG_CALL_BYTES, MAX_LOG_LEVEL, MAX_LOG_LINES, MAX_PROGRESS_MESSAGE } from "./types.js";
import type { LogLineRequest, ProgressReport } from "./types.js";

/** The least time between two logs requests of a job, and between two heartbeats carrying its progress. */
export const REPORT_INTERVAL_MS = 1000;
/** The most lines a job's log buffer holds; past it the newest lines are dropped (and counted). */
export const MAX_BUFFERED_LINES = 10_000;

/** Time and timers, replaceable in tests. */
export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout: (callback, ms) => setTimeout(callback, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

// A lone UTF-16 surrogate (which has no UTF-8 form) or a NUL (which the server cannot store).
const UNSENDABLE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]|\u0000/g;

/** The text with what the server cannot take (NUL, lone surrogates) replaced by U+FFFD. */
export function sendable(text: string): string {
  return text.replace(UNSENDABLE, "\uFFFD");
}

const encoder = new TextEncoder();

/** A message cut to {@link MAX_LOG_CALL_BYTES} bytes of UTF-8, at a character boundary. */
export function fitMessage(message: string): string {
  if (message.length * 3 <= MAX_LOG_CALL_BYTES) return message; // 3 bytes per UTF-16 unit at most
  if (Buffer.byteLength(message, "utf8") <= MAX_LOG_CALL_BYTES) return message;
  const { read } = encoder.encodeInto(message, new Uint8Array(MAX_LOG_CALL_BYTES)); // whole characters only
  return message.slice(0, read);
}

/** Checks a `progress(percent, message?)` call: the SDK's own argument errors, nothing is sent. */
export function checkProgress(percent: unknown, message: unknown): ProgressReport {
  if (typeof percent !== "number" || !Number.isFinite(percent) || percent < 0 || percent > 100) {
    throw new RangeError(`progress: percent must be a number from 0 to 100, not ${String(percent)}`);
  }
  if (message === undefined || message === null) return { percent };
  if (typeof message !== "string") throw new TypeError(`progress: message must be a string, not ${typeof message}`);
  const length = [...message].length; // characters, as the server counts them
  if (length > MAX_PROGRESS_MESSAGE) {
    throw new RangeError(`progress: message must be at most ${MAX_PROGRESS_MESSAGE} characters, not ${length}`);
  }
  return { percent, message: sendable(message) };
}

const LEVEL = new RegExp(`^[A-Za-z]{1,${MAX_LOG_LEVEL}}$`);

/** Checks a `log(message, level?)` call's arguments. */
export function checkLogLine(message: unknown, level: unknown): void {
  if (typeof message !== "string") throw new TypeError(`log: message must be a string, not ${typeof message}`);
  if (typeof level !== "string" || !LEVEL.test(level)) {
    throw new RangeError(`log: level must be 1 to ${MAX_LOG_LEVEL} letters, not ${JSON.stringify(level)}`);
  }
}

/**
 * A job's progress: the latest report, and whether the server has it. A report newer than the
 * last one sent asks for an early heartbeat (`beat`), at most one a second; the heartbeat takes
 * the report with {@link ProgressTracker.take} and says how it went with
 * {@link ProgressTracker.settled}.
 */
export class ProgressTracker {
  private latest: ProgressReport | undefined;
  private version = 0;
  private sent = 0;
  private lastSentAt = -Infinity;
  private timer: unknown = undefined;
  private closed = false;

  constructor(
    private readonly beat: () => void,
    private readonly clock: Clock = systemClock,
  ) {}

  /** Records a report (the arguments checked first); it travels on the job's next heartbeat. */
  report(percent: number, message?: string): void {
    const report = checkProgress(percent, message);
    if (this.closed) return;
    this.latest = report;
    this.version += 1;
    this.schedule();
  }

  /** Whether the latest report has not reached the server yet. */
  get pending(): boolean {
    return this.version > this.sent;
  }

  /** The report a heartbeat sent now carries, when the server does not have it yet. */
  take(): { report: ProgressReport; version: number } | undefined {
    if (!this.pending || this.latest === undefined) return undefined;
    this.lastSentAt = this.clock.now();
    return { report: this.latest, version: this.version };
  }

  /**
   * A heartbeat that carried `version` (0: none) was answered (`ok`) or failed; a report the server
   * still lacks asks for another, a second after the last one that carried progress.
   */
  settled(version: number, ok: boolean): void {
    if (ok && version > this.sent) this.sent = version;
    this.schedule();
  }

  /** The handler ended: no more early heartbeats (the loop sends what is pending once, itself). */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(): void {
    if (this.closed || this.timer !== undefined || !this.pending) return;
    const wait = Math.max(0, this.lastSentAt + REPORT_INTERVAL_MS - this.clock.now());
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      this.beat();
    }, wait);
  }
}

/** Where a {@link LogBatcher} sends its calls and its troubles. */
export interface LogSink {
  /** One `POST /api/v1/jobs/{id}/logs` call; rejects with its error. */
  post(lines: LogLineRequest[]): Promise<unknown>;
  /** A failed call, or (at the end) the count of lines that were not sent. */
  onError(error: unknown): void;
}

interface Buffered {
  line: LogLineRequest;
  bytes: number;
}

/**
 * A job's log buffer. {@link LogBatcher.append} only buffers; a call goes out at most once a
 * second (the first one at once, after the current burst of lines), taking up to
 * {@link MAX_LOG_LINES} lines and {@link MAX_LOG_CALL_BYTES} bytes of messages from the front.
 * {@link LogBatcher.close} (the handler ended) sends everything left, call after call.
 *
 * A call that got no answer (or a 5xx) puts its lines back for the next one while the handler runs;
 * any other failure (409: the lease is gone, 404: no such job or route, ...), or a failure of the
 * final flush, ends posting for the job. Failures go to the sink's `onError` and nothing else: they
 * never touch the job's outcome.
 */
export class LogBatcher {
  private buffer: Buffered[] = [];
  private lastPostAt = -Infinity;
  private timer: unknown = undefined;
  private inFlight: Promise<void> | undefined;
  private open = true;
  private refused = false;
  private overflow = 0;
  private unsent = 0;

  constructor(
    private readonly sink: LogSink,
    private readonly clock: Clock = systemClock,
  ) {}

  /** Buffers a line (its arguments checked first); nothing is sent from here. */
  append(message: string, level = "info"): void {
    checkLogLine(message, level);
    if (!this.open) return;
    if (this.refused) {
      this.unsent += 1;
      return;
    }
    if (this.buffer.length >= MAX_BUFFERED_LINES) {
      this.overflow += 1;
      return;
    }
    const text = fitMessage(sendable(message));
    this.buffer.push({ line: { message: text, level, ts: new Date().toISOString() }, bytes: Buffer.byteLength(text, "utf8") });
    this.schedule();
  }

  /** Lines waiting to be sent. */
  get buffered(): number {
    return this.buffer.length;
  }

  /** Sends every buffered line (after the call in flight, without waiting out the pace), then stops. */
  async close(): Promise<void> {
    if (!this.open) return;
    this.open = false;
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
    if (this.inFlight) await this.inFlight;
    while (this.buffer.length > 0 && !this.refused) await this.postNext(true);
    this.unsent += this.buffer.length;
    this.buffer = [];
    if (this.overflow > 0 || this.unsent > 0) {
      const parts = [];
      if (this.overflow > 0) parts.push(`${this.overflow} past the buffer's ${MAX_BUFFERED_LINES} lines`);
      if (this.unsent > 0) parts.push(`${this.unsent} after a logs call failed`);
      this.sink.onError(new Error(`${this.overflow + this.unsent} log lines were not sent (${parts.join(", ")})`));
    }
  }

  private schedule(): void {
    if (!this.open || this.refused || this.timer !== undefined || this.inFlight !== undefined || this.buffer.length === 0) {
      return;
    }
    const wait = Math.max(0, this.lastPostAt + REPORT_INTERVAL_MS - this.clock.now());
    this.timer = this.clock.setTimeout(() => {
      this.timer = undefined;
      void this.postNext(false);
    }, wait);
  }

  /** One call with the lines at the front of the buffer. */
  private postNext(final: boolean): Promise<void> {
    const taken = this.take();
    this.lastPostAt = this.clock.now();
    const call = this.sink
      .post(taken.map((b) => b.line))
      .then(
        () => undefined,
        (err: unknown) => this.failed(err, taken, final),
      )
      .finally(() => {
        this.inFlight = undefined;
        this.schedule();
      });
    this.inFlight = call;
    return call;
  }

  private take(): Buffered[] {
    let count = 0;
    let bytes = 0;
    while (count < this.buffer.length && count < MAX_LOG_LINES) {
      const next = this.buffer[count].bytes;
      if (count > 0 && bytes + next > MAX_LOG_CALL_BYTES) break;
      bytes += next;
      count += 1;
    }
    return this.buffer.splice(0, count);
  }

  private failed(err: unknown, taken: Buffered[], final: boolean): void {
    this.sink.onError(err);
    if (!final && isTransient(err)) {
      // Back to the front for the next call, within the buffer's bound (its newest lines go first).
      this.buffer = [...taken, ...this.buffer];
      const over = this.buffer.length - MAX_BUFFERED_LINES;
      if (over > 0) {
        this.overflow += over;
        this.buffer.length = MAX_BUFFERED_LINES;
      }
      return;
    }
    this.refused = true;
    this.unsent += taken.length + this.buffer.length;
    this.buffer = [];
  }
}
