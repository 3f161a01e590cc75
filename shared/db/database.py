"""The process's connection to PostgreSQL: the pool, the one LISTEN connection feeding the in-memory
hub, and the group-commit writers. Opened once per process (every service the process runs shares
it) and closed in reverse order."""

from __future__ import annotations

import asyncio
import itertools

import structlog

from shared.db.batcher import CompletionBatcher, InsertBatcher
from shared.db.listener import Hub, Listener
from shared.db.migrate import apply_migrations
from shared.db.pool import Pool, create_pool

log = structlog.get_logger("queueflow.db")


class Database:
    def __init__(self, pool: Pool, hub: Hub, listener: Listener) -> None:
        self.pool = pool
        self.hub = hub
        self.listener = listener
        self.completer = CompletionBatcher(pool)
        self.inserter = InsertBatcher(pool)
        # Fair share: each claim passes the next number, which rotates the tenant that leads.
        self.claim_turns = itertools.count()

    @classmethod
    async def open(cls, dsn: str, *, min_connections: int, max_connections: int, migrate: bool) -> Database:
        """Migrate (unless told not to), open the pool, and start the listener."""
        if migrate:
            applied = await apply_migrations(dsn)
            if applied:
                log.info("migrations_applied", versions=applied)
        pool = await create_pool(dsn, min_connections, max_connections)
        hub = Hub()
        listener = Listener(dsn, hub)
        try:
            await listener.start()
        except BaseException:
            await pool.close()
            raise
        return cls(pool, hub, listener)

    async def close(self) -> None:
        await self.inserter.close()
        await self.completer.close()
        await self.listener.stop()
        await self.pool.close()

    async def ping(self, timeout: float = 2.0) -> bool:
        """Whether the database answers a trivial query within `timeout` seconds."""
        try:
            await asyncio.wait_for(self.pool.fetchval("SELECT 1"), timeout)
        except Exception:
            return False
        return True
