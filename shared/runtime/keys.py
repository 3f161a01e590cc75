"""The typed keys under which an app holds what it shares (aiohttp AppKeys): set once, by the app
factory or by a cleanup context while the app starts, read by handlers and background loops."""

from __future__ import annotations

from aiohttp import web

from shared.config import Settings
from shared.db.database import Database
from shared.tracing import Tracer


class Lifecycle:
    """Whether the app is draining: it stops handing out work once shutdown has begun."""

    def __init__(self) -> None:
        self.draining = False


SETTINGS = web.AppKey("settings", Settings)
DATABASE = web.AppKey("database", Database)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
# Only when the process exports traces (shared/tracing.py); the database holds it too.
TRACER = web.AppKey("tracer", Tracer)
# On the probe app beside an API app: the app whose database the probes check.
PROBED = web.AppKey("probed", web.Application)
