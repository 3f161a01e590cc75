"""The janitor service's app factory: the base app (database, probes) plus the janitor loop as a
cleanup context. `setup(app)` adds the janitor to any base app (serve --mode all uses it)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from services.janitor.loop import Janitor
from shared.config import Settings
from shared.runtime.app import base_app
from shared.runtime.keys import DATABASE, SETTINGS

log = structlog.get_logger("queueflow.janitor")

JANITOR = web.AppKey("janitor", Janitor)


async def _janitor(app: web.Application) -> AsyncIterator[None]:
    janitor = Janitor(app[DATABASE], app[SETTINGS])
    app[JANITOR] = janitor
    janitor.start()
    log.info("janitor_started", interval_secs=app[SETTINGS].janitor_interval_secs)
    try:
        yield
    finally:
        await janitor.stop()


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(_janitor)


def create_app(settings: Settings) -> web.Application:
    app = base_app(settings)
    setup(app)
    return app
