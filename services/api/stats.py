"""Stats over time (docs/console.md, "Charts"): the series of the per-minute rollup, and the tasks
that failed most in a window. Read-only, tenant-scoped."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, tenant_of
from shared.db import stats
from shared.domain.jobs import check_queue_name
from shared.domain.stats import failing_window, series_query
from shared.web.body import json_response


def _queue(request: web.Request) -> str | None:
    """The `queue` parameter: a queue's name (as a job's queue is bounded), or, absent, none."""
    raw = request.query.get("queue")
    return None if raw is None else check_queue_name(raw)


async def series(request: web.Request) -> web.Response:
    q = request.query
    query = series_query(q.getall("metric", []), _queue(request), q.get("window"), q.get("step"))
    return json_response(await stats.series(db_of(request).pool, tenant_of(request).id, query))


async def failing_tasks(request: web.Request) -> web.Response:
    window = failing_window(request.query.get("window"))
    return json_response(
        await stats.top_failing_tasks(db_of(request).pool, tenant_of(request).id, _queue(request), window)
    )
