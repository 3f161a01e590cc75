"""Dead-letter routes: list, get, replay one, replay many by filter."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, settings_of, tenant_of
from services.api.params import dead_letter_id_in_path, list_query
from shared import wire
from shared.db import jobs as jobs_db
from shared.web.body import decode, json_response


async def list_dead_letters(request: web.Request) -> web.Response:
    query = list_query(request, replayed=True)
    found = await jobs_db.list_dead_letters(db_of(request).pool, tenant_of(request).id, query)
    return json_response(wire.ListDeadLettersResponse.of(query.page, found))


async def get_dead_letter(request: web.Request) -> web.Response:
    entry = await jobs_db.get_dead_letter(
        db_of(request).pool, tenant_of(request).id, dead_letter_id_in_path(request)
    )
    return json_response(entry)


async def replay_dead_letter(request: web.Request) -> web.Response:
    dl_id = dead_letter_id_in_path(request)
    job_id = await jobs_db.replay_dead_letter(db_of(request).pool, tenant_of(request).id, dl_id)
    return json_response(wire.ReplayDeadLetterResponse(job_id=str(job_id)), 201)


async def replay_dead_letters(request: web.Request) -> web.Response:
    body = await decode(request, wire.ReplayDeadLettersRequest)
    which = body.to_filter(settings_of(request).max_batch)
    results = await jobs_db.replay_matching(db_of(request).pool, tenant_of(request).id, which)
    replayed = sum(1 for r in results if r.job_id)
    return json_response(wire.ReplayDeadLettersResponse(replayed=replayed, results=results))
