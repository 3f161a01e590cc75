"""Paged, tenant-scoped listings with keyset cursors: jobs, dead letters, workflows, cron schedules,
the audit log.

The page is fetched as limit + 1 rows so `has_more` is exact. Each listing names its filters as
typed arguments; the SQL is assembled here from fixed fragments, values always as parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import asyncpg

from shared.db.pool import Executor
from shared.domain.paging import Cursor, IdKind, Page, PageRequest

T = TypeVar("T")


async def fetch_page(
    db: Executor,
    table: str,
    id_kind: IdKind,
    tenant: str,
    page: PageRequest,
    to_item: Callable[[asyncpg.Record], T],
    equal: dict[str, Any] | None = None,
    conditions: tuple[str, ...] = (),
    contains: dict[str, str] | None = None,
    holding: dict[str, list[str]] | None = None,
) -> Page[T]:
    """One page of `table` for `tenant`. `equal` maps columns to exact values (None: no filter);
    `contains` maps SQL expressions to text their value must contain (no pattern: `strpos`);
    `holding` maps array columns to elements they must all hold (`@>`);
    `conditions` and the expressions are fixed SQL fragments of this module's callers, never input."""
    where = ["tenant_id = $1"]
    args: list[Any] = [tenant]

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    for column, value in (equal or {}).items():
        if value is not None:
            where.append(f"{column} = {arg(value)}")
    for expression, text in (contains or {}).items():
        where.append(f"strpos({expression}, {arg(text)}) > 0")
    for column, elements in (holding or {}).items():
        where.append(f"{column} @> {arg(elements)}::text[]")
    where.extend(conditions)
    if page.created_after is not None:
        where.append(f"created_at >= {arg(page.created_after)}")
    if page.created_before is not None:
        where.append(f"created_at < {arg(page.created_before)}")
    count_where, count_args = list(where), list(args)
    if page.cursor is not None:
        page.cursor.check_id(id_kind)
        op = ">" if page.ascending else "<"
        where.append(
            f"(created_at, id) {op} ({arg(page.cursor.created_at)}, {arg(page.cursor.id)}::text::{id_kind})"
        )
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
        total = await db.fetchval(
            f"SELECT count(*) FROM queueflow.{table} WHERE {' AND '.join(count_where)}", *count_args
        )
    next_cursor = None
    if has_more and rows:
        next_cursor = Cursor(rows[-1]["created_at"], str(rows[-1]["id"])).encode()
    return Page(items=[to_item(r) for r in rows], has_more=has_more, total=total, next_cursor=next_cursor)
