"""The workflow process's timers: sleeping steps' ends and waiting steps' time-outs.

The wake-ups are rows (`workflow_steps.wake_at`, migration 15), so nothing is held in memory that a
crash could lose. The loop takes every due wake-up (each exactly once across processes: SKIP
LOCKED, cleared by the statement that takes it), asks one index probe when the next is due, and
sleeps until then, or until a NOTIFY says a sooner one was armed. Its work grows with the wake-ups
that fall due, never with the number of sleeping steps.

Due wake-ups are applied where they are taken: a few lanes each take a batch with its workflows
locked and advance it in the same transaction (the advancer's batch code, without an outbox row
per wake-up), which is what lets a mass of sleeps falling due at one instant end within seconds.
What a lane cannot take (its workflow is busy in another transaction) or cannot apply (a batch
raised) becomes `timer` outbox rows, so the advancer's retry and set-aside rules apply to it.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from shared.db import workflows as workflows_db
from shared.db.database import Database
from shared.db.listener import TIMER
from shared.db.pool import is_unavailable
from shared.db.workflows import ApplyMany

log = structlog.get_logger("queueflow.workflow")

BATCH = 1000  # wake-ups turned into outbox rows per statement
APPLY_BATCH = 100  # wake-ups applied per transaction by a lane
LANES = 3  # transactions applying due wake-ups at once
SAFETY_SECS = 30.0  # the longest sleep between probes, should a NOTIFY be missed


class Timers:
    def __init__(
        self,
        db: Database,
        apply_many: ApplyMany,
        batch: int = BATCH,
        apply_batch: int = APPLY_BATCH,
        lanes: int = LANES,
        safety_secs: float = SAFETY_SECS,
    ) -> None:
        self.db = db
        self.apply_many = apply_many
        self.batch = batch
        self.apply_batch = apply_batch
        self.lanes = lanes
        self.safety_secs = safety_secs
        self._task: asyncio.Task[None] | None = None

    def describe(self) -> dict[str, object]:
        return {"batch": self.batch, "apply_batch": self.apply_batch, "lanes": self.lanes}

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="queueflow-timers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def fire_due(self) -> int:
        """Every due wake-up, now: applied by the lanes, and what they leave through the outbox;
        returns how many."""
        fired = sum(await asyncio.gather(*(self._lane() for _ in range(self.lanes))))
        while True:
            n = await workflows_db.fire_due_timers(self.db.pool, self.batch)
            fired += n
            if n < self.batch:
                return fired

    async def _lane(self) -> int:
        applied = 0
        while True:
            try:
                n = await workflows_db.apply_due_wake_ups(self.db.pool, self.apply_many, self.apply_batch)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # left due: the outbox takes them, one counted attempt at a time
                log.warning("workflow_wake_ups_failed", error=str(err), exc_info=not is_unavailable(err))
                return applied
            applied += n
            if n < self.apply_batch:
                return applied

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
