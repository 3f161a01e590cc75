/** A streaming parser for `text/event-stream` (the WHATWG server-sent events format). */

export interface SseEvent {
  /** The `event:` field; `"message"` when the server sent none. */
  event: string;
  /** The `data:` lines, joined with newlines. */
  data: string;
  /** The `id:` field, if any. */
  id?: string;
  /** The `retry:` field (ms), if any. */
  retry?: number;
}

/**
 * Incremental parser: feed it text as it arrives with {@link SseParser.push}; it returns the
 * events completed by that chunk. Handles LF, CRLF and CR line ends (also split across chunks),
 * comments (`: keep-alive`), multi-line data, and a leading byte-order mark.
 */
export class SseParser {
  private buffer = "";
  private eventType = "";
  private data: string[] = [];
  private id: string | undefined;
  private retry: number | undefined;
  private started = false;
  private pendingCr = false;

  push(chunk: string): SseEvent[] {
    if (!this.started && chunk.length > 0) {
      this.started = true;
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
    }
    if (this.pendingCr && chunk.startsWith("\n")) chunk = chunk.slice(1);
    this.pendingCr = false;
    this.buffer += chunk;
    const events: SseEvent[] = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (match === null) break;
      // A lone CR at the very end might be the first half of a CRLF split across chunks.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) this.pendingCr = true;
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const event = this.line(line);
      if (event !== undefined) events.push(event);
    }
    return events;
  }

  /** Call at the end of the stream: an event without its closing blank line is discarded, as the spec says. */
  end(): SseEvent[] {
    this.buffer = "";
    this.data = [];
    this.eventType = "";
    return [];
  }

  private line(line: string): SseEvent | undefined {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.eventType = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
      default:
        break; // unknown fields are ignored
    }
    return undefined;
  }

  private dispatch(): SseEvent | undefined {
    const hadData = this.data.length > 0;
    const event: SseEvent = { event: this.eventType || "message", data: this.data.join("\n") };
    if (this.id !== undefined) event.id = this.id;
    if (this.retry !== undefined) event.retry = this.retry;
    this.eventType = "";
    this.data = [];
    return hadData ? event : undefined;
  }
}

/** Parses a byte stream (e.g. a fetch `Response.body`) into events. */
export async function* parseSseStream(stream: AsyncIterable<Uint8Array>): AsyncGenerator<SseEvent, void, undefined> {
  const decoder = new TextDecoder();
  const parser = new SseParser();
  for await (const chunk of stream) {
    yield* parser.push(decoder.decode(chunk, { stream: true }));
  }
  yield* parser.push(decoder.decode());
  parser.end();
}
