"""An in-process QueueFlow app driven through aiohttp's test client: fast API tests on a real
PostgreSQL. `client = await api(mode="all", worker_token="w", api_keys="k:acme")` builds the same
app `queueflow serve` builds (services.serve.build_app), so the routes, middleware and cleanup
contexts are the real ones. Keyword arguments are Settings fields; `api_keys` may be the flag's
string form. Defaults: mode "api" (API only: no janitor, no in-process workers), dev mode on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.janitor.loop import Janitor
from services.serve import build_app
from shared.config import Settings, parse_api_keys
from shared.db.database import Database
from shared.runtime.keys import DATABASE, SETTINGS

ApiFactory = Callable[..., Awaitable[TestClient]]


def database_of(client: TestClient) -> Database:
    """The database (pool, hub, batchers) of the app behind a test client."""
    return client.server.app[DATABASE]


def settings_of(client: TestClient) -> Settings:
    return client.server.app[SETTINGS]


def janitor_of(client: TestClient) -> Janitor:
    """A janitor on the app's database, to run single sweeps (its loop is not started)."""
    return Janitor(database_of(client), settings_of(client))


class Clients:
    """Test clients started for one test, closed (their apps shut down) in reverse order."""

    def __init__(self) -> None:
        self._started: list[TestClient] = []

    async def start(self, app: web.Application) -> TestClient:
        client = TestClient(TestServer(app))
        await client.start_server()
        self._started.append(client)
        return client

    async def close(self) -> None:
        for client in reversed(self._started):
            await client.close()


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    started = Clients()
    yield started
    await started.close()


@pytest.fixture
async def api(database_url: str, clients: Clients) -> ApiFactory:
    async def make(**overrides: Any) -> TestClient:
        overrides.setdefault("mode", "api")
        overrides.setdefault("dev", True)
        if isinstance(overrides.get("api_keys"), str):
            overrides["api_keys"] = parse_api_keys(overrides["api_keys"])
        return await clients.start(build_app(Settings(database_url=database_url, **overrides)))

    return make
