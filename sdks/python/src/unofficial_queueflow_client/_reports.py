"""A held job's progress and log lines on their way to the server (sdks/conformance/README.md,
"Visibility"): what its handler reported that the worker loop has not sent yet, and when the loop
may send it.

- ``progress`` keeps only the latest report; it travels on the job's next heartbeat, and a report
  newer than the last one sent makes the loop send a heartbeat early, at most once per
  `REPORT_INTERVAL` per job.
- ``log`` appends to the buffer; the loop posts it at most once per `REPORT_INTERVAL` per job, in
  calls of at most `MAX_LOG_LINES` lines and `MAX_LOG_CALL_BYTES` of messages. A message longer than
  that is cut at a character boundary; past `MAX_BUFFERED_LINES` lines the newest are dropped.
- Both intervals count from the handler's start, so a handler that logs a burst and returns within
  a second costs only the calls of its final flush.

Nothing here does I/O or reads a clock: the loop passes ``now`` (monotonic seconds) and sends what
`JobReports.take_lines` and `JobReports.progress_to_send` hand it.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from datetime import datetime

from unofficial_queueflow_client.models import (
    MAX_LOG_CALL_BYTES,
    MAX_LOG_LINES,
    MAX_PROGRESS_MESSAGE,
    NewLogLine,
    ProgressReport,
)

__all__ = [
    "DEFAULT_LEVEL",
    "MAX_BUFFERED_LINES",
    "REPORT_INTERVAL",
    "JobReports",
    "check_level",
    "check_progress",
    "cut_message",
]

REPORT_INTERVAL = 1.0
"""Seconds between two logs calls, and between two early progress heartbeats, of one job."""

MAX_BUFFERED_LINES = 10_000
"""The most lines a job's buffer holds; past it the newest lines are dropped (and counted)."""

DEFAULT_LEVEL = "info"

_LEVEL = re.compile(r"[A-Za-z]{1,16}")
_checked_levels: set[str] = {DEFAULT_LEVEL}  # the levels seen valid: a set lookup, not a regex, per line


def check_level(level: str) -> str:
    """A log level as the server takes it: 1 to 16 ASCII letters, else `ValueError`."""
    if level in _checked_levels:
        return level
    if not _LEVEL.fullmatch(level):
        raise ValueError(f"a log level is 1 to 16 ASCII letters (info, warn, error ...), not {level!r}")
    if len(_checked_levels) < 64:
        _checked_levels.add(level)
    return level


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(text: str) -> str:
    """Text PostgreSQL can store and UTF-8 can encode: NUL and lone surrogates become U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    return _SURROGATE.sub("\ufffd", text)


def cut_message(message: str) -> tuple[str, int]:
    """The message as it is sent, and its size in bytes of UTF-8: cleaned (see `_clean`), and cut to
    `MAX_LOG_CALL_BYTES` at a character boundary when longer."""
    if "\x00" in message:
        message = message.replace("\x00", "\ufffd")
    try:
        data = message.encode()
    except UnicodeEncodeError:  # a lone surrogate
        message = _clean(message)
        data = message.encode()
    if len(data) > MAX_LOG_CALL_BYTES:
        message = data[:MAX_LOG_CALL_BYTES].decode(errors="ignore")  # a split last character goes
        return message, len(message.encode())
    return message, len(data)


def check_progress(percent: float, message: str | None) -> ProgressReport:
    """A progress report as the server takes it, else `ValueError`: ``percent`` a number from 0 to
    100, ``message`` at most `MAX_PROGRESS_MESSAGE` characters."""
    if isinstance(percent, bool) or not isinstance(percent, int | float):
        raise ValueError(f"progress percent must be a number from 0 to 100, not {percent!r}")
    if not (math.isfinite(percent) and 0 <= percent <= 100):
        raise ValueError(f"progress percent must be from 0 to 100, not {percent!r}")
    if message is not None:
        if not isinstance(message, str):
            raise ValueError(f"a progress message must be a string, not {type(message).__name__}")
        if len(message) > MAX_PROGRESS_MESSAGE:
            raise ValueError(f"a progress message takes at most {MAX_PROGRESS_MESSAGE} characters, not {len(message)}")
        message = _clean(message)
    return ProgressReport(percent=percent, message=message)


@dataclass(slots=True)
class _Line:
    message: str
    level: str
    ts: datetime
    size: int  # bytes of UTF-8


class JobReports:
    """One job's unsent progress and log lines, and when each was last sent."""

    __slots__ = (
        "_lines",
        "_progress",
        "_sent",
        "_version",
        "beat_at",
        "closed",
        "dropped",
        "logs_at",
        "lost",
        "queued",
        "stopped",
    )

    def __init__(self, started: float) -> None:
        self._lines: deque[_Line] = deque()
        self._progress: ProgressReport | None = None
        self._version = 0  # of the latest report
        self._sent = 0  # the version the server has
        self.logs_at = started  # when the last logs call went (at first: the handler's start)
        self.beat_at = started  # when the last heartbeat went
        self.dropped = 0  # lines the full buffer refused
        self.lost = 0  # lines given up: their call failed, or logs stopped for the job
        self.stopped: str | None = None  # why no more lines are sent for this job
        self.closed = False  # the handler ended: the job's final flush owns what is left
        self.queued = False  # the worker loop knows this job has something to send

    # --- the handler's side ----------------------------------------------------------------------

    def log(self, message: str, level: str, ts: datetime) -> None:
        """Buffer a line (``level`` already checked)."""
        if self.stopped is not None:
            self.lost += 1
            return
        if len(self._lines) >= MAX_BUFFERED_LINES:
            self.dropped += 1
            return
        text, size = cut_message(message)
        self._lines.append(_Line(text, level, ts, size))

    def progress(self, report: ProgressReport) -> None:
        """Record the latest report (``report`` already checked)."""
        self._progress = report
        self._version += 1

    # --- the loop's side -------------------------------------------------------------------------

    @property
    def has_lines(self) -> bool:
        return bool(self._lines)

    def logs_due(self) -> float | None:
        """When the buffered lines may be posted (maybe already past); None when there are none."""
        return self.logs_at + REPORT_INTERVAL if self._lines else None

    def take_lines(self) -> list[NewLogLine]:
        """The next call's lines, oldest first: at most `MAX_LOG_LINES`, whose messages take at most
        `MAX_LOG_CALL_BYTES` (each message is at most that, so one always fits)."""
        lines: list[NewLogLine] = []
        size = 0
        while self._lines and len(lines) < MAX_LOG_LINES:
            line = self._lines[0]
            if size + line.size > MAX_LOG_CALL_BYTES:
                break
            self._lines.popleft()
            size += line.size
            lines.append(NewLogLine(message=line.message, level=line.level, ts=line.ts))
        return lines

    def stop(self, why: str) -> int:
        """Send no more lines for this job: the buffered ones are given up; returns how many."""
        given_up = len(self._lines)
        self._lines.clear()
        self.lost += given_up
        if self.stopped is None:
            self.stopped = why
        return given_up

    def progress_due(self) -> float | None:
        """When a heartbeat may carry the latest report early (maybe already past); None when the
        server has it."""
        return self.beat_at + REPORT_INTERVAL if self._version > self._sent else None

    def progress_to_send(self) -> tuple[ProgressReport, int] | None:
        """The latest report and its version, when the server does not have it yet."""
        if self._progress is None or self._version <= self._sent:
            return None
        return self._progress, self._version

    def progress_sent(self, version: int) -> None:
        """The server has the report of ``version`` (or it is given up): newer ones are still due."""
        self._sent = max(self._sent, version)
