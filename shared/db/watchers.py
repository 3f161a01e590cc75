"""SSE watcher rows: while a stream watches a job or workflow, its changes are announced on the
events channels (the triggers only NOTIFY for watched rows). A row expires on its own if the
stream dies without removing it; the janitor prunes expired rows."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

from shared.db.pool import Executor
from shared.db.queries import Q


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
async def watching_workflow(db: Executor, workflow_id: str, for_secs: float) -> AsyncIterator[None]:
    """Announce changes of the workflow and its steps while the block runs (at most `for_secs`)."""
    watcher = await db.fetchval(Q.watch_workflow, workflow_id, for_secs)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            await db.execute(Q.unwatch_workflow, watcher)


async def prune_expired(db: Executor) -> None:
    await db.execute(Q.prune_job_watchers)
    await db.execute(Q.prune_workflow_watchers)
