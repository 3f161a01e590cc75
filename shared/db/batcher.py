"""Group commit for completions: concurrent complete calls share one UPDATE ... FROM unnest.

While one flush runs, new completions queue up and go out together in the next, so batching grows
with load and adds no delay when idle. Each caller still gets its own verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import asyncpg

from shared.db import jobs as jobs_db

_Item = tuple[uuid.UUID, uuid.UUID | None, dict[str, Any], "asyncio.Future[tuple[str, str | None]]"]


class CompletionBatcher:
    def __init__(self, pool: asyncpg.Pool, max_batch: int = 500) -> None:
        self.pool = pool
        self.max_batch = max_batch
        self._pending: list[_Item] = []
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="queueflow-completer")

    async def complete(self, job_id: uuid.UUID, token: uuid.UUID | None,
                       result: dict[str, Any]) -> tuple[str, str | None]:
        """('completed' | 'replay' | 'missing' | 'conflict', status) for one completion."""
        fut: asyncio.Future[tuple[str, str | None]] = asyncio.get_running_loop().create_future()
        self._pending.append((job_id, token, result, fut))
        self._wakeup.set()
        return await fut

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
                await self._flush(batch)

    async def _flush(self, batch: list[_Item]) -> None:
        try:
            verdicts = await jobs_db.complete_many(self.pool, [(i[0], i[1], i[2]) for i in batch])
        except Exception as err:  # noqa: BLE001 - every caller sees the failure
            for item in batch:
                if not item[3].done():
                    item[3].set_exception(err)
            return
        for item, verdict in zip(batch, verdicts, strict=True):
            if not item[3].done():
                item[3].set_result(verdict)

    async def close(self) -> None:
        # Let queued completions finish before the pool goes away.
        for _ in range(100):
            if not self._pending:
                break
            await asyncio.sleep(0.01)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
