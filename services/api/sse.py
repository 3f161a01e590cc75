"""Server-sent event streams: one `status` event per change of a watched resource (a job's stream
also has `progress` and `log` events), until it is terminal, the stream's lifetime ends, or the
server drains.

The stream subscribes to the resource's notifications before its first read (and the caller
registers the watcher row that makes PostgreSQL send them), so a change after that read is always
announced; the keep-alive tick doubles as a safety re-check.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import web

from shared.runtime.keys import Lifecycle

KEEPALIVE_SECS = 15.0


# One server-sent event: its name and its data (JSON).
Event = tuple[str, bytes]
Subscribe = Callable[[Callable[[str], None]], Callable[[], None]]


async def stream_status(
    request: web.Request,
    lifecycle: Lifecycle,
    subscribe: Subscribe,
    read: Callable[[], Awaitable[tuple[bytes, bool] | None]],
    max_secs: float,
) -> web.StreamResponse:
    """`read()` returns (the event's data, whether it is terminal), or None when the resource is
    gone; a `status` event is sent only when its data differs from the last one sent.
    `subscribe(callback)` registers for change notifications and returns the unsubscribe."""

    async def events() -> tuple[list[Event], bool] | None:
        current = await read()
        if current is None:
            return None
        data, terminal = current
        return [("status", data)], terminal

    return await stream_events(request, lifecycle, subscribe, events, max_secs)


async def stream_events(
    request: web.Request,
    lifecycle: Lifecycle,
    subscribe: Subscribe,
    read: Callable[[], Awaitable[tuple[list[Event], bool] | None]],
    max_secs: float,
) -> web.StreamResponse:
    """As stream_status, for a resource with several kinds of event: `read()` returns the events
    to consider, in order, and whether the resource is terminal. An event whose data equals the
    last one sent under its name is skipped (a re-read that found no change sends nothing)."""
    changed = asyncio.Event()
    unsubscribe = subscribe(lambda _payload: changed.set())
    try:
        return await _stream(request, lifecycle, changed, read, max_secs)
    finally:
        unsubscribe()


async def _stream(
    request: web.Request,
    lifecycle: Lifecycle,
    changed: asyncio.Event,
    read: Callable[[], Awaitable[tuple[list[Event], bool] | None]],
    max_secs: float,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_secs
    last: dict[str, bytes] = {}
    with contextlib.suppress(ConnectionResetError):
        while (current := await read()) is not None:
            events, terminal = current
            for name, data in events:
                if last.get(name) != data:
                    await response.write(b"event: " + name.encode() + b"\ndata: " + data + b"\n\n")
                    last[name] = data
            if terminal or loop.time() >= deadline or lifecycle.draining:
                break
            try:
                async with asyncio.timeout(min(KEEPALIVE_SECS, deadline - loop.time())):
                    await changed.wait()
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
            changed.clear()
        await response.write_eof()
    return response
