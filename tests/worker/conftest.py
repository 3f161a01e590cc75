"""`worker_app`: the real API app plus the in-process worker runtime with a registry of the test's
own handlers (the built-ins included unless a bare Registry is passed)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from services.api import app as api
from services.janitor import app as janitor
from services.worker import app as worker
from services.worker.registry import Registry
from services.worker.runtime import default_registry
from shared.config import Settings
from shared.runtime.app import base_app
from tests.support.api import Clients

WorkerAppFactory = Callable[..., Awaitable[TestClient]]


@pytest.fixture
async def worker_app(database_url: str, clients: Clients) -> WorkerAppFactory:
    async def make(
        registry: Registry | None = None, *, janitor_loop: bool = False, **overrides: Any
    ) -> TestClient:
        overrides.setdefault("dev", True)
        app = base_app(Settings(database_url=database_url, mode="all", **overrides), metrics_route=False)
        api.setup(app)
        if janitor_loop:
            janitor.setup(app)
        worker.setup(app, registry or default_registry())
        return await clients.start(app)

    return make
