"""The probes every process serves: /health (the database answers), /ready (and the app is not
draining) and /metrics (Prometheus text, with the per-queue gauges read fresh at each scrape)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import shared
from shared import metrics, wire
from shared.db import jobs as jobs_db
from shared.db import limits
from shared.db.pooler import Route
from shared.runtime.keys import DATABASE, LIFECYCLE, PROBED, SETTINGS
from shared.web.body import json_response
from shared.web.errors import error_response


def _source(request: web.Request) -> web.Application:
    return request.app.get(PROBED, request.app)


async def health(request: web.Request) -> web.Response:
    if not await _source(request)[DATABASE].ping():
        return error_response(503, "database unavailable")
    return json_response(
        wire.HealthStatus(status="healthy", timestamp=datetime.now(UTC), version=shared.__version__)
    )


async def ready(request: web.Request) -> web.Response:
    app = _source(request)
    if app[LIFECYCLE].draining:
        return error_response(503, "shutting down")
    db = app[DATABASE]
    if not await db.ping():
        return error_response(503, "database not ready")
    return json_response(wire.ReadyStatus(status="ready", pooler=_pooler(db.route)))


def _pooler(route: Route) -> wire.PoolerStatus | None:
    if not route.pooled:
        return None
    return wire.PoolerStatus(
        pooled=list(route.pooled),
        statement_cache_size=route.statement_cache_size,
        notifications="listen" if route.listen else "poll",
        warning=route.warning,
    )


async def metrics_endpoint(request: web.Request) -> web.Response:
    app = _source(request)
    pool = app[DATABASE].pool
    try:
        gauges = await asyncio.wait_for(jobs_db.queue_gauges(pool, metrics.MAX_QUEUE_LABELS), 5)
        keys = await asyncio.wait_for(limits.key_figures(pool, app[SETTINGS].limit_metrics_keys), 5)
    except Exception:  # the counters still render; the store gauge says why
        metrics.set_queue_gauges(None)
        metrics.set_limit_gauges(None)
    else:
        metrics.set_queue_gauges(
            [(g.queue, g.pending, g.scheduled, g.running, g.oldest_age_secs) for g in gauges]
        )
        metrics.set_limit_gauges(
            [(k.tenant, k.key, k.running, k.throttled) for k in keys],
            tenant_ids=app[SETTINGS].metrics_tenant_ids,
        )
    return web.Response(body=generate_latest(metrics.REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_routes(app: web.Application, *, metrics_route: bool) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    if metrics_route:
        app.router.add_get("/metrics", metrics_endpoint)
