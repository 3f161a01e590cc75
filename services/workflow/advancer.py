"""The advancer loop: consumers take outbox rows with SKIP LOCKED, a batch at a time, and apply
them in one transaction (lock the workflows, record each outcome, schedule ready steps, settle,
delete the rows).

Several advancer processes, and several consumers in each, are safe: a row is taken by exactly
one, and two rows of the same workflow serialise on the workflow's row lock. A crash rolls the
transaction back and leaves the rows for the next taker; a batch that fails is retaken one row at
a time, so one bad row cannot hold the others back. Batches cost no latency: a consumer takes what
is there, one row when one is. NOTIFY wakes an idle consumer; the safety poll covers a missed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

import structlog

from shared.db import workflows as workflows_db
from shared.db.database import Database
from shared.db.listener import ADVANCE
from shared.db.pool import is_unavailable
from shared.domain.workflows import WorkflowLimits
from shared.runtime.advance import advance, advance_many

log = structlog.get_logger("queueflow.workflow")

CONSUMERS = 4
BATCH = 100  # outbox rows per transaction, at most


class Advancer:
    def __init__(
        self,
        db: Database,
        default_queue: str,
        poll_secs: float,
        consumers: int = CONSUMERS,
        batch: int = BATCH,
        *,
        limits: WorkflowLimits,
    ) -> None:
        self.db = db
        self.poll_secs = poll_secs
        self.consumers = consumers
        self.batch = batch
        self._apply = functools.partial(advance, default_queue=default_queue, tracer=db.tracer, limits=limits)
        self._apply_many = functools.partial(
            advance_many, default_queue=default_queue, tracer=db.tracer, limits=limits
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def describe(self) -> dict[str, object]:
        return {"consumers": self.consumers, "batch": self.batch}

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

    async def step(self) -> int:
        """Apply a batch of outbox rows; returns how many were taken (0: none)."""
        return await workflows_db.consume_outbox_batch(
            self.db.pool, self._apply, self._apply_many, self.batch
        )

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
