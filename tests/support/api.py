"""An in-process QueueFlow app driven through aiohttp's test client: fast API tests on a real
PostgreSQL. `client = await api(mode="all", worker_token="w", api_keys="k:acme")` builds the same
apps `queueflow serve` builds (services.serve.build_apps), so the routes, middleware and cleanup
contexts are the real ones. Keyword arguments are Settings fields; `api_keys` may be the flag's
string form. Defaults: mode "api" (API only: no janitor, no in-process workers), dev mode on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.serve import build_apps
from shared.config import Settings, parse_api_keys
from shared.runtime import RESOURCES, Resources

ApiFactory = Callable[..., Awaitable[TestClient]]


def resources_of(client: TestClient) -> Resources:
    """The process resources behind a test client (pool, hub, settings)."""
    return client.server.app[RESOURCES]


@contextlib.asynccontextmanager
async def app_clients() -> AsyncIterator[Callable[[web.Application], Awaitable[TestClient]]]:
    """`serve(app)` starts a test client for `app`; every client is closed, newest first, on exit."""
    clients: list[TestClient] = []

    async def serve(app: web.Application) -> TestClient:
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    try:
        yield serve
    finally:
        for client in reversed(clients):
            await client.close()


@pytest.fixture
async def api(database_url: str) -> AsyncIterator[ApiFactory]:
    async with app_clients() as serve:

        async def make(**overrides: Any) -> TestClient:
            overrides.setdefault("mode", "api")
            overrides.setdefault("dev", True)
            if isinstance(overrides.get("api_keys"), str):
                overrides["api_keys"] = parse_api_keys(overrides["api_keys"])
            _, app, _ = build_apps(Settings(database_url=database_url, **overrides))
            return await serve(app)

        yield make
