"""The worker service's app factory: the base app (database, probes) plus the in-process handler
runtime as a cleanup context. The task registry is built when the app is created, so an
unimportable --handlers module fails start-up before anything opens."""

from __future__ import annotations

from aiohttp import web

from services.worker.registry import Registry
from services.worker.runtime import WorkerRuntime, build_registry
from shared.config import Settings
from shared.runtime.app import background, base_app
from shared.runtime.keys import DATABASE, LIFECYCLE, SETTINGS

RUNTIME = web.AppKey("worker_runtime", WorkerRuntime)


def setup(app: web.Application, registry: Registry | None = None) -> None:
    """Add the runtime to `app`, with `registry` or the built-ins plus the --handlers modules."""
    settings = app[SETTINGS]
    tasks = registry if registry is not None else build_registry(settings.handlers)

    def runtime(app: web.Application) -> WorkerRuntime:
        return WorkerRuntime(app[DATABASE], settings, app[LIFECYCLE], tasks)

    app.cleanup_ctx.append(background(RUNTIME, runtime, "worker_started"))


def create_app(settings: Settings, registry: Registry | None = None) -> web.Application:
    app = base_app(settings)
    setup(app, registry)
    return app
