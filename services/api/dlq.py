"""Dead-letter routes: list, get, replay one, replay many by filter."""

from __future__ import annotations

from aiohttp import web

from services.api.context import settings_of, tenant_of
from services.api.params import page_from, replayed_filter
from shared import wire
from shared.db import jobs as jobs_db
from shared.db.listing import fetch_page
from shared.domain import Conflict, NotFound, ValidationFailed, instant
from shared.http import decode, json_response
from shared.runtime import RESOURCES


def _dl_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    try:
        value = int(raw)
    except ValueError:
        raise ValidationFailed(f"dead letter id must be an integer, not {raw!r}") from None
    if not 0 < value < 2**63:
        raise NotFound(f"dead letter not found: {raw}")
    return value


async def list_dead_letters(request: web.Request) -> web.Response:
    page = page_from(request, {"queue": ("queue_name", None), "task_name": ("task_name", None)})
    replayed = replayed_filter(request)
    if replayed is not None:
        page.conditions.append("replayed_at IS NOT NULL" if replayed else "replayed_at IS NULL")
    result = await fetch_page(
        request.app[RESOURCES].pool, "dead_letters", tenant_of(request).id, page, "bigint"
    )
    return json_response(
        wire.ListDeadLettersResponse(
            dead_letters=[jobs_db.to_dead_letter(r) for r in result.rows],
            limit=page.limit,
            offset=page.offset,
            has_more=result.has_more,
            total=result.total,
            next_cursor=result.next_cursor,
        )
    )


async def get_dead_letter(request: web.Request) -> web.Response:
    dl_id = _dl_id(request)
    entry = await jobs_db.get_dead_letter(request.app[RESOURCES].pool, tenant_of(request).id, dl_id)
    if entry is None:
        raise NotFound(f"dead letter not found: {dl_id}")
    return json_response(entry)


async def replay_dead_letter(request: web.Request) -> web.Response:
    dl_id = _dl_id(request)
    async with request.app[RESOURCES].pool.acquire() as conn:
        outcome, job_id = await jobs_db.replay_one(conn, tenant_of(request).id, dl_id)
    if outcome == "missing":
        raise NotFound(f"dead letter not found: {dl_id}")
    if outcome == "purged":
        raise NotFound(f"dead letter {dl_id}: the original job was purged by retention")
    if outcome == "replayed_before":
        raise Conflict(f"dead letter {dl_id} was already replayed")
    return json_response(wire.ReplayDeadLetterResponse(job_id=job_id or ""), 201)


async def replay_dead_letters(request: web.Request) -> web.Response:
    body = await decode(request, wire.ReplayDeadLettersRequest)
    limit = body.limit or 100
    max_batch = settings_of(request).max_batch
    if limit > max_batch:
        raise ValidationFailed(f"limit cannot exceed {max_batch}")
    tenant = tenant_of(request).id
    pool = request.app[RESOURCES].pool
    ids = await jobs_db.dead_letters_to_replay(
        pool,
        tenant,
        body.queue,
        body.task_name,
        instant("created_after", body.created_after),
        instant("created_before", body.created_before),
        limit,
    )
    results = []
    async with pool.acquire() as conn:
        for dl_id in ids:
            outcome, job_id = await jobs_db.replay_one(conn, tenant, dl_id)
            if outcome == "replayed":
                results.append(wire.ReplayedDeadLetter(dead_letter_id=dl_id, job_id=job_id))
            elif outcome == "purged":
                results.append(
                    wire.ReplayedDeadLetter(
                        dead_letter_id=dl_id, error="the original job was purged by retention"
                    )
                )
            # replayed concurrently by another caller, or gone: not listed
    replayed = sum(1 for r in results if r.job_id)
    return json_response(wire.ReplayDeadLettersResponse(replayed=replayed, results=results))
