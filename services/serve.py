"""`queueflow serve`: compose the services one process runs (by --mode) and run them until SIGTERM.

api and all modes serve the API on --api-port; every mode serves /metrics, /health and /ready on
--metrics-port. The process's resources (pool, listener, batcher) are one cleanup context that is
entered first and left last; each service adds its own context after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import signal

import structlog
from aiohttp import web

from shared.config import Settings
from shared.http import add_ops_routes, answer_malformed_http_with_json, error_middleware
from shared.runtime import RESOURCES, Resources, resources_ctx

log = structlog.get_logger("queueflow.serve")


def build_apps(settings: Settings) -> tuple[Resources, web.Application, web.Application | None]:
    """(resources, the app that owns the service contexts, the metrics app or None)."""
    res = Resources(settings)
    metrics_app: web.Application | None = None
    if settings.runs("api"):
        from services.api.app import create_app

        main = create_app(res)
    else:
        main = web.Application(middlewares=[error_middleware])
        main[RESOURCES] = res
        add_ops_routes(main)
    main.cleanup_ctx.append(resources_ctx(res))
    if settings.runs("janitor"):
        from services.janitor.loop import janitor_ctx

        main.cleanup_ctx.append(janitor_ctx(res))
    if settings.runs("workflow"):
        from services.workflow.advancer import workflow_ctx

        main.cleanup_ctx.append(workflow_ctx(res))
    if settings.runs("worker"):
        from services.worker.runtime import worker_ctx

        main.cleanup_ctx.append(worker_ctx(res))
    if settings.runs("api") and settings.metrics_port:
        metrics_app = web.Application(middlewares=[error_middleware])
        metrics_app[RESOURCES] = res
        add_ops_routes(metrics_app)
    return res, main, metrics_app


def raise_open_files_limit() -> None:
    """Idle long-polls are cheap but each is a socket: lift the soft descriptor limit to the hard one."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(settings: Settings) -> None:
    raise_open_files_limit()
    answer_malformed_http_with_json()
    res, main, metrics_app = build_apps(settings)
    if settings.dev:
        log.warning(
            "development_mode",
            detail="--dev: any bearer token is tenant 'tenant1' and a worker; "
            "never run this on a network you do not control",
        )
    runners: list[web.AppRunner] = []
    main_runner = web.AppRunner(
        main, handle_signals=False, access_log=None, shutdown_timeout=settings.shutdown_grace_secs
    )
    await main_runner.setup()
    runners.append(main_runner)
    main_port = settings.api_port if settings.runs("api") else settings.metrics_port
    if main_port or settings.runs("api"):
        await web.TCPSite(main_runner, settings.host, main_port).start()
    if metrics_app is not None:
        metrics_runner = web.AppRunner(metrics_app, handle_signals=False, access_log=None)
        await metrics_runner.setup()
        runners.append(metrics_runner)
        await web.TCPSite(metrics_runner, settings.host, settings.metrics_port).start()
    log.info(
        "queueflow_started",
        mode=settings.mode,
        api_port=settings.api_port if settings.runs("api") else None,
        metrics_port=settings.metrics_port or None,
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("queueflow_stopping", mode=settings.mode)
    res.start_draining()
    for runner in reversed(runners):
        with contextlib.suppress(Exception):
            await runner.cleanup()
    log.info("queueflow_stopped")
