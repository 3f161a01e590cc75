"""`worker_app`: the real API app plus the in-process worker runtime with a registry of the test's
own handlers (the built-ins included unless a bare Registry is passed)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from services.janitor.loop import janitor_ctx
from services.serve import build_apps
from services.worker.registry import Registry
from services.worker.runtime import default_registry, worker_ctx
from shared.config import Settings
from tests.support.api import app_clients

WorkerAppFactory = Callable[..., Awaitable[TestClient]]


@pytest.fixture
async def worker_app(database_url: str) -> AsyncIterator[WorkerAppFactory]:
    async with app_clients() as serve:

        async def make(
            registry: Registry | None = None, *, janitor: bool = False, **overrides: Any
        ) -> TestClient:
            overrides.setdefault("dev", True)
            res, app, _ = build_apps(Settings(database_url=database_url, mode="api", **overrides))
            if janitor:
                app.cleanup_ctx.append(janitor_ctx(res))
            app.cleanup_ctx.append(worker_ctx(res, registry or default_registry()))
            return await serve(app)

        yield make
