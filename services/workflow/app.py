"""The workflow service's app factory: the base app (database, probes) plus the advancer's
consumers as a cleanup context. `setup(app)` adds the advancer to any base app."""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from services.workflow.advancer import Advancer
from shared.config import Settings
from shared.runtime.app import base_app
from shared.runtime.keys import DATABASE, SETTINGS

log = structlog.get_logger("queueflow.workflow")

ADVANCER = web.AppKey("advancer", Advancer)


async def _advancer(app: web.Application) -> AsyncIterator[None]:
    s = app[SETTINGS]
    advancer = Advancer(app[DATABASE], s.default_queue, s.worker_poll_secs)
    app[ADVANCER] = advancer
    advancer.start()
    log.info("advancer_started", consumers=advancer.consumers)
    try:
        yield
    finally:
        await advancer.stop()


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(_advancer)


def create_app(settings: Settings) -> web.Application:
    app = base_app(settings)
    setup(app)
    return app
