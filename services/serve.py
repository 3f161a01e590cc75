"""`queueflow serve`: compose the services one process runs (by --mode) and run them until SIGTERM.

Each service has its own app factory (`services.<name>.app.create_app`); a single-service mode runs
that app. `--mode all` composes them: one base app (one database: pool, listener, group-commit
writers) to which every service's `setup` adds its routes and cleanup contexts, in the order
api, janitor, workflow, worker, pusher (and leaves in reverse). The API modes serve the API on --api-port
and the probes beside it on --metrics-port; the other modes serve the probes on --metrics-port.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import resource
import signal
from collections.abc import Callable

import structlog
from aiohttp import web

from services.api import app as api
from services.janitor import app as janitor
from services.pusher import app as pusher
from services.worker import app as worker
from services.workflow import app as workflow
from shared.config import JWT_SECRET_MIN_BYTES, MAKE_A_SECRET, Settings
from shared.runtime.app import base_app, probe_app

log = structlog.get_logger("queueflow.serve")

FACTORIES: dict[str, Callable[[Settings], web.Application]] = {
    "api": api.create_app,
    "janitor": janitor.create_app,
    "workflow": workflow.create_app,
    "worker": worker.create_app,
    "pusher": pusher.create_app,
}
SETUPS: dict[str, Callable[[web.Application], None]] = {
    "api": api.setup,
    "janitor": janitor.setup,
    "workflow": workflow.setup,
    "worker": worker.setup,
    "pusher": pusher.setup,
}


def build_app(settings: Settings) -> web.Application:
    """The app this process runs: one service's own app, or (`--mode all`) all of them on one base."""
    if settings.mode != "all":
        return FACTORIES[settings.mode](settings)
    app = base_app(settings, metrics_route=False)
    for setup in SETUPS.values():
        setup(app)
    return app


def raise_open_files_limit() -> None:
    """Idle long-polls are cheap but each is a socket: lift the soft descriptor limit to the hard one."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(settings: Settings) -> None:
    raise_open_files_limit()
    app = build_app(settings)
    if settings.dev:
        log.warning(
            "development_mode",
            detail="--dev: any bearer token is tenant 'tenant1' and a worker; "
            "never run this on a network you do not control",
        )
    if settings.weak_jwt_secret:
        log.warning(
            "weak_jwt_secret",
            detail=f"--allow-weak-jwt-secret: the JWT secret is under {JWT_SECRET_MIN_BYTES} bytes;"
            f" make a new one with `{MAKE_A_SECRET}`, re-sign the tenants' tokens and drop the flag",
        )
    runners: list[web.AppRunner] = []
    main = web.AppRunner(
        app, handle_signals=False, access_log=None, shutdown_timeout=settings.shutdown_grace_secs
    )
    await main.setup()
    runners.append(main)
    serves_api = settings.runs("api")
    main_port = settings.api_port if serves_api else settings.metrics_port
    # The metrics listener binds first: once the api port answers (/ready), every port is bound,
    # and a port that cannot be bound stops the process before anything reported it ready.
    if serves_api and settings.metrics_port:
        probes = web.AppRunner(probe_app(app), handle_signals=False, access_log=None)
        await probes.setup()
        runners.append(probes)
        await web.TCPSite(probes, settings.host, settings.metrics_port).start()
    if main_port or serves_api:
        await web.TCPSite(main, settings.host, main_port).start()
    _settle_garbage_collector()
    log.info(
        "queueflow_started",
        mode=settings.mode,
        host=settings.host,
        api_port=settings.api_port if serves_api else None,
        metrics_port=settings.metrics_port or None,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("queueflow_stopping", mode=settings.mode)
    for runner in reversed(runners):
        with contextlib.suppress(Exception):
            await runner.cleanup()
    log.info("queueflow_stopped")


def _settle_garbage_collector() -> None:
    """Once started: move everything built so far (modules, the app, the pools) out of the
    collector's generations, so no collection scans it again, and collect the youngest generation
    every 10,000 allocations instead of 700: a drain allocates a few objects per job and frees
    them at once, and each young collection otherwise walks the survivors with the handlers
    stopped."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)
