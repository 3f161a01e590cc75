"""Server-sent event streams: one `status` event per change of a watched resource, until it is
terminal, the stream's lifetime ends, or the server drains.

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


async def stream_status(
    request: web.Request,
    lifecycle: Lifecycle,
    subscribe: Callable[[Callable[[str], None]], Callable[[], None]],
    read: Callable[[], Awaitable[tuple[bytes, bool] | None]],
    max_secs: float,
) -> web.StreamResponse:
    """`read()` returns (the event's data, whether it is terminal), or None when the resource is
    gone; an event is sent only when its data differs from the last one sent. `subscribe(callback)`
    registers for change notifications and returns the unsubscribe."""
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
    read: Callable[[], Awaitable[tuple[bytes, bool] | None]],
    max_secs: float,
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_secs
    last: bytes | None = None
    with contextlib.suppress(ConnectionResetError):
        while (current := await read()) is not None:
            data, terminal = current
            if data != last:
                await response.write(b"event: status\ndata: " + data + b"\n\n")
                last = data
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
