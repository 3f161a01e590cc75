/**
 * Verifying push deliveries: QueueFlow calling your HTTP endpoint with a job.
 *
 * A delivery is `POST <your url>` with the JSON body `{job, lease_token, attempt}` and the
 * Standard Webhooks headers `webhook-id`, `webhook-timestamp` and `webhook-signature`. Verify it
 * before acting on it:
 *
 * ```ts
 * const verifier = new PushVerifier(process.env.QUEUEFLOW_PUSH_SECRET!); // "whsec_..."
 * const delivery = await verifier.verify(request.headers, await request.text());
 * ```
 *
 * Only Web Crypto (`globalThis.crypto.subtle`) is used, so this runs on Node 20+, Deno, Bun,
 * Cloudflare Workers and edge runtimes alike.
 */

import { QueueFlowError } from "./errors.js";
import type { Job } from "./types.js";

/** How far a delivery's timestamp may be from the receiver's clock, before or after (seconds). */
export const DEFAULT_PUSH_TOLERANCE_SECS = 300;

/** Why a delivery (or the secret to check it with) was refused: the same values in every SDK. */
export type PushRejection =
  | "malformed_secret"
  | "missing_header"
  | "malformed_header"
  | "timestamp_too_old"
  | "timestamp_too_new"
  | "signature_mismatch"
  | "malformed_body";

/** A push delivery (or its secret) failed verification; `reason` says why. */
export class PushVerificationError extends QueueFlowError {
  readonly reason: PushRejection;
  readonly detail: string;

  constructor(reason: PushRejection, detail: string) {
    super(`push delivery refused (${reason}): ${detail}`);
    this.reason = reason;
    this.detail = detail;
  }
}

/** A verified delivery. */
export interface PushDelivery {
  /** The `webhook-id`: the same on every retry of one attempt (use it to drop a duplicate). */
  id: string;
  /** When QueueFlow sent it (`webhook-timestamp`). */
  timestamp: Date;
  /** The job, as a lease answer carries it. */
  job: Job;
  /** The job's lease: pass it to heartbeat, complete or fail after answering 202. */
  lease_token: string;
  /** Which attempt of the job this is. */
  attempt: number;
  /** The job's W3C `traceparent` header, when it has one. */
  traceparent?: string;
}

/**
 * Request headers in any of the usual shapes: fetch's `Headers`, Node's `IncomingHttpHeaders`,
 * or a plain record such as a serverless event's headers (names in any case).
 */
export type PushHeaders =
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

export interface PushVerifierOptions {
  /** Seconds a delivery's timestamp may be off, either way; default 300. */
  toleranceSecs?: number;
}

export interface PushVerifyOptions {
  /** Stands for the clock (tests); default the current time. */
  now?: Date;
}

const encoder = new TextEncoder();

function refuse(reason: PushRejection, detail: string): never {
  throw new PushVerificationError(reason, detail);
}

function decodeSecret(secret: string): Uint8Array {
  if (!secret.startsWith("whsec_")) refuse("malformed_secret", "a push secret starts with whsec_");
  const encoded = secret.slice("whsec_".length);
  let binary = "";
  try {
    binary = atob(encoded);
  } catch {
    binary = "";
  }
  // Canonical standard base64 only (atob alone accepts more), so every SDK accepts the same secrets.
  if (binary === "" || btoa(binary) !== encoded) {
    refuse("malformed_secret", "the part after whsec_ is not standard base64 with padding");
  }
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

function lookup(headers: PushHeaders, name: string): string | undefined {
  if (typeof headers.get === "function") {
    return (headers as { get(name: string): string | null }).get(name) ?? undefined;
  }
  const record = headers as Record<string, string | string[] | undefined>;
  let value = record[name];
  if (value === undefined) {
    const key = Object.keys(record).find((k) => k.toLowerCase() === name);
    value = key === undefined ? undefined : record[key];
  }
  return Array.isArray(value) ? value[0] : value;
}

function required(headers: PushHeaders, name: string): string {
  const value = lookup(headers, name);
  if (value === undefined || value.replace(/ /g, "") === "") refuse("missing_header", `no ${name} header`);
  return value;
}

/** Compares two strings in time that depends only on their lengths. */
function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function toBytes(body: string | Uint8Array | ArrayBuffer): Uint8Array {
  if (typeof body === "string") return encoder.encode(body);
  return body instanceof Uint8Array ? body : new Uint8Array(body);
}

/**
 * Checks push deliveries signed with one endpoint secret (`whsec_<base64>`): the Standard Webhooks
 * signature (HMAC-SHA256, compared in constant time; any one of several `v1` entries may match, as
 * during a secret rotation) and the timestamp (within `toleranceSecs` of now, either way).
 *
 * The constructor throws {@link PushVerificationError} (`malformed_secret`) for a secret of another form.
 */
export class PushVerifier {
  readonly #key: ReturnType<typeof crypto.subtle.importKey>;
  readonly #toleranceSecs: number;

  constructor(secret: string, options: PushVerifierOptions = {}) {
    const raw = decodeSecret(secret);
    this.#key = crypto.subtle.importKey("raw", raw, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    this.#toleranceSecs = options.toleranceSecs ?? DEFAULT_PUSH_TOLERANCE_SECS;
  }

  /**
   * The delivery these headers and body make, once its signature and timestamp check out; rejects
   * with {@link PushVerificationError} otherwise. Pass the body exactly as received (`await
   * request.text()`, or the raw bytes): the signature covers it, not its JSON.
   */
  async verify(
    headers: PushHeaders,
    body: string | Uint8Array | ArrayBuffer,
    options: PushVerifyOptions = {},
  ): Promise<PushDelivery> {
    const id = required(headers, "webhook-id");
    const stamp = required(headers, "webhook-timestamp");
    const signatures = required(headers, "webhook-signature");

    if (!/^[0-9]{1,15}$/.test(stamp)) refuse("malformed_header", "webhook-timestamp is not whole Unix seconds");
    const candidates: string[] = [];
    for (const entry of signatures.split(" ")) {
      if (entry === "") continue;
      const comma = entry.indexOf(",");
      if (comma <= 0) refuse("malformed_header", "a webhook-signature entry is not <version>,<signature>");
      if (entry.slice(0, comma) === "v1") candidates.push(entry.slice(comma + 1));
    }

    const sent = Number(stamp);
    const now = (options.now ?? new Date()).getTime() / 1000;
    if (sent < now - this.#toleranceSecs) {
      refuse("timestamp_too_old", `sent at ${sent}, more than ${this.#toleranceSecs} s ago`);
    }
    if (sent > now + this.#toleranceSecs) {
      refuse("timestamp_too_new", `sent at ${sent}, more than ${this.#toleranceSecs} s ahead`);
    }

    const bytes = toBytes(body);
    const prefix = encoder.encode(`${id}.${stamp}.`);
    const signed = new Uint8Array(prefix.length + bytes.length);
    signed.set(prefix);
    signed.set(bytes, prefix.length);
    const mac = new Uint8Array(await crypto.subtle.sign("HMAC", await this.#key, signed));
    const expected = btoa(String.fromCharCode(...mac));
    let matched = false;
    for (const candidate of candidates) matched = constantTimeEqual(expected, candidate) || matched;
    if (!matched) refuse("signature_mismatch", "no v1 signature matches this endpoint's secret");

    let parsed: unknown;
    try {
      parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
    } catch (err) {
      refuse("malformed_body", `the body is not JSON: ${String(err)}`);
    }
    if (
      !isObject(parsed) ||
      !isObject(parsed.job) ||
      typeof parsed.job.id !== "string" ||
      typeof parsed.job.queue_name !== "string" ||
      typeof parsed.job.task_name !== "string" ||
      typeof parsed.lease_token !== "string" ||
      !Number.isInteger(parsed.attempt)
    ) {
      refuse("malformed_body", "the body is not {job (with its id), lease_token, attempt}");
    }
    const delivery: PushDelivery = {
      id,
      timestamp: new Date(sent * 1000),
      job: { metadata: {}, ...parsed.job } as unknown as Job,
      lease_token: parsed.lease_token,
      attempt: parsed.attempt as number,
    };
    const traceparent = lookup(headers, "traceparent");
    if (traceparent) delivery.traceparent = traceparent;
    return delivery;
  }
}
