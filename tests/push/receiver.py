"""A push receiver for the tests: a real aiohttp app on loopback that records every delivery and
answers as the test says (`answer`: a coroutine of the recorded delivery)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web


@dataclass
class Received:
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        return dict(json.loads(self.raw))

    @property
    def job_id(self) -> str:
        return str(self.body["job"]["id"])


Answer = Callable[[Received], Awaitable[web.StreamResponse]]


async def ok_empty_object(_: Received) -> web.StreamResponse:
    return web.json_response({})


@dataclass
class Receiver:
    answer: Answer = ok_empty_object
    received: list[Received] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    port: int = 0
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        got = Received({k.lower(): v for k, v in request.headers.items()}, await request.read())
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        async with self.arrived:
            self.received.append(got)
            self.arrived.notify_all()
        try:
            return await self.answer(got)
        finally:
            self.in_flight -= 1

    async def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        """The first `count` deliveries, once they have arrived."""
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: len(self.received) >= count)
        return self.received[:count]


async def start_receiver(
    answer: Answer = ok_empty_object, path: str = "/hook"
) -> tuple[Receiver, web.AppRunner]:
    receiver = Receiver(answer)
    app = web.Application()
    app.router.add_route("*", path, receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    receiver.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return receiver, runner


@pytest.fixture
async def receivers() -> AsyncIterator[Callable[..., Awaitable[Receiver]]]:
    """`receiver = await receivers(answer)`: started for the test, stopped after it."""
    runners: list[web.AppRunner] = []

    async def make(answer: Answer = ok_empty_object, path: str = "/hook") -> Receiver:
        receiver, runner = await start_receiver(answer, path)
        runners.append(runner)
        return receiver

    yield make
    for runner in reversed(runners):
        await runner.cleanup()


def verify(secret: str, received: Received) -> bool:
    """The Standard Webhooks check, written from the spec: one of the `v1,` signatures is the
    HMAC-SHA256 (keyed with the secret's decoded bytes) of "{id}.{timestamp}.{body}"."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = (
        f"{received.headers['webhook-id']}.{received.headers['webhook-timestamp']}.".encode() + received.raw
    )
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    given = [s.split(",", 1)[1] for s in received.headers["webhook-signature"].split() if s.startswith("v1,")]
    return any(hmac.compare_digest(expected, sig) for sig in given)
