"""The stats rollup (migration 39): the janitor's scan of ended minutes, its fold of captured
events, its backlog samples and pruning, and the series read back for GET /api/v1/stats/series.

Every statement is safe with any number of janitors: the scan runs under an exclusive advisory
lock (the one jobs_deleted takes shared) and moves rolled_up_to in the same transaction, the fold
takes capture rows with SKIP LOCKED, and a backlog sample overwrites its minute's."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from msgspec import Struct

from shared.db.pool import Executor, Pool
from shared.db.queries import Q
from shared.domain.stats import (
    BACKLOG,
    COUNTS,
    MAX_FAILING_TASKS,
    WINDOWS,
    FailingTask,
    FailingTasksResponse,
    Rollup,
    SeriesQuery,
    SeriesResponse,
    build_series,
    histogram_kinds,
    window_of,
)

# Minutes a scan counts at most (a janitor catching up after a stop does it in rounds).
SCAN_MINUTES = 60
# A minute is counted this long after it ended: the statements that wrote it have committed.
SCAN_LAG_SECS = 5.0
FOLD_ROUND = 5000


class Scanned(Struct, frozen=True):
    """One scan: the minutes [start, stop) it counted (none when stop <= start) and its jobs."""

    start: datetime
    stop: datetime
    jobs: int = 0

    @property
    def advanced(self) -> bool:
        return self.stop > self.start


async def scan(pool: Pool, lag_secs: float = SCAN_LAG_SECS, max_minutes: int = SCAN_MINUTES) -> Scanned:
    """Count the minutes that ended since the last scan from the job rows, and move rolled_up_to
    past them; with anything counted, file a backlog sample under the last of them."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(Q.stats_scan_lock)
        row = await conn.fetchrow(Q.stats_scan_range, lag_secs, max_minutes)
        assert row is not None
        start, stop = row["start"], row["stop"]
        if stop <= start:
            return Scanned(start, stop)
        await conn.execute(Q.stats_scan_clear, start, stop)
        jobs = int(await conn.fetchval(Q.stats_scan, start, stop))
        await conn.execute(Q.stats_sample_backlog, stop - timedelta(minutes=1))
    return Scanned(start, stop, jobs)


async def fold(pool: Pool, batch: int = FOLD_ROUND) -> int:
    """Add the captured events into the rollup, in rounds of `batch`; how many rows went."""
    folded = 0
    while True:
        n = int(await pool.fetchval(Q.stats_fold_captures, batch))
        folded += n
        if n < batch:
            return folded


async def prune(db: Executor, before: datetime) -> None:
    """Delete the rollup's minutes before `before`."""
    await db.execute(Q.stats_prune, before)


async def rolled_up_to(db: Executor) -> datetime:
    value: datetime = await db.fetchval(Q.stats_rolled_up_to)
    return value


async def rollup(db: Executor, tenant: str, query: SeriesQuery, start: datetime, end: datetime) -> Rollup:
    """The rollup's rows of the tenant over [start, end), by step, for the metrics asked."""
    queue = query.queue or ""
    args = (tenant, queue, start, end, query.step_secs)
    counts: dict[int, dict[str, int]] = {}
    backlog: dict[int, dict[str, int]] = {}
    histograms: dict[tuple[int, str], dict[int, int]] = defaultdict(dict)
    if any(m in COUNTS for m in query.metrics):
        for r in await db.fetch(Q.stats_counts, *args):
            counts[r["step"]] = {str(m): int(r[str(m)]) for m in COUNTS}
    if any(m in BACKLOG for m in query.metrics):
        for r in await db.fetch(Q.stats_backlog_samples, *args):
            backlog[r["step"]] = {str(m): int(r[str(m)]) for m in BACKLOG}
    kinds = histogram_kinds(query.metrics)
    if kinds:
        for r in await db.fetch(Q.stats_histograms, *args, kinds):
            histograms[(r["step"], r["kind"])][r["bucket"]] = int(r["jobs"])
    return Rollup(counts=counts, backlog=backlog, histograms=histograms)


async def failing_tasks(
    db: Executor, tenant: str, queue: str | None, start: datetime, end: datetime, limit: int
) -> list[FailingTask]:
    """The tenant's tasks with the most dead letters in [start, end) (on `queue`, or any)."""
    rows = await db.fetch(Q.stats_failing_tasks, tenant, queue, start, end, limit)
    return [
        FailingTask(task=r["task_name"], failures=int(r["failures"]), last_failed_at=r["last_failed_at"])
        for r in rows
    ]


async def series(db: Executor, tenant: str, query: SeriesQuery) -> SeriesResponse:
    """The asked series of the tenant (one queue's, or its queues' together), over the window that
    ends with the last minute the rollup counted (shared/domain/stats.py, window_of)."""
    counted = await rolled_up_to(db)
    start, end = window_of(query, counted)
    found = await rollup(db, tenant, query, start, end)
    step = timedelta(seconds=query.step_secs)
    return SeriesResponse(
        window=query.window,
        step=query.step,
        step_secs=query.step_secs,
        start=start,
        end=end,
        rolled_up_to=counted,
        timestamps=[start + i * step for i in range(query.points)],
        series=build_series(query, found),
        queue=query.queue,
    )


async def top_failing_tasks(
    db: Executor, tenant: str, queue: str | None, window: str
) -> FailingTasksResponse:
    """The tenant's tasks that failed for good most often in the last `window` (a name of
    WINDOWS, checked by the caller), on `queue` or any, from their dead letters."""
    end: datetime = await db.fetchval("SELECT now()")
    start = end - timedelta(seconds=WINDOWS[window])
    tasks = await failing_tasks(db, tenant, queue, start, end, MAX_FAILING_TASKS)
    return FailingTasksResponse(window=window, start=start, end=end, tasks=tasks, queue=queue)
