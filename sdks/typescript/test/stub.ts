/** A tiny scriptable HTTP server for client-side behaviours a real server cannot easily produce. */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface Recorded {
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingMessage["headers"];
  body: unknown;
}

export type Route = (req: Recorded, res: ServerResponse) => void | Promise<void>;

export interface Stub {
  url: string;
  requests: Recorded[];
  server: Server;
  close(): Promise<void>;
}

export function json(res: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    res.writeHead(status);
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(text) });
  res.end(text);
}

export function errorBody(res: ServerResponse, status: number, message: string): void {
  json(res, status, { error: message, timestamp: new Date().toISOString() });
}

export async function startStub(route: Route): Promise<Stub> {
  const requests: Recorded[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://stub");
      const text = Buffer.concat(chunks).toString("utf8");
      const recorded: Recorded = {
        method: req.method ?? "GET",
        path: url.pathname,
        query: url.searchParams,
        headers: req.headers,
        body: text ? (JSON.parse(text) as unknown) : undefined,
      };
      requests.push(recorded);
      Promise.resolve(route(recorded, res)).catch((err: unknown) => {
        if (!res.headersSent) errorBody(res, 500, String(err));
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A job as the server would send it. */
export function fakeJob(id: string, task = "t", payload: Record<string, unknown> = {}): Record<string, unknown> {
  const now = new Date().toISOString();
  return {
    id,
    queue_name: "q",
    task_name: task,
    payload,
    config: {},
    status: "running",
    retry_count: 0,
    delivery_count: 1,
    created_at: now,
    scheduled_at: now,
    metadata: {},
  };
}
