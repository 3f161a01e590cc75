/** Exponential backoff with jitter, and an abortable sleep. */

export interface BackoffOptions {
  /** The first delay's ceiling, in ms. Default 200. */
  baseMs?: number;
  /** No delay exceeds this, in ms. Default 5000. */
  capMs?: number;
  /** Source of randomness in [0, 1); injectable for tests. Default `Math.random`. */
  random?: () => number;
}

/**
 * The delay before retry number `attempt` (0 for the first retry): "equal jitter", i.e. a random
 * value in [d/2, d) where d = min(cap, base * 2^attempt). Never zero, never above the cap, and
 * spread out so that many workers that lost the same server do not come back in lockstep.
 */
export function backoffDelay(attempt: number, options: BackoffOptions = {}): number {
  const base = options.baseMs ?? 200;
  const cap = options.capMs ?? 5000;
  const random = options.random ?? Math.random;
  const exp = Math.min(cap, base * 2 ** Math.min(Math.max(0, attempt), 30));
  return exp / 2 + random() * (exp / 2);
}

/** Sleeps `ms`, resolving early (never rejecting) when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
