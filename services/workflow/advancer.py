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
from collections.abc import AsyncIterator

import asyncpg
import structlog
from aiohttp import web

from services.workflow.engine import advance
from shared.db.listener import ADVANCE
from shared.db.queries import Q
from shared.db.workflows import OUTBOX_ATTEMPTS, fail_workflow
from shared.runtime import Resources

log = structlog.get_logger("queueflow.workflow")

CONSUMERS = 4
# Failures that say nothing about the row: the connection or the server, or a transaction that
# lost a race. They do not count as an attempt.
_NOT_THE_ROWS_FAULT = (
    OSError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
)


class Advancer:
    def __init__(self, res: Resources, consumers: int = CONSUMERS) -> None:
        self.res = res
        self.consumers = consumers
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    def start(self) -> None:
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
        event = None
        async with self.res.pool.acquire() as conn:
            try:
                async with conn.transaction():
                    event = await conn.fetchrow(Q.take_outbox, OUTBOX_ATTEMPTS)
                    if event is None:
                        return False
                    await advance(conn, event, self.res.settings.default_queue)
                    await conn.execute(Q.delete_outbox, event["id"])
            except _NOT_THE_ROWS_FAULT:
                raise  # the consumer backs off; the row is taken again
            except Exception as err:
                if event is None:
                    raise
                await self._failed_attempt(conn, event, err)
        return True

    async def _failed_attempt(self, conn: asyncpg.Connection, event: asyncpg.Record, err: Exception) -> None:
        """The row's transaction rolled back: count the attempt, so that a poison row cannot block
        the outbox. At the last attempt the workflow fails, naming the error, instead of staying
        live with nothing left to move it."""
        error = f"{type(err).__name__}: {err}"[:500]
        log.error(
            "advance_event_failed",
            outbox_id=event["id"],
            workflow_id=event["workflow_id"],
            error=error,
            exc_info=err,
        )
        attempts = await conn.fetchval(Q.outbox_failed, event["id"], error, event["attempts"])
        if attempts is not None and attempts >= OUTBOX_ATTEMPTS:
            async with conn.transaction():
                failed = await fail_workflow(
                    conn, event["workflow_id"], f"workflow advancement failed: {error}"
                )
            log.error(
                "workflow_advancement_abandoned",
                workflow_id=event["workflow_id"],
                outbox_id=event["id"],
                workflow_failed=failed,
            )

    async def _consume(self) -> None:
        hub = self.res.hub
        while not self._stopping:
            seen = hub.epoch(ADVANCE)
            try:
                took = await self.step()
            except asyncio.CancelledError:
                raise
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
                log.warning("advance_failed", error=str(err))
                await asyncio.sleep(0.5)
                continue
            except Exception:  # a bug in one event must not stop advancement of the others
                log.exception("advance_failed")
                await asyncio.sleep(0.5)
                continue
            if took:
                hub.poke(ADVANCE)  # there may be more: wake another consumer
                continue
            await hub.wait(ADVANCE, seen, self.res.settings.worker_poll_secs)


def workflow_ctx(res: Resources):
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        advancer = Advancer(res)
        advancer.start()
        log.info("advancer_started", consumers=advancer.consumers)
        try:
            yield
        finally:
            await advancer.stop()

    return ctx
