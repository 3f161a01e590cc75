"""The process's connection to PostgreSQL: the pool, the one LISTEN connection feeding the in-memory
hub, and the group-commit writers. Opened once per process (every service the process runs shares
it) and closed in reverse order."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import structlog

from shared import metrics
from shared.config import ConfigError
from shared.db import jobs as jobs_db
from shared.db import pooler
from shared.db.batcher import CompletionBatcher, FailureBatcher, HeartbeatBatcher, InsertBatcher
from shared.db.listener import Hub, Listener
from shared.db.migrate import apply_migrations
from shared.db.pool import Pool, create_pool, is_database_error, is_unavailable, until_answered, where
from shared.db.pooler import Poller, Route
from shared.tracing import Tracer

log = structlog.get_logger("queueflow.db")

# How long `close` waits for the background work under way (a claim takes milliseconds).
CLOSE_WAIT_SECS = 10.0
# A database not reachable at start is tried again after this, doubling up to the most.
START_RETRY_FIRST_SECS = 0.5
START_RETRY_MAX_SECS = 10.0


async def _waiting_at_start(dsn: str, attempt: Callable[[], Awaitable[Database]]) -> Database:
    """`attempt()`, again while the database cannot be reached yet (not started, still starting, a
    name that does not resolve yet, no connection slot): 0.5 s doubling to 10 s, with a warning
    each time and no traceback, so a process started before its database serves once it comes up.
    A database that answers and refuses (a wrong password, an unknown database or role, a malformed
    URL) is a setting to change, not an outage to wait out: ConfigError, saying so without the
    URL's user or password."""
    delay = START_RETRY_FIRST_SECS
    while True:
        try:
            return await attempt()
        except Exception as err:
            if is_unavailable(err):
                log.warning(
                    "database_unreachable_at_start",
                    database=where(dsn),
                    error=str(err) or type(err).__name__,
                    retry_in_secs=delay,
                )
            elif is_database_error(err):
                raise ConfigError(
                    f"cannot start: the database at {where(dsn)} refused the connection:"
                    f" {str(err) or type(err).__name__}"
                ) from None
            else:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, START_RETRY_MAX_SECS)


class Database:
    def __init__(
        self,
        pool: Pool,
        hub: Hub,
        listener: Listener | Poller,
        tracer: Tracer | None = None,
        route: Route | None = None,
    ) -> None:
        self.pool = pool
        self.hub = hub
        self.listener = listener
        # How the process reaches PostgreSQL (a transaction pooler on the way?), for /ready.
        self.route = route or Route()
        # The process's tracer when it exports traces (shared/tracing.py), else None: the claim,
        # the completions and the enqueues ask only that.
        self.tracer = tracer
        self.completer = CompletionBatcher(pool, tracer)
        self.inserter = InsertBatcher(pool)
        # The worker protocol's heartbeats (those without progress) and failures.
        self.heartbeats = HeartbeatBatcher(pool)
        self.failures = FailureBatcher(pool, tracer)
        # Fair share: each claim passes the next number, which rotates the tenant that leads.
        self.claim_turns = itertools.count()
        self._give_backs: set[asyncio.Task[None]] = set()
        self._under_way: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        min_connections: int,
        max_connections: int,
        migrate: bool,
        direct_dsn: str | None = None,
        statement_cache_size: int = 100,
        safety_poll_secs: float = pooler.POLL_SECS,
        tracer: Tracer | None = None,
    ) -> Database:
        """Find out whether a transaction pooler is on the way (shared/db/pooler.py), migrate
        (unless told not to), open the pool, and start the listener, waiting for the database at
        start (`_waiting_at_start`). The pool uses `dsn`, which may be a transaction pooler's; the
        migrations and the LISTEN connection use `direct_dsn` (default `dsn`), which should be a
        session of its own. Through a transaction pooler the pool prepares its statements unnamed
        unless named ones survive it, and where LISTEN would go through one a Poller wakes every
        waiter at least every POLL_SECS (or `safety_poll_secs`, the waiters' own safety poll, when
        shorter) instead."""
        direct = direct_dsn or dsn
        poll_secs = min(pooler.POLL_SECS, safety_poll_secs)

        async def attempt() -> Database:
            route = await pooler.plan(dsn, direct, statement_cache_size, poll_secs)
            metrics.DB_TRANSACTION_POOLER.set(1 if "DATABASE_URL" in route.pooled else 0)
            metrics.NOTIFICATIONS_POLLED.set(0 if route.listen else 1)
            if migrate:
                applied = await apply_migrations(direct)
                if applied:
                    log.info("migrations_applied", versions=applied)
            pool = await create_pool(dsn, min_connections, max_connections, route.statement_cache_size)
            hub = Hub()
            listener = Listener(direct, hub) if route.listen else Poller(hub, poll_secs)
            try:
                await listener.start()
            except BaseException:
                await pool.close()
                raise
            return cls(pool, hub, listener, tracer, route)

        return await _waiting_at_start(dsn, attempt)

    def give_back_unanswered_claim(self, queue: str, key: uuid.UUID) -> None:
        """A claim's answer was lost with its connection (it may have committed, leasing jobs no
        one holds): give its jobs back in the background, once the database answers again, rather
        than leave them to their leases' expiry and a retry each. Idempotent; ends with the process
        (the janitor then reclaims them when the leases expire)."""
        task = asyncio.create_task(self._give_back(queue, key), name="queueflow-claim-give-back")
        self._give_backs.add(task)
        task.add_done_callback(self._give_backs.discard)

    def start(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run `work` in the background, to its end: `close` waits for it before it closes the
        pool (a shared claim under way must hand its jobs out, or give back those no one heard
        of, rather than leave them leased until their leases expire and a retry each)."""
        task = asyncio.create_task(work, name=name)
        self._under_way.add(task)
        task.add_done_callback(self._under_way.discard)

    async def _give_back(self, queue: str, key: uuid.UUID) -> None:
        try:
            released = await until_answered(lambda: jobs_db.release_unanswered_claim(self.pool, queue, key))
        except Exception:
            log.exception("claim_give_back_failed", queue=queue)
            return
        if released:
            log.warning("unanswered_claim_given_back", queue=queue, jobs=released)

    async def close(self) -> None:
        if self._under_way:
            _, late = await asyncio.wait(list(self._under_way), timeout=CLOSE_WAIT_SECS)
            for task in late:
                task.cancel()
        for task in list(self._give_backs):
            task.cancel()
        await self.inserter.close()
        await self.completer.close()
        await self.heartbeats.close()
        await self.failures.close()
        await self.listener.stop()
        await self.pool.close()

    async def ping(self, timeout: float = 2.0) -> bool:
        """Whether the database answers a trivial query within `timeout` seconds."""
        try:
            await asyncio.wait_for(self.pool.fetchval("SELECT 1"), timeout)
        except Exception:
            return False
        return True
