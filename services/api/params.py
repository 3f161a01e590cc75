"""Path, header and query-string parsing: ids in paths, the {queue} of queue routes, the W3C trace
context headers, and the query strings of list routes (API-NOTES section 1.1). Clamp what upstream
clamps, reject what cannot be read with a 400."""

from __future__ import annotations

import enum
import uuid
from datetime import datetime

from aiohttp import web

from shared.domain.errors import NotFound, ValidationFailed
from shared.domain.jobs import check_queue_name, instant
from shared.domain.paging import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Cursor,
    ListQuery,
    PageRequest,
    checked_offset,
    id_fragment,
)
from shared.domain.traces import TraceContext, trace_context


def trace_headers(request: web.Request) -> TraceContext | None:
    """The request's `traceparent` and `tracestate` (several `tracestate` headers are one list),
    or None: absent, malformed or repeated, a `traceparent` is ignored (never a 400), as the W3C
    recommendation says, and the job starts a trace of its own."""
    parents = request.headers.getall("traceparent", ())
    if len(parents) != 1:
        return None
    return trace_context(parents[0], ",".join(request.headers.getall("tracestate", ())))


def job_id_in_path(request: web.Request) -> uuid.UUID:
    """The {id} of a job route."""
    return job_id(request.match_info["id"])


def job_id(raw: str) -> uuid.UUID:
    """A job id from a path or a body; anything that is not a UUID names no job (404)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise NotFound("job", raw) from None


def id_in_path(request: web.Request, what: str) -> uuid.UUID:
    """The {id} of a route of `what` (a worker key, a push endpoint); anything that is not a UUID
    names none (404)."""
    raw = request.match_info["id"]
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise NotFound(what, raw) from None


def worker_key_id_in_path(request: web.Request) -> uuid.UUID:
    return id_in_path(request, "worker key")


def lease_token(raw: str) -> uuid.UUID | None:
    """A lease token from a body; one that is not a UUID matches no lease (the write is a 409)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        return None


def dead_letter_id_in_path(request: web.Request) -> int:
    raw = request.match_info["id"]
    try:
        value = int(raw)
    except ValueError:
        raise ValidationFailed(f"dead letter id must be an integer, not {raw!r}") from None
    if not 0 < value < 2**63:
        raise NotFound("dead letter", raw)
    return value


def queue_in_path(request: web.Request) -> str:
    """The {queue} of a queue route: the same bounds as a job's queue, so that no route accepts a
    queue name that no job can have."""
    return check_queue_name(request.match_info["queue"])


def parse_time(name: str, raw: str) -> datetime:
    """RFC 3339 / ISO 8601; a '+' that a query string turned into a space is restored; naive is UTC."""
    text = raw.strip().replace(" ", "+")
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationFailed(f"{name} is not an RFC 3339 timestamp: {raw!r}") from None
    return instant(name, value) or value


def _int(name: str, raw: str) -> int:
    try:
        value = int(raw)
        if not -(2**63) <= value < 2**63:  # a 64-bit integer, as the document says
            raise ValueError
    except ValueError:
        raise ValidationFailed(f"{name} must be an integer, not {raw!r}") from None
    return value


def non_negative_int(request: web.Request, name: str, default: int) -> int:
    """An integer query parameter that cannot be negative (absent or empty: `default`)."""
    raw = request.query.get(name, "")
    if not raw:
        return default
    value = _int(name, raw)
    if value < 0:
        raise ValidationFailed(f"{name} cannot be negative, not {raw!r}")
    return value


def clamped_int(request: web.Request, name: str, default: int, lowest: int, highest: int) -> int:
    """An integer query parameter clamped to [lowest, highest] (absent or empty: `default`)."""
    raw = request.query.get(name, "")
    return min(highest, max(lowest, _int(name, raw))) if raw else default


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise ValidationFailed(f"{name} must be true or false, not {raw!r}")


def page_of(request: web.Request) -> PageRequest:
    """The paging parameters every list route takes."""
    q = request.query
    return PageRequest(
        limit=min(MAX_LIMIT, max(1, _int("limit", q["limit"]))) if "limit" in q else DEFAULT_LIMIT,
        offset=checked_offset(_int("offset", q["offset"])) if "offset" in q else 0,
        ascending=q.get("order_by", "").strip() == "created_at ASC",
        include_total=_bool("include_total", q["include_total"]) if "include_total" in q else False,
        cursor=Cursor.decode(q["cursor"]) if q.get("cursor") else None,
        created_after=parse_time("created_after", q["created_after"]) if q.get("created_after") else None,
        created_before=parse_time("created_before", q["created_before"]) if q.get("created_before") else None,
    )


def list_query(
    request: web.Request,
    statuses: type[enum.StrEnum] | None = None,
    *,
    replayed: bool = False,
    id_contains: bool = False,
) -> ListQuery:
    """A list route's page and filters. `status` is checked against `statuses` when the listing
    has them; `replayed` (dead letters) and `id_contains` (jobs) are read only where they mean
    something. Empty values are no filter, and parameters a listing does not know are ignored, as
    upstream ignores them."""
    q = request.query
    status = q.get("status") if statuses is not None else None
    if status and statuses is not None and status not in {str(member) for member in statuses}:
        raise ValidationFailed(f"status must be one of {', '.join(statuses)}, not {status!r}")
    return ListQuery(
        page=page_of(request),
        status=status or None,
        queue=q.get("queue") or None,
        task_name=q.get("task_name") or None,
        replayed=_bool("replayed", q["replayed"]) if replayed and q.get("replayed") else None,
        id_digits=id_fragment(q["id_contains"]) if id_contains and "id_contains" in q else None,
    )
