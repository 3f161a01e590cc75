/** A fake worker-protocol server for the worker loop's tests, and helpers they share. */

import type { ServerResponse } from "node:http";

import { QueueFlow } from "../dist/index.js";
import { errorBody, json, startStub, type Recorded, type Stub } from "./stub.js";

/** A fake protocol server: hands out `jobs` on lease, records every call, scriptable per route. */
export class FakeServer {
  stub!: Stub;
  pending: Array<Record<string, unknown>> = [];
  log: Array<{ at: number; kind: string; id?: string; body?: unknown }> = [];
  leaseAnswer?: (req: Recorded, res: ServerResponse) => boolean;
  heartbeatAnswer: (id: string, res: ServerResponse) => void = (_id, res) => json(res, 200, { status: "running" });
  reportAnswer: (kind: string, id: string, res: ServerResponse) => void = (_k, _id, res) => json(res, 204);
  /** `POST /api/v1/jobs/{id}/logs`; by default every line is stored. */
  logsAnswer: (id: string, lines: unknown[], res: ServerResponse) => void | Promise<void> = (_id, lines, res) => {
    this.storedLines += lines.length;
    json(res, 200, { stored: lines.length, dropped: 0, last_seq: this.storedLines });
  };
  storedLines = 0;
  batchPerLease = 100;
  /** `GET /openapi.json`; by default there is none (404), so the loop acknowledges one job per call. */
  openapiAnswer: (res: ServerResponse) => void = (res) => errorBody(res, 404, "no route");
  /** `POST /api/v1/jobs/complete`; by default every item is completed. */
  batchAnswer: (items: BatchItem[], res: ServerResponse) => void | Promise<void> = (items, res) =>
    json(res, 200, { results: items.map((i) => ({ id: i.id, outcome: "completed", status: 204 })) });

  async start(): Promise<this> {
    this.stub = await startStub(async (req, res) => {
      const now = Date.now();
      if (req.method === "GET" && req.path === "/openapi.json") {
        this.log.push({ at: now, kind: "openapi" });
        return this.openapiAnswer(res);
      }
      if (req.method === "POST" && req.path === "/api/v1/jobs/complete") {
        this.log.push({ at: now, kind: "complete_many", body: req.body });
        return this.batchAnswer((req.body as { jobs: BatchItem[] }).jobs, res);
      }
      const m = /^\/api\/v1\/(?:queues\/[^/]+\/(lease)|jobs\/([^/]+)\/(heartbeat|complete|fail|logs))$/.exec(req.path);
      if (!m) return errorBody(res, 404, "no route");
      if (m[1] === "lease") {
        this.log.push({ at: now, kind: "lease", body: req.body });
        if (this.leaseAnswer?.(req, res)) return;
        const max = Math.min((req.body as { max_jobs?: number }).max_jobs ?? 1, this.batchPerLease);
        const jobs = this.pending.splice(0, max).map((job) => ({ job, lease_token: `tok-${String(job.id)}` }));
        if (jobs.length === 0) await new Promise((r) => setTimeout(r, 30)); // a short long-poll
        return json(res, 200, { jobs });
      }
      const id = m[2]!;
      const kind = m[3]!;
      this.log.push({ at: now, kind, id, body: req.body });
      if (kind === "heartbeat") return this.heartbeatAnswer(id, res);
      if (kind === "logs") return this.logsAnswer(id, (req.body as { lines: unknown[] }).lines, res);
      return this.reportAnswer(kind, id, res);
    });
    return this;
  }

  client(): QueueFlow {
    return new QueueFlow({ baseUrl: this.stub.url, token: "tenant", workerToken: "worker" });
  }

  calls(kind: string, id?: string): Array<{ at: number; kind: string; id?: string; body?: unknown }> {
    return this.log.filter((e) => e.kind === kind && (id === undefined || e.id === id));
  }

  /** Advertises the batch acknowledgement route in /openapi.json. */
  offerBatch(): this {
    this.openapiAnswer = (res) => json(res, 200, { openapi: "3.1.0", paths: { "/api/v1/jobs/complete": { post: {} } } });
    return this;
  }

  /** The ids of every batch call, one array per call. */
  batches(): string[][] {
    return this.calls("complete_many").map((c) => (c.body as { jobs: BatchItem[] }).jobs.map((i) => i.id));
  }

  close(): Promise<void> {
    return this.stub.close();
  }
}

export interface BatchItem {
  id: string;
  lease_token: string;
  result?: unknown;
}

export const quiet = (): void => {};

export function stopAfter(n: number): { signal: AbortSignal; tick: () => void } {
  const controller = new AbortController();
  let seen = 0;
  return {
    signal: controller.signal,
    tick: () => {
      seen += 1;
      if (seen >= n) controller.abort();
    },
  };
}

export const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
