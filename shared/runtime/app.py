"""The base of every service's app: one `create_app(settings)` per service starts from
`base_app(settings)` and adds its own routes and cleanup contexts with its `setup(app)`;
`queueflow serve --mode all` calls several services' `setup` on one base app.

What an app shares lives under typed keys (shared/runtime/keys.py), set by cleanup contexts: SETTINGS (from the start),
TRACER (only when traces are exported: started before the database, flushed after it closes),
DATABASE (opened first, closed last), LIFECYCLE (draining on shutdown). aiohttp's shutdown order
does the rest: sites stop accepting, `on_shutdown` marks the app draining (parked long-polls return
at once, /ready answers 503), in-flight requests get --shutdown-grace-secs, then the cleanup
contexts close in reverse order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Protocol, TypeVar

import structlog
from aiohttp import web

import shared
from shared import tracing
from shared.config import Settings
from shared.db.database import Database
from shared.db.pool import is_unavailable
from shared.runtime import ops
from shared.runtime.keys import DATABASE, LIFECYCLE, PROBED, SETTINGS, TRACER, Lifecycle
from shared.web import protocol
from shared.web.cors import Cors
from shared.web.errors import error_middleware

log = structlog.get_logger("queueflow.runtime")


def base_app(settings: Settings, *, metrics_route: bool = True) -> web.Application:
    """An app with the settings, the database as its first cleanup context, the error middleware,
    CORS (shared/web/cors.py) and the probes (/health, /ready, and /metrics unless `metrics_route`
    is false).

    CORS answers preflights inside the error middleware (so a refused one gets the contract's 403
    body, and every preflight is logged and counted like any request); the headers of actual
    answers are added when each answer is prepared, which covers the error middleware's answers
    and the streams handlers prepare themselves."""
    protocol.install()
    cors = Cors.from_settings(settings)
    app = web.Application(
        middlewares=[error_middleware(is_unavailable), cors.middleware],
        client_max_size=settings.max_body_bytes,
    )
    app.on_response_prepare.append(cors.on_response_prepare)
    app[SETTINGS] = settings
    app[LIFECYCLE] = Lifecycle()
    app.cleanup_ctx.append(_tracing)
    app.cleanup_ctx.append(_database)
    app.on_shutdown.append(_start_draining)
    ops.add_routes(app, metrics_route=metrics_route)
    return app


def probe_app(main: web.Application) -> web.Application:
    """The metrics port's app beside an API app: the probes, reading the main app's database."""
    app = web.Application(middlewares=[error_middleware(is_unavailable)])
    app[PROBED] = main
    ops.add_routes(app, metrics_route=True)
    return app


class Background(Protocol):
    """A service's background work (the janitor loop, the advancer, the worker runtime)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def describe(self) -> dict[str, object]:
        """What the service's `..._started` log line says about it."""
        ...


B = TypeVar("B", bound=Background)


def background(
    key: web.AppKey[B], build: Callable[[web.Application], B], started: str
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context that builds the service's background work from the started app (its
    database is open by then), keeps it under `key`, starts it, logs the `started` event, and stops
    it when the app shuts down."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        work = build(app)
        app[key] = work
        await work.start()
        log.info(started, **work.describe())
        try:
            yield
        finally:
            await work.stop()

    return ctx


async def _tracing(app: web.Application) -> AsyncIterator[None]:
    """The OpenTelemetry exporter, when the OTEL_* variables ask for one (shared/tracing.py): set
    up before the database, so every span its users record is exported, and flushed after it has
    closed. Not configured, nothing is imported and TRACER stays unset."""
    mode = app[SETTINGS].mode
    tracer = tracing.start("queueflow" if mode == "all" else f"queueflow-{mode}", shared.__version__)
    if tracer is None:
        yield
        return
    app[TRACER] = tracer
    log.info("tracing_enabled", exporter="otlp/http")
    try:
        yield
    finally:
        await asyncio.to_thread(tracer.shutdown)


async def _database(app: web.Application) -> AsyncIterator[None]:
    s = app[SETTINGS]
    db = await Database.open(
        s.database_url,
        direct_dsn=s.direct_database_url,
        min_connections=s.min_db_connections,
        max_connections=s.max_db_connections,
        statement_cache_size=s.statement_cache_size,
        safety_poll_secs=s.worker_poll_secs,
        migrate=s.auto_migrate,
        tracer=app.get(TRACER),
    )
    app[DATABASE] = db
    try:
        yield
    finally:
        await db.close()


async def _start_draining(app: web.Application) -> None:
    """Stop handing out work: /ready turns 503 and parked long-polls and streams return at once."""
    app[LIFECYCLE].draining = True
    if DATABASE in app:
        app[DATABASE].hub.wake_all()
