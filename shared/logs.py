"""Logging: JSON lines on stdout through one structlog processor chain, for QueueFlow's own loggers
and for the standard library's (aiohttp, asyncpg) alike.

Context comes from contextvars: the error middleware binds request_id, route and method for each
request, the auth guard adds the tenant, and the worker runtime binds job_id, task and queue for
each handled job, so every line logged meanwhile carries them. Events are named in snake_case past
tense; payloads and secrets are never logged.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_SHARED: list[Any] = [
    structlog.contextvars.merge_contextvars,
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
