"""Tasks: the `@task` decorator that marks a handler, the context a handler receives, and the
Registry one worker process builds (built-ins first, then the --handlers modules).

There is no module-level registry. `@task("resize-image", concurrency=4, timeout_secs=60)` only
attaches a frozen `TaskSpec` to the function; the worker runtime imports each --handlers module,
scans it for marked functions and registers them into the Registry it owns. A name can be taken
once: a user task that would shadow a built-in, or two modules defining the same task, is a
start-up error.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import re
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, Protocol, TypeVar

from shared.config import ConfigError
from shared.domain.jobs import MAX_TIMEOUT_SECS, Job
from shared.domain.visibility import (
    LOG_LEVEL_PATTERN,
    MAX_LOG_LEVEL,
    MAX_PROGRESS_MESSAGE,
    NewLogLine,
    Progress,
    cut_message,
)

BUILTIN = "built-in"
_SPEC_ATTR = "__queueflow_task__"


class PermanentError(Exception):
    """Raise from a handler to fail the job without retries (dead-lettered at once)."""

    retryable = False


_WAITERS = threading.Lock()  # guards the lazy creation of JobContext._waiter against abandon()


class NoteSink(Protocol):
    """Where a context's reports go (services/worker/notes.py's JobNotes)."""

    def note_progress(self, job_id: uuid.UUID, token: uuid.UUID, progress: Progress) -> None: ...

    def note_line(self, job_id: uuid.UUID, token: uuid.UUID, line: NewLogLine) -> None: ...


_LEVEL = re.compile(LOG_LEVEL_PATTERN)


@dataclass(eq=False)
class JobContext:
    """What a handler receives: the job, cancellation, and `progress`/`log` to report how it goes.

    `cancelled` (an asyncio.Event) and `is_cancelled` (thread-safe, for sync handlers) are set when
    the job's outcome stops mattering: it was cancelled through the API, it exceeded its timeout,
    or the worker is shutting down and gave it back. An async handler is also cancelled outright
    (CancelledError at its next await); a sync one runs in a thread, which cannot be interrupted,
    so it should check `is_cancelled` (or sleep with `wait_cancelled`) and return early.
    """

    job: Job
    token: uuid.UUID | None = None  # the lease's, for the reports
    notes: NoteSink | None = field(default=None, repr=False)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    _abandoned: bool = field(default=False, repr=False)
    # Created only when a sync handler waits on it: a threading.Event per job costs more than
    # the rest of the context together.
    _waiter: threading.Event | None = field(default=None, repr=False)

    @property
    def payload(self) -> dict[str, Any]:
        return self.job.payload

    @property
    def is_cancelled(self) -> bool:
        """Whether the job was cancelled (or abandoned); safe to read from any thread."""
        return self._abandoned

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """For sync handlers: block this thread up to `timeout` seconds, returning True as soon as
        the job is cancelled (a cancellable `time.sleep`). Never call it from an async handler."""
        with _WAITERS:
            if self._waiter is None:
                self._waiter = threading.Event()
                if self._abandoned:
                    self._waiter.set()
            waiter = self._waiter
        return waiter.wait(timeout)

    def progress(self, percent: float, message: str | None = None) -> None:
        """Report how far the job got (0 to 100, and a message of at most 1,024 characters); shown
        on the job (`progress`) and its SSE stream. Written within a second, and before the job's
        outcome; a later report replaces an earlier one. Safe from any thread."""
        given: object = percent  # handlers are not type-checked: say what is wrong
        if isinstance(given, bool) or not isinstance(given, int | float) or not 0 <= given <= 100:
            raise ValueError(f"progress percent must be a number from 0 to 100, not {percent!r}")
        text: object = message
        if text is not None and (not isinstance(text, str) or len(text) > MAX_PROGRESS_MESSAGE):
            raise ValueError(f"a progress message is a string of at most {MAX_PROGRESS_MESSAGE} characters")
        if self.notes is not None and self.token is not None:
            self.notes.note_progress(
                self.job.id, self.token, Progress(percent=float(percent), message=message)
            )

    def log(self, message: str, level: str = "info") -> None:
        """Add a line to the job's log (`GET /api/v1/jobs/{id}/logs`), stamped now. Lines are
        written in batches, at most once a second and before the job's outcome; a message past
        64 KiB is cut. Safe from any thread."""
        given: object = message  # handlers are not type-checked: say what is wrong
        if not isinstance(given, str):
            raise ValueError(f"a log message is a string, not {type(given).__name__}")
        named: object = level
        if not isinstance(named, str) or len(named) > MAX_LOG_LEVEL or not _LEVEL.match(named):
            raise ValueError(f"a log level is 1 to {MAX_LOG_LEVEL} letters, not {level!r}")
        if self.notes is not None and self.token is not None:
            line = NewLogLine(message=cut_message(message), level=level, ts=datetime.now(UTC))
            self.notes.note_line(self.job.id, self.token, line)

    def abandon(self) -> None:
        """Set both cancellation signals. Called by the runtime, on the event loop's thread."""
        with _WAITERS:
            self._abandoned = True
            if self._waiter is not None:
                self._waiter.set()
        self.cancelled.set()


Handler = Callable[[JobContext], Awaitable[dict[str, Any] | None] | dict[str, Any] | None]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class TaskSpec:
    """What `@task` records on a function: the task name and its per-task limits."""

    name: str
    concurrency: int | None = None  # most handlers of this task running at once in one process
    timeout_secs: int | None = None  # overrides the job's own timeout_secs when set


def _check_spec(name: object, concurrency: object, timeout_secs: object) -> TaskSpec:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a task needs a non-blank name, not {name!r}")
    if concurrency is not None and (type(concurrency) is not int or concurrency < 1):
        raise ValueError(f"task {name!r}: concurrency must be a positive integer, not {concurrency!r}")
    if timeout_secs is not None and (
        type(timeout_secs) is not int or not 1 <= timeout_secs <= MAX_TIMEOUT_SECS
    ):
        raise ValueError(
            f"task {name!r}: timeout_secs must be an integer from 1 to {MAX_TIMEOUT_SECS}, "
            f"not {timeout_secs!r}"
        )
    return TaskSpec(name, concurrency, timeout_secs)


def task(name: str, *, concurrency: int | None = None, timeout_secs: int | None = None) -> Callable[[F], F]:
    """Mark a function (async, or sync to run in a thread) as the handler of task `name`.

    The function is returned unchanged, so it stays callable and testable on its own; it takes one
    argument, a JobContext, and returns a JSON object (a dict) or None.
    """
    spec = _check_spec(name, concurrency, timeout_secs)

    def mark(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@task({name!r}) decorates a function, not {fn!r}")
        marked = spec_of(fn)
        if marked is not None:
            raise TypeError(f"{fn!r} is already task {marked.name!r}")
        setattr(fn, _SPEC_ATTR, spec)
        return fn

    return mark


def spec_of(obj: object) -> TaskSpec | None:
    """The TaskSpec `@task` attached to `obj`, or None."""
    try:
        spec = getattr(obj, _SPEC_ATTR, None)
    except Exception:
        return None
    return spec if isinstance(spec, TaskSpec) else None


def _is_async(handler: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - an object with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


@dataclass(frozen=True)
class Task:
    name: str
    handler: Handler
    is_async: bool
    timeout_secs: int | None = None  # overrides the job's own timeout when set
    concurrency: int | None = None  # per-process limit on top of --workers
    source: str = BUILTIN  # "built-in" or the module that defined it


class Registry:
    """name -> Task for one worker process."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        timeout_secs: int | None = None,
        concurrency: int | None = None,
        source: str = BUILTIN,
    ) -> Task:
        spec = _check_spec(name, concurrency, timeout_secs)
        existing = self._tasks.get(name)
        if existing is not None:
            if existing.handler is handler:
                return existing  # the same function, reached through two modules
            owner = (
                "a built-in task" if existing.source == BUILTIN else f"a task of module {existing.source!r}"
            )
            raise ConfigError(
                f"task {name!r} of {_where(source)} is already registered as {owner}; "
                "task names must be unique"
            )
        entry = Task(spec.name, handler, _is_async(handler), spec.timeout_secs, spec.concurrency, source)
        self._tasks[name] = entry
        return entry

    def register_module(self, module: ModuleType) -> list[Task]:
        """Register every `@task` function found in `module`'s namespace (its own and re-exported
        ones); returns them. A module without any is a start-up error."""
        found = [
            (value, spec) for value in list(vars(module).values()) if (spec := spec_of(value)) is not None
        ]
        if not found:
            raise ConfigError(
                f"--handlers: module {module.__name__!r} defines no @task functions "
                "(decorate handlers with services.worker.task)"
            )
        return [
            self.register(
                spec.name,
                fn,
                timeout_secs=spec.timeout_secs,
                concurrency=spec.concurrency,
                source=module.__name__,
            )
            for fn, spec in found
        ]

    def get(self, name: str) -> Task | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(list(self._tasks.values()))

    def __len__(self) -> int:
        return len(self._tasks)


def _where(source: str) -> str:
    return "the built-ins" if source == BUILTIN else f"module {source!r}"


def import_handler_modules(registry: Registry, modules: Iterable[str]) -> None:
    """Import each module named by --handlers and register its tasks; any failure is a ConfigError
    naming the module, so `serve` exits non-zero before it opens anything."""
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as err:
            raise ConfigError(
                f"--handlers: cannot import module {name!r}: {type(err).__name__}: {err}"
            ) from err
        registry.register_module(module)
