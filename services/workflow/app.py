"""The workflow service's app factory: the base app (database, probes) plus the advancer's
consumers and the timers of sleeping and waiting steps as cleanup contexts. `setup(app)` adds both
to any base app."""

from __future__ import annotations

import functools

from aiohttp import web

from services.workflow.advancer import Advancer
from services.workflow.timers import Timers
from shared.config import Settings
from shared.runtime.advance import advance_many
from shared.runtime.app import background, base_app
from shared.runtime.keys import DATABASE, SETTINGS

ADVANCER = web.AppKey("advancer", Advancer)
TIMERS = web.AppKey("timers", Timers)


def _advancer(app: web.Application) -> Advancer:
    settings = app[SETTINGS]
    return Advancer(
        app[DATABASE], settings.default_queue, settings.worker_poll_secs, limits=settings.workflow_limits
    )


def _timers(app: web.Application) -> Timers:
    db = app[DATABASE]
    settings = app[SETTINGS]
    apply_many = functools.partial(
        advance_many, default_queue=settings.default_queue, tracer=db.tracer, limits=settings.workflow_limits
    )
    return Timers(db, apply_many)


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(background(ADVANCER, _advancer, "advancer_started"))
    app.cleanup_ctx.append(background(TIMERS, _timers, "workflow_timers_started"))


def create_app(settings: Settings) -> web.Application:
    app = base_app(settings)
    setup(app)
    return app
