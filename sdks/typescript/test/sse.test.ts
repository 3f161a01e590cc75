import { test } from "node:test";
import assert from "node:assert/strict";

import { SseParser, parseSseStream, type SseEvent } from "../dist/index.js";

function all(chunks: string[]): SseEvent[] {
  const parser = new SseParser();
  return chunks.flatMap((c) => parser.push(c));
}

test("a named event with data", () => {
  assert.deepEqual(all(['event: status\ndata: {"a":1}\n\n']), [{ event: "status", data: '{"a":1}' }]);
});

test("default event name, multi-line data, id and retry", () => {
  const events = all(["id: 7\nretry: 1500\ndata: one\ndata: two\n\n"]);
  assert.deepEqual(events, [{ event: "message", data: "one\ntwo", id: "7", retry: 1500 }]);
});

test("comments (keep-alives) and empty blocks dispatch nothing", () => {
  assert.deepEqual(all([": keep-alive\n\n", "\n\n", "event: status\n\n"]), []);
});

test("events split at arbitrary points across chunks", () => {
  const text = 'event: status\ndata: {"status":"running"}\n\nevent: status\ndata: {"status":"completed"}\n\n';
  for (let size = 1; size < 12; size++) {
    const chunks: string[] = [];
    for (let i = 0; i < text.length; i += size) chunks.push(text.slice(i, i + size));
    const events = all(chunks);
    assert.deepEqual(
      events.map((e) => JSON.parse(e.data).status),
      ["running", "completed"],
      `chunk size ${size}`,
    );
  }
});

test("CRLF and CR line ends, also when a CRLF is split", () => {
  assert.deepEqual(all(["data: a\r\n\r\n"]), [{ event: "message", data: "a" }]);
  assert.deepEqual(all(["data: b\r\r"]), [{ event: "message", data: "b" }]);
  assert.deepEqual(all(["data: c\r", "\n\r", "\n"]), [{ event: "message", data: "c" }]);
});

test("field without a colon, value without a space, unknown fields, BOM", () => {
  assert.deepEqual(all(["\ufeffdata\n\n"]), [{ event: "message", data: "" }]);
  assert.deepEqual(all(["data:x\nfoo: bar\n\n"]), [{ event: "message", data: "x" }]);
  assert.deepEqual(all(["data:  two spaces\n\n"]), [{ event: "message", data: " two spaces" }]);
});

test("an unterminated last event is discarded", () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push("data: partial"), []);
  assert.deepEqual(parser.end(), []);
});

test("parseSseStream decodes UTF-8 split across byte chunks", async () => {
  const bytes = new TextEncoder().encode('event: status\ndata: {"name":"héllo ✓"}\n\n');
  async function* stream(): AsyncGenerator<Uint8Array> {
    for (let i = 0; i < bytes.length; i += 3) yield bytes.slice(i, i + 3);
  }
  const events: SseEvent[] = [];
  for await (const e of parseSseStream(stream())) events.push(e);
  assert.equal(events.length, 1);
  assert.deepEqual(JSON.parse(events[0]!.data), { name: "héllo ✓" });
});
