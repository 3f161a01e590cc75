"""Paged, tenant-scoped listings with keyset cursors, shared by jobs, dead letters and workflows.

The page is ordered by (created_at, id), fetched as limit + 1 rows so `has_more` is exact, and
continued by an opaque cursor "<created_at as unix microseconds>:<id>".
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from shared.domain import ValidationFailed

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class Page:
    limit: int = 50
    offset: int = 0
    ascending: bool = False
    include_total: bool = False
    cursor: tuple[datetime, str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    filters: dict[str, Any] = field(default_factory=dict)  # column -> exact value
    conditions: list[str] = field(default_factory=list)  # fixed SQL fragments, no parameters


@dataclass(slots=True)
class PageResult:
    rows: list[asyncpg.Record]
    has_more: bool
    total: int | None
    next_cursor: str | None


def encode_cursor(created_at: datetime, row_id: object) -> str:
    micros = (created_at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}:{row_id}"


def decode_cursor(raw: str) -> tuple[datetime, str]:
    micros, sep, row_id = raw.partition(":")
    try:
        if not sep or not row_id:
            raise ValueError
        at = _EPOCH + timedelta(microseconds=int(micros))
        if not 1 < at.year < 9999:
            raise ValueError
        return at, row_id
    except (ValueError, OverflowError):
        raise ValidationFailed("invalid cursor") from None


def _check_cursor_id(row_id: str, id_type: str) -> None:
    try:
        if id_type == "uuid":
            uuid.UUID(row_id)
        elif id_type == "bigint" and not -(2**63) <= int(row_id) < 2**63:
            raise ValueError
    except ValueError:
        raise ValidationFailed("invalid cursor") from None


async def fetch_page(db: Any, table: str, tenant: str, page: Page, id_type: str) -> PageResult:
    """One page of `table` for `tenant`. `id_type` is the SQL type of the id column ('uuid',
    'bigint' or 'text'), used to cast the cursor's id."""
    where = ["tenant_id = $1"]
    args: list[Any] = [tenant]

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    for column, value in page.filters.items():
        where.append(f"{column} = {arg(value)}")
    where.extend(page.conditions)
    if page.created_after is not None:
        where.append(f"created_at >= {arg(page.created_after)}")
    if page.created_before is not None:
        where.append(f"created_at < {arg(page.created_before)}")
    count_where, count_args = list(where), list(args)
    if page.cursor is not None:
        at, row_id = page.cursor
        _check_cursor_id(row_id, id_type)
        op = ">" if page.ascending else "<"
        where.append(f"(created_at, id) {op} ({arg(at)}, {arg(row_id)}::text::{id_type})")
    direction = "ASC" if page.ascending else "DESC"
    sql = f"SELECT * FROM queueflow.{table} WHERE {' AND '.join(where)} ORDER BY created_at {direction}, id {direction}"
    sql += f" LIMIT {arg(page.limit + 1)}"
    if page.cursor is None and page.offset:
        sql += f" OFFSET {arg(page.offset)}"
    rows = await db.fetch(sql, *args)
    has_more = len(rows) > page.limit
    rows = rows[: page.limit]
    total = None
    if page.include_total:
        count_sql = f"SELECT count(*) FROM queueflow.{table} WHERE {' AND '.join(count_where)}"
        total = await db.fetchval(count_sql, *count_args)
    next_cursor = encode_cursor(rows[-1]["created_at"], rows[-1]["id"]) if has_more and rows else None
    return PageResult(rows=rows, has_more=has_more, total=total, next_cursor=next_cursor)
