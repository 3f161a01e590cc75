"""The advancer loop: consumers take outbox rows with SKIP LOCKED and apply each in one
transaction (lock the workflow, record the outcome, schedule ready steps, settle, delete the row).

Several advancer processes, and several consumers in each, are safe: a row is taken by exactly
one, and two rows of the same workflow serialise on the workflow's row lock. A crash rolls the
transaction back and leaves the row for the next taker. NOTIFY wakes an idle consumer; the safety
poll covers a missed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

import structlog

from shared.db import workflows as workflows_db
from shared.db.database import Database
from shared.db.listener import ADVANCE
from shared.db.pool import Connection, is_unavailable
from shared.domain.workflows import OutboxEvent
from shared.runtime.advance import advance

log = structlog.get_logger("queueflow.workflow")

CONSUMERS = 4


class Advancer:
    def __init__(
        self, db: Database, default_queue: str, poll_secs: float, consumers: int = CONSUMERS
    ) -> None:
        self.db = db
        self.poll_secs = poll_secs
        self.consumers = consumers
        self._apply = functools.partial(_apply, default_queue=default_queue)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def describe(self) -> dict[str, object]:
        return {"consumers": self.consumers}

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._consume(), name=f"queueflow-advancer-{i}")
            for i in range(self.consumers)
        ]

    async def stop(self) -> None:
        self._stopping = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def step(self) -> bool:
        """Apply one outbox row; False when there was none to take."""
        return await workflows_db.consume_outbox(self.db.pool, self._apply)

    async def _consume(self) -> None:
        hub = self.db.hub
        while not self._stopping:
            seen = hub.epoch(ADVANCE)
            try:
                took = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the database is away, or a bug in one event: back off, go on
                log.warning("advance_failed", error=str(err), exc_info=not is_unavailable(err))
                await asyncio.sleep(0.5)
                continue
            if took:
                hub.poke(ADVANCE)  # there may be more: wake another consumer
                continue
            await hub.wait(ADVANCE, seen, self.poll_secs)


async def _apply(conn: Connection, event: OutboxEvent, *, default_queue: str) -> None:
    await advance(conn, event, default_queue)
