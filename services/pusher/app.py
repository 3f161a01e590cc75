"""The pusher service's app factory: the base app (database, probes) plus the pusher as a cleanup
context. `setup(app)` adds it to any base app (serve --mode all uses it)."""

from __future__ import annotations

from aiohttp import web

from services.pusher.runtime import Pusher
from shared.config import Settings
from shared.runtime.app import background, base_app
from shared.runtime.keys import DATABASE, LIFECYCLE, SETTINGS

PUSHER = web.AppKey("pusher", Pusher)


def setup(app: web.Application) -> None:
    app.cleanup_ctx.append(
        background(PUSHER, lambda app: Pusher(app[DATABASE], app[SETTINGS], app[LIFECYCLE]), "pusher_started")
    )


def create_app(settings: Settings) -> web.Application:
    app = base_app(settings)
    setup(app)
    return app
