"""`python -m bench.push_receiver`: the push drain's receiver (scenario P) in a process of its own.

A plain aiohttp app on 127.0.0.1 (a free port) that answers every `POST /hook` with 200 and the
body `{}` (the pusher completes the job with that result), on keep-alive connections, doing nothing
else: no signature check, no parsing beyond reading the body. Its own process, so the harness can
report its CPU apart from the server's.

Protocol with the harness, one line at a time: it prints `ready <port>` once it listens; when it
reads `stop` on stdin (or stdin closes) it prints `{"requests": N}` and exits.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web

ANSWER = b"{}"


async def _stdin() -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def main() -> None:
    requests = 0

    async def hook(request: web.Request) -> web.Response:
        nonlocal requests
        await request.read()
        requests += 1
        return web.Response(body=ANSWER, content_type="application/json")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    reader = await _stdin()
    print(f"ready {port}", flush=True)
    while (line := (await reader.readline()).decode()) and line.strip() != "stop":
        pass
    print(json.dumps({"requests": requests}), flush=True)
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
