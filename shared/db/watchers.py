"""SSE watcher rows: while a stream watches a job or workflow, its changes are announced on the
events channels (the triggers only NOTIFY for watched rows). A row expires on its own if the
stream dies without removing it; the janitor prunes expired rows."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg

from shared.db.pool import Executor, Pool, transaction
from shared.db.queries import Q

# Tries of a workflow's flags that lose a deadlock to a transaction locking in another order.
_FLAG_TRIES = 3


@contextlib.asynccontextmanager
async def watching_job(db: Executor, job_id: uuid.UUID, for_secs: float) -> AsyncIterator[None]:
    """Announce the job's status changes while the block runs (at most `for_secs`)."""
    watcher = await db.fetchval(Q.watch_job, job_id, for_secs)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # it expires on its own
            await db.execute(Q.unwatch_job, watcher)


@contextlib.asynccontextmanager
async def watching_workflow(db: Pool, workflow_id: str, for_secs: float) -> AsyncIterator[None]:
    """Announce changes of the workflow and its steps while the block runs (at most `for_secs`)."""
    for attempt in range(_FLAG_TRIES):
        try:
            async with transaction(db) as conn:
                await conn.execute(Q.flag_workflow_watched, workflow_id)
                await conn.execute(Q.flag_workflow_steps_watched, workflow_id)
                watcher = await conn.fetchval(Q.watch_workflow, workflow_id, for_secs)
            break
        except asyncpg.exceptions.DeadlockDetectedError:
            if attempt == _FLAG_TRIES - 1:
                raise
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await db.execute(Q.unwatch_workflow, watcher)


async def prune_expired(db: Executor) -> None:
    await db.execute(Q.prune_job_watchers)
    await db.execute(Q.prune_workflow_watchers)
