"""Which queues are drained by push delivery (docs/push.md): the api's lease route refuses them
with a 409. Read from the database at most once a second (and at once after a change this process
made or heard of on its LISTEN connection), so a lease costs no query for it."""

from __future__ import annotations

import asyncio

from shared.db import push as push_db
from shared.db.database import Database
from shared.domain.push import PushedQueue, queue_is_pushed

# How long a read of the bindings is trusted when no change was announced: the longest a lease
# of a queue just bound elsewhere (a notification lost with the LISTEN connection) may still pass.
FRESH_SECS = 1.0


class PushedQueues:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._bound: dict[str, PushedQueue] = {}
        self._read_at: float | None = None
        self._reading: asyncio.Future[dict[str, PushedQueue]] | None = None
        self._reading_changes = 0
        self._changes = 0  # bumped by every change heard of: a read begun before one is not fresh
        self._unwatch = db.hub.watch_push(self.forget)

    def forget(self, _endpoint_id: str = "") -> None:
        """A binding changed: the next check reads them again."""
        self._changes += 1
        self._read_at = None

    def close(self) -> None:
        self._unwatch()

    async def check(self, queue: str, tenant: str | None) -> None:
        """Raise the 409 when `queue` is bound for `tenant` (a worker key's) or, for the worker
        token (`tenant` None: every tenant's jobs), when every tenant with the queue bound it."""
        pushed = (await self._current()).get(queue)
        if pushed is not None and pushed.refuses(tenant):
            raise queue_is_pushed(queue)

    async def _current(self) -> dict[str, PushedQueue]:
        loop = asyncio.get_running_loop()
        if self._read_at is not None and loop.time() - self._read_at < FRESH_SECS:
            return self._bound
        if self._reading is None or self._reading_changes != self._changes:
            self._reading_changes = self._changes
            self._reading = asyncio.ensure_future(self._read(loop.time(), self._changes))
        return await asyncio.shield(self._reading)

    async def _read(self, started: float, changes: int) -> dict[str, PushedQueue]:
        try:
            bound = await push_db.pushed_queues(self._db.pool)
        finally:
            if self._reading_changes == changes:
                self._reading = None
        if changes == self._changes:
            self._bound, self._read_at = bound, started
        return bound
