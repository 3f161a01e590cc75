"""The in-process worker runtime: per queue, lease up to --workers jobs at a time and run their
handlers concurrently, with the same guarantees as remote workers.

- The lease covers the job's timeout plus --lease-grace-secs, so a healthy handler never needs a
  heartbeat; a crashed process's jobs are reclaimed by the janitor through the retry policy.
- `timeout_secs` cancels the handler (a retryable failure: "job exceeded its timeout").
- Cancelling a running job through the API cancels its handler: the job-events notification for
  the job reaches this process, which cancels the handler's task and reports nothing.
- Shutdown stops leasing, then waits up to --shutdown-grace-secs for in-flight handlers; what is
  still running after that is cancelled and released (claimable again at once, no retry spent).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import structlog
from aiohttp import web

from services.worker.builtins import register_builtins
from services.worker.registry import JobContext, Registry, Task
from shared import metrics
from shared.db import jobs as jobs_db
from shared.db.queries import Q
from shared.leasing import lease_jobs
from shared.runtime import Resources

log = structlog.get_logger("queueflow.worker")

TASK_HEARTBEAT_SECS = 10.0


class WorkerRuntime:
    def __init__(self, res: Resources, registry: Registry) -> None:
        self.res = res
        self.registry = registry
        self.process_id = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._loops: list[asyncio.Task[None]] = []
        self._inflight: set[asyncio.Task[None]] = set()
        self._leases: dict[asyncio.Task[None], tuple[uuid.UUID, uuid.UUID]] = {}
        self._stopping = False

    async def start(self) -> None:
        await self._register_tasks()
        self._loops = [asyncio.create_task(self._queue_loop(q), name=f"queueflow-worker-{q}")
                       for q in self.res.settings.worker_queues]
        self._loops.append(asyncio.create_task(self._task_heartbeat(), name="queueflow-task-heartbeat"))
        self.res.task_names.update(self.registry.names())

    async def stop(self) -> None:
        """Stop leasing, drain in-flight handlers for up to the grace period, then cancel the rest."""
        self._stopping = True
        for t in self._loops:
            t.cancel()
        for t in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._inflight:
            log.info("worker_draining", jobs=len(self._inflight))
            _, pending = await asyncio.wait(self._inflight, timeout=self.res.settings.shutdown_grace_secs)
            leases = [self._leases[t] for t in pending if t in self._leases]
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2)
                released = 0
                for job_id, token in leases:
                    with contextlib.suppress(Exception):
                        released += await self.res.pool.fetchval(Q.release_job, job_id, token) is not None
                log.warning("worker_released_jobs", jobs=len(pending), released=released)
        with contextlib.suppress(Exception):
            await self.res.pool.execute(Q.unregister_tasks, self.process_id)

    async def _register_tasks(self) -> None:
        await self.res.pool.execute(Q.register_tasks, self.process_id, self.registry.names(),
                                    list(self.res.settings.worker_queues))

    async def _task_heartbeat(self) -> None:
        while True:
            await asyncio.sleep(TASK_HEARTBEAT_SECS)
            try:
                await self._register_tasks()
            except (OSError, asyncpg.PostgresError) as err:
                log.warning("task_heartbeat_failed", error=str(err))

    async def _queue_loop(self, queue: str) -> None:
        s = self.res.settings
        mine: set[asyncio.Task[None]] = set()
        while not self._stopping and not self.res.draining:
            free = s.workers - len(mine)
            if free <= 0:
                await asyncio.wait(mine, return_when=asyncio.FIRST_COMPLETED)
                continue
            try:
                rows = await lease_jobs(self.res, queue, free, s.lease_secs, s.worker_poll_secs,
                                        timeout_grace=s.lease_grace_secs)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
                log.warning("claim_failed", queue=queue, error=str(err))
                await asyncio.sleep(1.0)
                continue
            for row in rows:
                task = asyncio.create_task(self._run(row))
                mine.add(task)
                self._inflight.add(task)
                self._leases[task] = (row["id"], row["lease_token"])
                task.add_done_callback(self._forget)
                task.add_done_callback(mine.discard)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._leases.pop(task, None)

    async def _run(self, row: asyncpg.Record) -> None:
        job = jobs_db.to_job(row)
        token: uuid.UUID = row["lease_token"]
        metrics.QUEUE_WAIT.labels(job.queue_name).observe(
            max(0.0, (row["started_at"] - row["scheduled_at"]).total_seconds()) if job.delivery_count == 1 else 0.0)
        task = self.registry.get(job.task_name)
        if task is None:
            await jobs_db.fail(self.res.pool, row["id"], token, f"no handler registered for task '{job.task_name}'",
                               retryable=False, reason="handler_not_found")
            log.warning("job_dead_lettered", job_id=job.id, task=job.task_name, reason="handler_not_found")
            return
        try:
            await self._execute(task, job, row["id"], token)
        except Exception:  # a report that failed: the lease expires and the janitor retries
            log.exception("job_report_failed", job_id=job.id)

    async def _execute(self, task: Task, job: Any, job_id: uuid.UUID, token: uuid.UUID) -> None:
        ctx = JobContext(job=job, cancelled=asyncio.Event())
        handler_task = asyncio.create_task(self._call(task, ctx))

        def on_status(status: str) -> None:
            if status == "cancelled":
                ctx.cancelled.set()
                handler_task.cancel()

        unsubscribe = self.res.hub.watch_job(job.id, on_status)
        timeout = task.timeout_secs or int(job.config.get("timeout_secs") or 300)
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(asyncio.shield(handler_task), max(1, timeout))
        except TimeoutError:
            handler_task.cancel()
            await self._fail(job_id, token, f"job exceeded its timeout of {max(1, timeout)}s", True)
            return
        except asyncio.CancelledError:
            if ctx.cancelled.is_set() and not self._current_cancelled():
                log.info("job_handler_cancelled", job_id=job.id)
                return  # cancelled through the API: the server owns the outcome
            handler_task.cancel()
            raise
        except Exception as err:  # noqa: BLE001 - handler errors are the retry policy's business
            retryable = getattr(err, "retryable", True) is not False
            await self._fail(job_id, token, str(err) or type(err).__name__, retryable)
            return
        finally:
            unsubscribe()
            metrics.HANDLER_DURATION.labels(task.name).observe(time.perf_counter() - started)
        if result is not None and not isinstance(result, dict):
            await self._fail(job_id, token, f"handler returned {type(result).__name__}, not an object", False)
            return
        await self.res.completer.complete(job_id, token, result or {})

    @staticmethod
    def _current_cancelled() -> bool:
        current = asyncio.current_task()
        return current is not None and current.cancelling() > 0

    async def _call(self, task: Task, ctx: JobContext) -> Any:
        if task.is_async:
            return await task.handler(ctx)  # type: ignore[misc]
        return await asyncio.to_thread(task.handler, ctx)

    async def _fail(self, job_id: uuid.UUID, token: uuid.UUID, error: str, retryable: bool) -> None:
        verdict, _ = await jobs_db.fail(self.res.pool, job_id, token, error, retryable)
        log.info("job_failed", job_id=str(job_id), outcome=verdict, retryable=retryable)


def default_registry() -> Registry:
    registry = Registry()
    register_builtins(registry)
    return registry


def worker_ctx(res: Resources, registry: Registry | None = None):  # noqa: ANN201 - cleanup-context factory
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        runtime = WorkerRuntime(res, registry or default_registry())
        await runtime.start()
        log.info("worker_started", queues=list(res.settings.worker_queues), workers=res.settings.workers,
                 tasks=runtime.registry.names())
        try:
            yield
        finally:
            await runtime.stop()

    return ctx
