"""The in-process workers' task registry: which tasks live worker processes handle (GET /tasks)."""

from __future__ import annotations

from collections.abc import Sequence

from shared.db.pool import Executor
from shared.db.queries import Q


async def register_tasks(db: Executor, process_id: str, tasks: Sequence[str], queues: Sequence[str]) -> None:
    """Record (or refresh) that `process_id` handles `tasks` on `queues`."""
    await db.execute(Q.register_tasks, process_id, list(tasks), list(queues))


async def unregister_tasks(db: Executor, process_id: str) -> None:
    """Forget `process_id`'s tasks (and rows of processes silent for an hour)."""
    await db.execute(Q.unregister_tasks, process_id)


async def live_tasks(db: Executor, seen_within_secs: float) -> list[str]:
    return [r["task_name"] for r in await db.fetch(Q.live_tasks, seen_within_secs)]
