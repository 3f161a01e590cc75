"""The task registry: name -> handler, open for user modules (`@task("resize-image")`)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from shared import wire


class PermanentError(Exception):
    """Raise from a handler to fail the job without retries (dead-lettered at once)."""

    retryable = False


@dataclass
class JobContext:
    """What a handler receives: the job, and a cancellation flag set when the job is cancelled."""

    job: wire.Job
    cancelled: asyncio.Event

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload


Handler = Callable[[JobContext], Awaitable[dict[str, Any] | None] | dict[str, Any] | None]


@dataclass(frozen=True)
class Task:
    name: str
    handler: Handler
    is_async: bool
    timeout_secs: int | None = None  # overrides the job's own timeout when set


class Registry:
    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}

    def register(self, name: str, handler: Handler, timeout_secs: int | None = None) -> None:
        if not name.strip():
            raise ValueError("a task needs a name")
        self._tasks[name] = Task(name, handler, inspect.iscoroutinefunction(handler), timeout_secs)

    def task(self, name: str, timeout_secs: int | None = None) -> Callable[[Handler], Handler]:
        def decorate(fn: Handler) -> Handler:
            self.register(name, fn, timeout_secs)
            return fn

        return decorate

    def get(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)
