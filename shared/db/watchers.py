"""SSE watcher rows: while a stream watches a job or workflow, its changes are announced on the
events channels (the triggers only NOTIFY for watched rows). A row expires on its own if the
stream dies without removing it; the janitor prunes expired rows."""

from __future__ import annotations

import uuid

from shared.db.pool import Executor
from shared.db.queries import Q


async def watch_job(db: Executor, job_id: uuid.UUID, for_secs: float) -> uuid.UUID:
    return uuid.UUID(str(await db.fetchval(Q.watch_job, job_id, for_secs)))


async def unwatch_job(db: Executor, watcher: uuid.UUID) -> None:
    await db.execute(Q.unwatch_job, watcher)


async def watch_workflow(db: Executor, workflow_id: str, for_secs: float) -> uuid.UUID:
    return uuid.UUID(str(await db.fetchval(Q.watch_workflow, workflow_id, for_secs)))


async def unwatch_workflow(db: Executor, watcher: uuid.UUID) -> None:
    await db.execute(Q.unwatch_workflow, watcher)


async def prune_expired(db: Executor) -> None:
    await db.execute(Q.prune_job_watchers)
    await db.execute(Q.prune_workflow_watchers)
