"""A minimal text/event-stream parser (the subset of the WHATWG rules the server uses)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass

__all__ = ["ServerSentEvent", "parse_sse"]


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None = None


async def parse_sse(lines: AsyncIterable[bytes]) -> AsyncIterator[ServerSentEvent]:
    """The events in a stream of lines. Comments (keep-alives) are skipped; an event without
    ``event:`` is a ``message``; multi-line data is joined with newlines."""
    event = ""
    data: list[str] = []
    last_id: str | None = None
    async for raw in lines:
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
            if data:
                yield ServerSentEvent(event or "message", "\n".join(data), last_id)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            last_id = value
    if data:
        yield ServerSentEvent(event or "message", "\n".join(data), last_id)
