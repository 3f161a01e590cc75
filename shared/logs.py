"""Logging: JSON lines on stdout through one structlog processor chain, for QueueFlow's own loggers
and for the standard library's (aiohttp, asyncpg) alike.

Context comes from one contextvar holding a small dict (`log_context`, `bind`): the error middleware
sets request_id, route and method for each request, the auth guard adds the tenant, and the worker
runtime sets job_id, task and queue for each handled job, so every line logged meanwhile carries
them. (One contextvar set per request instead of one per key: structlog's own contextvars helpers
cost about a tenth of the worker protocol's request time.) Events are named in snake_case past
tense; payloads and secrets are never logged.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any

import structlog

_CONTEXT: ContextVar[dict[str, Any]] = ContextVar("queueflow_log_context", default={})  # noqa: B039 - never mutated


class log_context:
    """`with log_context(**values):` every line logged inside the block (in this task and the
    tasks it starts) carries `values`. (A class, not a generator: the error middleware enters one
    per request, and a generator-based context manager costs three times as much.)"""

    __slots__ = ("_token", "_values")

    def __init__(self, **values: Any) -> None:
        self._values = values

    def __enter__(self) -> None:
        self._token = _CONTEXT.set({**_CONTEXT.get(), **self._values})

    def __exit__(self, *_exc: object) -> None:
        _CONTEXT.reset(self._token)


def bind(**values: Any) -> None:
    """Add `values` to the current context until its `log_context` block (or task) ends."""
    _CONTEXT.set({**_CONTEXT.get(), **values})


def _merge_context(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in _CONTEXT.get().items():
        event.setdefault(key, value)
    return event


_SHARED: list[Any] = [
    _merge_context,
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def _renderer() -> Any:
    return structlog.processors.JSONRenderer(default=str)  # ids and enums render as text


def configure(level: str = "info") -> None:
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*_SHARED, structlog.processors.format_exc_info, _renderer()],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*_SHARED, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                _renderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
