"""The workflow process's timers: sleeping steps' ends and waiting steps' time-outs.

The wake-ups are rows (`workflow_steps.wake_at`, migration 15), so nothing is held in memory that a
crash could lose. The loop takes every due wake-up (each exactly once across processes: SKIP
LOCKED, cleared by the statement that turns it into a `timer` outbox row for the advancer), asks one
index probe when the next is due, and sleeps until then, or until a NOTIFY says a sooner one was
armed. Its work grows with the wake-ups that fall due, never with the number of sleeping steps.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from shared.db import workflows as workflows_db
from shared.db.database import Database
from shared.db.listener import TIMER
from shared.db.pool import is_unavailable

log = structlog.get_logger("queueflow.workflow")

BATCH = 1000  # wake-ups turned into outbox rows per statement
SAFETY_SECS = 30.0  # the longest sleep between probes, should a NOTIFY be missed


class Timers:
    def __init__(self, db: Database, batch: int = BATCH, safety_secs: float = SAFETY_SECS) -> None:
        self.db = db
        self.batch = batch
        self.safety_secs = safety_secs
        self._task: asyncio.Task[None] | None = None

    def describe(self) -> dict[str, object]:
        return {"batch": self.batch}

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="queueflow-timers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def fire_due(self) -> int:
        """Every due wake-up, now; returns how many."""
        fired = 0
        while True:
            n = await workflows_db.fire_due_timers(self.db.pool, self.batch)
            fired += n
            if n < self.batch:
                return fired

    async def _run(self) -> None:
        hub = self.db.hub
        while True:
            seen = hub.epoch(TIMER)
            try:
                if await self.fire_due():
                    log.debug("workflow_timers_fired")
                due_in = await workflows_db.seconds_until_next_wake_up(self.db.pool)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the database is away: try again shortly
                log.warning("workflow_timers_failed", error=str(err), exc_info=not is_unavailable(err))
                due_in = 1.0
            wait = self.safety_secs if due_in is None else min(self.safety_secs, due_in + 0.001)
            await hub.wait(TIMER, seen, max(0.001, wait))
