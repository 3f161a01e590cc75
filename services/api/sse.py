"""Server-sent event streams: one `status` event per change of a watched resource, until it is
terminal, the stream's lifetime ends, or the server drains.

The caller registers the NOTIFY subscription (and its watcher row) before the first read, so a
change after that read is always announced; the keep-alive tick doubles as a safety re-check.
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
    changed: asyncio.Event,
    read: Callable[[], Awaitable[tuple[bytes, bool] | None]],
    max_secs: float,
) -> web.StreamResponse:
    """`read()` returns (the event's data, whether it is terminal), or None when the resource is
    gone; an event is sent only when its data differs from the last one sent."""
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
