"""The resources one QueueFlow process holds, shared by every service it runs.

`resources_ctx` is an aiohttp cleanup context: it opens the pool (migrating first unless
--auto-migrate false), starts the one LISTEN connection and the group-commit batcher, and closes
them in reverse order at shutdown.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg
import structlog
from aiohttp import web

from shared.config import Settings
from shared.db.batcher import CompletionBatcher, InsertBatcher
from shared.db.listener import Hub, Listener
from shared.db.migrate import apply_migrations
from shared.db.pool import create_pool

log = structlog.get_logger("queueflow.runtime")


@dataclass(eq=False)
class Resources:
    settings: Settings
    hub: Hub = field(default_factory=Hub)
    pool: asyncpg.Pool = field(init=False)
    listener: Listener = field(init=False)
    completer: CompletionBatcher = field(init=False)
    inserter: InsertBatcher = field(init=False)
    draining: bool = False
    claim_turns: itertools.count[int] = field(default_factory=itertools.count)  # fair-share rotation

    def start_draining(self) -> None:
        """Stop handing out work: /ready turns 503 and parked long-polls return at once."""
        self.draining = True
        self.hub.wake_all()


RESOURCES = web.AppKey("resources", Resources)


async def open_resources(res: Resources) -> None:
    s = res.settings
    if s.auto_migrate:
        applied = await apply_migrations(s.database_url)
        if applied:
            log.info("migrations_applied", versions=applied)
    res.pool = await create_pool(s.database_url, s.min_db_connections, s.max_db_connections)
    res.listener = Listener(s.database_url, res.hub)
    await res.listener.start()
    res.completer = CompletionBatcher(res.pool)
    res.inserter = InsertBatcher(res.pool)


async def close_resources(res: Resources) -> None:
    await res.inserter.close()
    await res.completer.close()
    await res.listener.stop()
    await res.pool.close()


def resources_ctx(res: Resources):
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        await open_resources(res)
        try:
            yield
        finally:
            await close_resources(res)

    return ctx
