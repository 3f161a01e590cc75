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


_NewItem = tuple[str | None, jobs_db.NewJob, "asyncio.Future[str]"]


class InsertBatcher:
    """Group commit for single enqueues: concurrent POST /jobs calls share one transaction (one
    insert statement per tenant in it, one commit, one wake-up per queue). Batches form only under
    load, as for completions. Should a grouped insert fail, each job is retried on its own, so one
    bad job fails only its own request."""

    def __init__(self, pool: asyncpg.Pool, max_batch: int = 500) -> None:
        self.pool = pool
        self.max_batch = max_batch
        self._pending: list[_NewItem] = []
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="queueflow-inserter")

    async def insert(self, tenant: str | None, job: jobs_db.NewJob) -> str:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending.append((tenant, job, fut))
        self._wakeup.set()
        return await fut

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
                await self._flush(batch)

    async def _flush(self, batch: list[_NewItem]) -> None:
        by_tenant: dict[str | None, list[_NewItem]] = {}
        for item in batch:
            by_tenant.setdefault(item[0], []).append(item)
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                results = [(items, await jobs_db.insert_jobs(conn, tenant, [i[1] for i in items]))
                           for tenant, items in by_tenant.items()]
        except Exception:  # noqa: BLE001 - isolate the failure: one job at a time
            if len(batch) == 1:
                tenant, job, fut = batch[0]
                try:
                    [job_id] = await jobs_db.insert_jobs(self.pool, tenant, [job])
                except Exception as err:  # noqa: BLE001 - the caller gets its own error
                    if not fut.done():
                        fut.set_exception(err)
                    return
                if not fut.done():
                    fut.set_result(job_id)
                return
            for item in batch:
                await self._flush([item])
            return
        for items, ids in results:
            for (_, _, fut), job_id in zip(items, ids, strict=True):
                if not fut.done():
                    fut.set_result(job_id)

    async def close(self) -> None:
        for _ in range(100):
            if not self._pending:
                break
            await asyncio.sleep(0.01)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
