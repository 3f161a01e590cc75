"""The janitor service's app factory: the base app (database, probes) plus the janitor loop as a
cleanup context. `setup(app)` adds the janitor to any base app (serve --mode all uses it)."""

from __future__ import annotations

from aiohttp import web

from services.janitor.loop import Janitor
from shared.config import Settings
from shared.runtime.app import background, base_app
from shared.runtime.keys import DATABASE, SETTINGS

JANITOR = web.AppKey("janitor", Janitor)


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(
        background(JANITOR, lambda app: Janitor(app[DATABASE], app[SETTINGS]), "janitor_started")
    )


def create_app(settings: Settings) -> web.Application:
    app = base_app(settings)
    setup(app)
    return app
