"""What in-process handlers report while they run: progress and log lines (docs/visibility.md).

`ctx.progress(...)` and `ctx.log(...)` only note the report here (from the event loop or from a sync
handler's thread); nothing is written from the call. `JobNotes` writes what was noted at most once
a second (one statement per job with news: its lines in calls of at most MAX_LOG_LINES lines and
MAX_LOG_CALL_BYTES of message, its latest progress), so a chatty handler costs a statement a second,
not one per line. When a handler ends, the runtime has the job's notes written before its outcome
(`settle`), so the last progress and the last lines are in place when the job completes.

A write that fails (the job cancelled or reclaimed meanwhile, the database away) is logged and
dropped: a report never changes a job's outcome. A job's buffer keeps at most MAX_PENDING_LINES
unwritten lines; past that its newest lines are dropped and counted in the log.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from shared.db import jobs as jobs_db
from shared.db import visibility as visibility_db
from shared.db.database import Database
from shared.domain.errors import DomainError
from shared.domain.visibility import MAX_LOG_CALL_BYTES, MAX_LOG_LINES, NewLogLine, Progress

log = structlog.get_logger("queueflow.worker")

FLUSH_SECS = 1.0
MAX_PENDING_LINES = 10_000


@dataclass
class _Pending:
    """One job's unwritten reports."""

    token: uuid.UUID
    lines: list[NewLogLine] = field(default_factory=list)
    dropped: int = 0
    progress: Progress | None = None


def log_calls(lines: list[NewLogLine]) -> list[list[NewLogLine]]:
    """`lines` cut into calls the log statement takes: at most MAX_LOG_LINES lines and
    MAX_LOG_CALL_BYTES of message each (a longer message was cut when it was noted)."""
    calls: list[list[NewLogLine]] = []
    size = MAX_LOG_CALL_BYTES + 1
    for line in lines:
        length = len(line.message.encode(errors="surrogateescape"))
        if size + length > MAX_LOG_CALL_BYTES or len(calls[-1]) == MAX_LOG_LINES:
            calls.append([])
            size = 0
        calls[-1].append(line)
        size += length
    return calls


class JobNotes:
    """The runtime's writer of its handlers' reports. Thread-safe `note_*`; the rest runs on the
    event loop."""

    def __init__(self, db: Database, max_bytes: int) -> None:
        self.db = db
        self.max_bytes = max_bytes
        self._pending: dict[uuid.UUID, _Pending] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._news = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._writing: dict[uuid.UUID, asyncio.Future[None]] = {}  # writes under way, per job

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._writer = asyncio.create_task(self._write_loop(), name="queueflow-job-notes")

    async def stop(self) -> None:
        """Write what is still noted, then stop."""
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        for job_id in list(self._pending):
            await self.settle(job_id)

    # -- noting (any thread) ----------------------------------------------------------------------

    def note_progress(self, job_id: uuid.UUID, token: uuid.UUID, progress: Progress) -> None:
        self._note(job_id, token, lambda p: setattr(p, "progress", progress))

    def note_line(self, job_id: uuid.UUID, token: uuid.UUID, line: NewLogLine) -> None:
        def add(p: _Pending) -> None:
            if len(p.lines) < MAX_PENDING_LINES:
                p.lines.append(line)
            else:
                p.dropped += 1

        self._note(job_id, token, add)

    def _note(self, job_id: uuid.UUID, token: uuid.UUID, change: Callable[[_Pending], None]) -> None:
        with self._lock:
            first = not self._pending
            pending = self._pending.get(job_id)
            if pending is None:
                pending = self._pending[job_id] = _Pending(token)
            change(pending)
        if first and self._loop is not None:
            self._loop.call_soon_threadsafe(self._news.set)

    def has_notes(self, job_id: uuid.UUID) -> bool:
        """Whether the job has reports not yet written: noted, or being written now."""
        return job_id in self._pending or job_id in self._writing

    # -- writing (the event loop) -----------------------------------------------------------------

    async def _write_loop(self) -> None:
        while True:
            if not self._pending:  # what was noted while the last pass wrote is written now
                await self._news.wait()
            self._news.clear()
            for job_id in list(self._pending):
                await self.settle(job_id)
            await asyncio.sleep(FLUSH_SECS)  # at most one write a second per job

    async def settle(self, job_id: uuid.UUID) -> None:
        """Write what `job_id` has noted: its lines first, then its progress. A write of the job
        already under way (the periodic pass's) is waited for first, so that when this returns
        everything noted before the call is written (or given up)."""
        running = self._writing.get(job_id)
        if running is not None:
            await asyncio.shield(running)
        with self._lock:
            pending = self._pending.pop(job_id, None)
        if pending is None:
            return
        writing = asyncio.ensure_future(self._write(job_id, pending))
        self._writing[job_id] = writing
        try:
            await asyncio.shield(writing)
        finally:
            if self._writing.get(job_id) is writing:
                del self._writing[job_id]

    async def _write(self, job_id: uuid.UUID, pending: _Pending) -> None:
        if pending.dropped:
            log.warning("job_log_lines_dropped", job_id=str(job_id), lines=pending.dropped)
        pool = self.db.pool
        try:
            for call in log_calls(pending.lines):
                await visibility_db.append_logs(pool, job_id, pending.token, call, self.max_bytes)
            if pending.progress is not None:
                await jobs_db.report_progress(pool, job_id, pending.token, pending.progress)
        except DomainError as err:  # cancelled, reclaimed or gone meanwhile
            log.info("job_report_dropped", job_id=str(job_id), reason=err.message)
        except Exception as err:  # the database away: reports are not worth holding a job for
            log.warning("job_report_dropped", job_id=str(job_id), error=str(err))
