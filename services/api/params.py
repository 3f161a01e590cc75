"""Path and query-string parsing: the {queue} of queue routes, and the query strings of list routes
(API-NOTES section 1.1). Clamp what upstream clamps, reject what cannot be read with a 400."""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from shared.db.listing import Page, decode_cursor
from shared.domain import ValidationFailed, instant

MAX_OFFSET = 2**62  # beyond PostgreSQL's bigint there is nothing to skip to anyway


def queue_in_path(request: web.Request) -> str:
    """The {queue} of a queue route: the same bounds as a job's queue, so that no route accepts a
    queue name that no job can have."""
    queue = request.match_info["queue"]
    if not queue.strip() or len(queue) > 255:
        raise ValidationFailed("queue name must be 1 to 255 characters, not all blank")
    return queue


def parse_time(name: str, raw: str) -> datetime:
    """RFC 3339 / ISO 8601; a '+' that a query string turned into a space is restored; naive is UTC."""
    text = raw.strip().replace(" ", "+")
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationFailed(f"{name} is not an RFC 3339 timestamp: {raw!r}") from None
    return instant(name, value)  # type: ignore[return-value]


def _int(name: str, raw: str) -> int:
    try:
        value = int(raw)
        if abs(value) > 2**63:
            raise ValueError
        return value
    except ValueError:
        raise ValidationFailed(f"{name} must be an integer, not {raw!r}") from None


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise ValidationFailed(f"{name} must be true or false, not {raw!r}")


def page_from(request: web.Request, filters: dict[str, tuple[str, tuple[str, ...] | None]]) -> Page:
    """A Page from the shared list parameters. `filters` maps a query parameter to (column, allowed
    values or None); parameters not listed are ignored, as upstream ignores them."""
    q = request.query
    page = Page()
    if "limit" in q:
        page.limit = min(100, max(1, _int("limit", q["limit"])))
    if "offset" in q:
        page.offset = min(MAX_OFFSET, max(0, _int("offset", q["offset"])))
    page.ascending = q.get("order_by", "").strip() == "created_at ASC"
    if "include_total" in q:
        page.include_total = _bool("include_total", q["include_total"])
    if q.get("cursor"):
        page.cursor = decode_cursor(q["cursor"])
    if q.get("created_after"):
        page.created_after = parse_time("created_after", q["created_after"])
    if q.get("created_before"):
        page.created_before = parse_time("created_before", q["created_before"])
    for param, (column, allowed) in filters.items():
        value = q.get(param)
        if not value:
            continue
        if allowed is not None and value not in allowed:
            raise ValidationFailed(f"{param} must be one of {', '.join(allowed)}, not {value!r}")
        page.filters[column] = value
    return page


def replayed_filter(request: web.Request) -> bool | None:
    raw = request.query.get("replayed")
    return None if not raw else _bool("replayed", raw)
