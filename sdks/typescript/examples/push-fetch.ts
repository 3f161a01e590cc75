/**
 * A push receiver as a fetch handler, `(Request) => Promise<Response>`: the shape Cloudflare
 * Workers, Deno.serve, Bun.serve, Vercel functions and Hono take. QueueFlow POSTs each job of a
 * bound queue here. The answer decides the job's outcome: a 2xx JSON body completes it with that
 * body as its result, a 5xx (or 408, 409, 425, 429) retries it, any other 4xx fails it for good.
 * A delivery that fails verification gets a 503 with a `Retry-After`.
 *
 *   export default { fetch: pushHandler(new PushVerifier(env.QUEUEFLOW_PUSH_SECRET)) };
 */

import { PushVerificationError, PushVerifier, type Job } from "unofficial-queueflow-client";

type Task = (job: Job) => Promise<Record<string, unknown>>;

const tasks: Record<string, Task> = {
  "send-welcome": async (job) => ({ sent_to: job.payload.to }),
};

export function pushHandler(verifier: PushVerifier): (request: Request) => Promise<Response> {
  return async (request) => {
    const body = await request.text(); // the raw text: the signature covers it exactly
    let delivery;
    try {
      delivery = await verifier.verify(request.headers, body);
    } catch (err) {
      if (err instanceof PushVerificationError) {
        // 503, not 401: a wrong or undeployed secret must not dead-letter real jobs (docs/push.md).
        return Response.json({ error: err.reason }, { status: 503, headers: { "Retry-After": "60" } });
      }
      throw err;
    }
    const task = tasks[delivery.job.task_name];
    if (task === undefined) return Response.json({ error: "no such task" }, { status: 422 });
    return Response.json(await task(delivery.job)); // a thrown error becomes a 500: QueueFlow retries
  };
}
