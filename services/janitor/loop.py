"""The janitor loop: sweep every --janitor-interval-secs, and sooner when a delayed job falls due."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import timedelta

import structlog
from aiohttp import web

from services.janitor import sweeps
from shared.runtime import Resources

log = structlog.get_logger("queueflow.janitor")

HOUSEKEEPING_SECS = 60.0


class Janitor:
    def __init__(self, res: Resources) -> None:
        self.res = res
        self._poke = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._unwatch = self.res.hub.watch_delayed(lambda _queue: self._poke.set())
        self._task = asyncio.create_task(self._run(), name="queueflow-janitor")

    async def stop(self) -> None:
        self._stopping = True
        self._poke.set()
        self._unwatch()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        s = self.res.settings
        loop = asyncio.get_running_loop()
        since = await self.res.pool.fetchval("SELECT now()") - timedelta(
            seconds=max(60.0, s.janitor_interval_secs)
        )
        next_retention = loop.time() + s.retention_interval_secs
        next_housekeeping = loop.time()
        while not self._stopping:
            self._poke.clear()  # a delayed-job notification from now on re-runs the loop early
            try:
                await sweeps.reclaim_expired(self.res)
                since = await sweeps.wake_due_queues(self.res, since)
                await sweeps.fire_crons(self.res)
                await sweeps.time_out_workflows(self.res)
                if loop.time() >= next_housekeeping:
                    next_housekeeping = loop.time() + HOUSEKEEPING_SECS
                    await sweeps.prune_watchers(self.res)
                    await sweeps.heal_stalled_workflows(self.res)
                if s.retention_hours is not None and loop.time() >= next_retention:
                    next_retention = loop.time() + s.retention_interval_secs
                    await sweeps.prune(self.res, s.retention_hours)
                due_in = await sweeps.seconds_until_next_due(self.res)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed sweep must never end lease recovery
                log.exception("janitor_sweep_failed")
                due_in = None
            sleep = (
                s.janitor_interval_secs if due_in is None else min(s.janitor_interval_secs, due_in + 0.001)
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.005, sleep)):
                    await self._poke.wait()


def janitor_ctx(res: Resources):
    async def ctx(app: web.Application) -> AsyncIterator[None]:
        janitor = Janitor(res)
        janitor.start()
        log.info("janitor_started", interval_secs=res.settings.janitor_interval_secs)
        try:
            yield
        finally:
            await janitor.stop()

    return ctx
