"""The janitor loop: sweep every --janitor-interval-secs, and sooner when a delayed job or a cron
occurrence falls due (a NOTIFY on the delayed channel re-runs it early).

Each sweep is safe with any number of janitors running (shared/db/janitor.py says how). A failed
sweep is logged and the loop goes on: lease recovery must never stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import structlog

from shared import metrics
from shared.config import Settings
from shared.db import audit, console_sessions, crons, events, janitor, limits, stats, watchers
from shared.db import workflows as workflows_db
from shared.db.database import Database
from shared.db.pool import Connection, is_unavailable
from shared.domain.jobs import JobStatus
from shared.domain.workflows import WorkflowDefinition
from shared.runtime.advance import start_workflow

log = structlog.get_logger("queueflow.janitor")

HOUSEKEEPING_SECS = 60.0
STALLED_AFTER_SECS = 30.0
# Live workflows the stalled-workflow sweep looks at per housekeeping pass: all of them in one pass
# up to this many; beyond, the sweep goes round in passes (1,000,000 live: about 3 hours), each
# about 0.1 s however many workflows live.
HEAL_SCAN = 5_000
# Limit keys (docs/limits.md): a key's state row is deleted once no claim has granted one of its
# jobs for --limit-key-idle-secs and nothing of it is running or due (the next claim that meets
# one of its jobs makes it again). Each housekeeping pass looks at up to LIMIT_KEY_PAGES pages of
# 10 x --janitor-batch keys, going round the table in key order.
LIMIT_KEY_PAGES = 10
# The stats rollup (migration 39): captured events are folded in, and ended minutes scanned, this
# often; a minute is counted a few seconds after it ends (shared/db/stats.py).
STATS_SECS = 5.0


class Janitor:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self._poke = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._unwatch = lambda: None
        self._heal_after: workflows_db.HealCursor = None
        self._limit_keys_after: tuple[str, str] = ("", "")

    async def start(self) -> None:
        self._unwatch = self.db.hub.watch_delayed(lambda _queue: self._poke.set())
        self._task = asyncio.create_task(self._run(), name="queueflow-janitor")

    def describe(self) -> dict[str, object]:
        return {"interval_secs": self.settings.janitor_interval_secs}

    async def stop(self) -> None:
        self._stopping = True
        self._poke.set()
        self._unwatch()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- sweeps ---------------------------------------------------------------------------------

    async def reclaim_expired(self, max_rounds: int = 10) -> int:
        """Expired leases go through the retry policy; returns how many were reclaimed."""
        total = 0
        batch = self.settings.janitor_batch
        for _ in range(max_rounds):
            reclaimed = await janitor.reclaim_expired(self.db.pool, batch)
            for job in reclaimed:
                metrics.LEASES_RECLAIMED.inc()
                if job.status is JobStatus.RETRYING:
                    metrics.JOBS_RETRIED.inc()
                else:
                    metrics.JOBS_FAILED.inc()
                    metrics.JOBS_DEAD_LETTERED.inc()
                log.info("lease_reclaimed", job_id=str(job.id), queue=job.queue, status=job.status)
            metrics.attempts_ended("lease_expired", [(job.task, job.attempt_secs) for job in reclaimed])
            total += len(reclaimed)
            if len(reclaimed) < batch:
                break
        return total

    async def fire_crons(self) -> int:
        return await crons.fire_due(
            self.db.pool, self.settings.default_queue, self.settings.janitor_batch, self._start_workflow
        )

    async def _start_workflow(
        self, conn: Connection, tenant: str | None, definition: WorkflowDefinition
    ) -> str:
        wf_id, _ = await start_workflow(
            conn, tenant, definition, self.settings.default_queue, limits=self.settings.workflow_limits
        )
        return wf_id

    async def time_out_workflows(self) -> int:
        count = await workflows_db.time_out_expired(self.db.pool, self.settings.janitor_batch)
        if count:
            log.info("workflows_timed_out", workflows=count)
        return count

    async def heal_stalled_workflows(self) -> int:
        """Queue a re-evaluation for live workflows that nothing could move forward any more,
        looking at the next HEAL_SCAN live workflows (a pass costs the same however many sleep)."""
        count, self._heal_after = await workflows_db.heal_stalled(
            self.db.pool, STALLED_AFTER_SECS, HEAL_SCAN, self._heal_after
        )
        if count:
            log.warning("workflows_healed", workflows=count)
        return count

    async def prune_idle_limit_keys(self) -> int:
        """Delete idle limit keys' state rows, a few pages further round the table each pass."""
        pruned = 0
        for _ in range(LIMIT_KEY_PAGES):
            _, deleted, after = await limits.prune_idle_keys(
                self.db.pool,
                self._limit_keys_after,
                10 * self.settings.janitor_batch,
                self.settings.limit_key_idle_secs,
            )
            pruned += deleted
            self._limit_keys_after = after or ("", "")
            if after is None:  # round the whole table: the next pass starts again
                break
        if pruned:
            log.info("limit_keys_pruned", keys=pruned)
        return pruned

    async def repair_limit_keys(self) -> int:
        """Set right the running counts of limit keys that disagree with their running jobs
        (none should: each one is logged as an error, with both figures)."""
        repaired = await limits.repair_running_counts(self.db.pool, self.settings.janitor_batch)
        for key in repaired:
            metrics.LIMIT_SLOTS_REPAIRED.inc()
            log.error(
                "limit_slots_repaired",
                tenant=key.tenant,
                key=key.key,
                recorded=key.recorded,
                running=key.actual,
            )
        return len(repaired)

    async def _in_rounds(self, delete: Callable[[int], Awaitable[int]]) -> int:
        """Call `delete(batch)` (rows it deleted, at most `batch`: 10 x --janitor-batch) until a
        round deletes fewer than a batch; the rows deleted in all."""
        batch = 10 * self.settings.janitor_batch
        deleted = 0
        while True:
            n = await delete(batch)
            deleted += n
            if n < batch:
                return deleted

    async def remove_lingering(self) -> int:
        """Completed jobs of removing queues kept for their watchers, once --removal-grace-secs
        has passed: deleted, in rounds of 10 x --janitor-batch until none is due."""
        grace = self.settings.removal_grace_secs
        removed = await self._in_rounds(lambda batch: janitor.remove_lingering(self.db.pool, grace, batch))
        if removed:
            log.info("completed_jobs_removed", jobs=removed)
        return removed

    async def roll_up_stats(self) -> stats.Scanned:
        """Fold the captured events into the stats rollup, then count the minutes that ended since
        the last scan (in rounds of an hour of them when catching up)."""
        await stats.fold(self.db.pool)
        while True:
            scanned = await stats.scan(self.db.pool)
            if scanned.advanced:
                log.debug("stats_rolled_up", start=scanned.start, stop=scanned.stop, jobs=scanned.jobs)
            if not scanned.advanced or scanned.stop - scanned.start < timedelta(minutes=stats.SCAN_MINUTES):
                return scanned

    async def prune_stats(self) -> None:
        await stats.prune(
            self.db.pool,
            await janitor.now(self.db.pool) - timedelta(hours=self.settings.stats_retention_hours),
        )

    async def prune_audit_log(self) -> int:
        """Audit entries older than --audit-retention-days (0: kept for ever), a round at a time."""
        days = self.settings.audit_retention_days
        if days <= 0:
            return 0
        pruned = await self._in_rounds(lambda batch: audit.prune(self.db.pool, days, batch))
        if pruned:
            log.info("audit_log_pruned", rows=pruned, older_than_days=days)
        return pruned

    async def prune_console_sessions(self) -> int:
        """The console's sign-in sessions past their end (docs/access.md, "Sessions"), a round at
        a time. Their rows hold the provider's tokens, so none outlives its session for long."""
        pruned = await self._in_rounds(lambda batch: console_sessions.prune_expired(self.db.pool, batch))
        if pruned:
            log.info("console_sessions_pruned", rows=pruned)
        return pruned

    async def prune(self, older_than_hours: float) -> int:
        deleted = await janitor.prune(self.db.pool, older_than_hours)
        if deleted:
            log.info("retention_pruned", rows=deleted, older_than_hours=older_than_hours)
        return deleted

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        since: datetime = await janitor.now(self.db.pool) - timedelta(
            seconds=max(60.0, s.janitor_interval_secs)
        )
        next_retention = loop.time() + s.retention_interval_secs
        next_housekeeping = loop.time()
        next_stats = loop.time()
        while not self._stopping:
            self._poke.clear()  # a delayed-job notification from now on re-runs the loop early
            try:
                await self.reclaim_expired()
                since = await janitor.wake_due_queues(self.db.pool, since)
                await limits.wake_limited_queues(self.db.pool)
                await limits.fold_releases(self.db.pool, 10 * s.janitor_batch)
                await self.fire_crons()
                await self.time_out_workflows()
                await self.remove_lingering()
                if loop.time() >= next_stats:
                    next_stats = loop.time() + STATS_SECS
                    await self.roll_up_stats()
                if loop.time() >= next_housekeeping:
                    next_housekeeping = loop.time() + HOUSEKEEPING_SECS
                    await watchers.prune_expired(self.db.pool)
                    await janitor.prune_lapsed_unique_keys(self.db.pool, 10 * s.janitor_batch)
                    await events.prune_expired(self.db.pool, 10 * s.janitor_batch)
                    await self.heal_stalled_workflows()
                    await self.repair_limit_keys()
                    await self.prune_idle_limit_keys()
                    await self.prune_stats()
                    await self.prune_audit_log()
                    await self.prune_console_sessions()
                if s.retention_hours is not None and loop.time() >= next_retention:
                    next_retention = loop.time() + s.retention_interval_secs
                    await self.prune(s.retention_hours)
                due_in = await janitor.seconds_until_next_due(self.db.pool)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # a failed sweep must never end lease recovery
                # An unreachable database is an operational state (warned, the next sweep retries),
                # anything else a bug worth its traceback.
                log.warning("janitor_sweep_failed", error=str(err), exc_info=not is_unavailable(err))
                due_in = None
            sleep = (
                s.janitor_interval_secs if due_in is None else min(s.janitor_interval_secs, due_in + 0.001)
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.005, sleep)):
                    await self._poke.wait()
