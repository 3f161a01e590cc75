"""The API service's app factory: the route table behind the auth guards, /openapi.json and
/openapi.yaml, the console (/ui/) and Swagger UI (/docs), and the base app's database and probes.
`setup(app)` adds the API to any base app (serve --mode all uses it); `create_app(settings)` is the
API on its own."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

from aiohttp import web

from services.api.console import add_console_routes
from services.api.console.auth import add_sign_in
from services.api.context import AUTH, LONG_POLLS, PUSHED, SEEN, STREAMS, guard
from services.api.openapi import openapi_handler, openapi_yaml_handler
from services.api.routes import ROUTES, router_path
from shared.config import Settings
from shared.db import queues, worker_keys
from shared.domain.admission import Occupancy, RateTable
from shared.domain.visibility import SeenRecently
from shared.runtime.app import base_app
from shared.runtime.keys import DATABASE, SETTINGS
from shared.runtime.pushed import PushedQueues
from shared.web.auth import Authenticator, WorkerKeyCache

# Seconds a caller refused for too many open streams or parked long-polls is told to wait
# (Retry-After). A refused lease call had claimed first and found nothing: its worker leases again
# after a second, the back-off upstream's Python and Rust runtimes take after a lease error anyway.
STREAM_RETRY_AFTER_SECS = 5
LONG_POLL_RETRY_AFTER_SECS = 1


def setup(app: web.Application) -> None:
    settings = app[SETTINGS]
    app[AUTH] = Authenticator(settings)
    app[SEEN] = SeenRecently()
    app[STREAMS] = Occupancy(
        "event streams", settings.max_streams, settings.max_tenant_streams, STREAM_RETRY_AFTER_SECS
    )
    app[LONG_POLLS] = Occupancy(
        "parked lease long-polls",
        settings.max_long_polls,
        settings.max_tenant_long_polls,
        LONG_POLL_RETRY_AFTER_SECS,
    )
    app.cleanup_ctx.append(_worker_keys)
    app.cleanup_ctx.append(_fleet_queue_settings)
    app.cleanup_ctx.append(_pushed_queues)
    # The worker protocol's routes first: aiohttp tries the routes under one path prefix in the
    # order they were added (the answer does not depend on it: no two routes match one path and
    # method), and those are the routes a drain calls thousands of times a second.
    for route in sorted(ROUTES, key=lambda r: r.auth != "worker"):
        action = route.operation_id if route.audited else None
        handler = guard(route.handler, route.auth, action, route.status)
        app.router.add_route(route.method, router_path(route.path), handler)
    app.router.add_get("/openapi.json", openapi_handler)
    app.router.add_get("/openapi.yaml", openapi_yaml_handler)
    add_console_routes(app)
    add_sign_in(app)


async def _worker_keys(app: web.Application) -> AsyncIterator[None]:
    """Once the database is open: worker keys are looked up in it, and each revocation announced
    on its LISTEN connection drops the key from this process's cache."""
    db, settings = app[DATABASE], app[SETTINGS]
    misses = RateTable(settings.unknown_worker_key_rate, settings.unknown_worker_key_burst)
    cache = WorkerKeyCache(functools.partial(worker_keys.find, db.pool), lambda: db.hub.connected, misses)
    app[AUTH].worker_keys = cache
    unsubscribe = db.hub.watch_worker_keys(cache.forget)
    try:
        yield
    finally:
        unsubscribe()
        app[AUTH].worker_keys = None


async def _fleet_queue_settings(app: web.Application) -> AsyncIterator[None]:
    """Once the database is open: record --max-queues-per-tenant, which the database enforces for
    every writer (migration 35), and --queue-retention, which every completing statement reads
    (migration 37)."""
    pool, settings = app[DATABASE].pool, app[SETTINGS]
    await queues.record_cap(pool, settings.max_queues_per_tenant)
    await queues.record_retention_defaults(pool, settings.queue_retention_defaults)
    yield


async def _pushed_queues(app: web.Application) -> AsyncIterator[None]:
    """Once the database is open: the queues bound to push endpoints, which leases refuse (each
    change announced on the LISTEN connection makes the next lease read them again)."""
    pushed = PushedQueues(app[DATABASE])
    app[PUSHED] = pushed
    try:
        yield
    finally:
        pushed.close()


def create_app(settings: Settings) -> web.Application:
    """The API alone: the probes /health and /ready on its port (/metrics is on the metrics port,
    served by the probe app beside it)."""
    app = base_app(settings, metrics_route=False)
    setup(app)
    return app
