"""The workflow service's app factory: the base app (database, probes) plus the advancer's
consumers as a cleanup context. `setup(app)` adds the advancer to any base app."""

from __future__ import annotations

from aiohttp import web

from services.workflow.advancer import Advancer
from shared.config import Settings
from shared.runtime.app import background, base_app
from shared.runtime.keys import DATABASE, SETTINGS

ADVANCER = web.AppKey("advancer", Advancer)


def _advancer(app: web.Application) -> Advancer:
    settings = app[SETTINGS]
    return Advancer(app[DATABASE], settings.default_queue, settings.worker_poll_secs)


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(background(ADVANCER, _advancer, "advancer_started"))


def create_app(settings: Settings) -> web.Application:
    app = base_app(settings)
    setup(app)
    return app
