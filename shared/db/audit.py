"""The audit log's repository (migration 42; docs/access.md, "The audit log").

A mutating request's entry is written in the transaction of its change. The API's guard opens a
request scope (`recording`) holding the entry; each repository function that makes a tenant's
change runs its statements in `change(db)`, which, inside such a scope, is a transaction that
inserts the entry before it commits (and marks the scope written once it has), and outside one is
`db` itself, unchanged: the janitor, the runtime and the tests call the same functions at no cost.
Inside the block the change may add what only it knows: `made(id)` (the id of what it created)
and `selected(filter, count)` (a bulk action's filter and the rows it changed).

A request whose entry was not written with its change (it failed, was refused, or its change is
not one transaction of this layer) has it written on its own afterwards (`write`). Nothing here
reads a request: the entry holds only what its callers put in it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import asyncpg
import msgspec

from shared.db.listing import fetch_page
from shared.db.pool import Connection, Executor, record
from shared.db.queries import Q
from shared.domain.audit import AuditEntry, AuditQuery, AuditRecord, selector
from shared.domain.paging import Page


class Scope:
    """A request's pending entry: `written` once a change committed it (or it was written alone),
    `conn` the transaction writing it while a change is under way (nested changes join it)."""

    __slots__ = ("conn", "entry", "written")

    def __init__(self, entry: AuditRecord) -> None:
        self.entry = entry
        self.written = False
        self.conn: Connection | None = None


_SCOPE: ContextVar[Scope | None] = ContextVar("queueflow_audit_scope", default=None)


@contextlib.contextmanager
def recording(entry: AuditRecord) -> Iterator[Scope]:
    """Within the block, changes made through `change` write `entry` in their transaction."""
    scope = Scope(entry)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


@contextlib.asynccontextmanager
async def change(db: Executor, *, atomic: bool = False) -> AsyncIterator[Any]:
    """Where a repository function runs the statements of a tenant's change (a connection when it
    is a transaction): with a request's entry pending, a transaction (on `db`'s connection, or one
    of the pool's) that inserts the entry last; otherwise `db` as it is, or, with `atomic`, a
    transaction of its own all the same."""
    scope = _SCOPE.get()
    if scope is not None and scope.conn is not None:  # a change within a change: one transaction
        yield scope.conn
        return
    pending = scope is not None and not scope.written
    if not pending and not atomic:
        yield db
        return
    async with contextlib.AsyncExitStack() as stack:
        conn: Any = db
        if isinstance(db, asyncpg.Pool):
            conn = await stack.enter_async_context(db.acquire())
        await stack.enter_async_context(conn.transaction())
        if scope is None or not pending:
            yield conn
            return
        scope.conn = conn
        try:
            yield conn
            await insert(conn, scope.entry)
        finally:
            scope.conn = None
    scope.written = True


def pending() -> Scope | None:
    """The request's scope while its entry is unwritten: for a change another task writes (the
    single enqueues' group commit), which writes the entry with it (`entries` in its statement,
    or `insert_many` in its transaction) and marks the scope `written` once that committed."""
    scope = _SCOPE.get()
    return scope if scope is not None and not scope.written and scope.conn is None else None


def made(target: object) -> None:
    """Inside `change`: the id of what the change created, added to the entry's targets."""
    scope = _SCOPE.get()
    if scope is not None and not scope.written:
        scope.entry.targets.append(str(target))


def selected(filter_fields: dict[str, Any] | None, affected: int) -> None:
    """Inside `change`: a bulk action's filter (its set fields) and how many rows it changed."""
    scope = _SCOPE.get()
    if scope is not None and not scope.written:
        scope.entry.filter = selector(filter_fields) if filter_fields is not None else None
        scope.entry.affected = affected


async def insert(db: Executor, entry: AuditRecord) -> None:
    await db.execute(Q.insert_audit_entry, *_values(entry))


def _values(entry: AuditRecord) -> tuple[Any, ...]:
    return (
        entry.tenant,
        entry.actor,
        entry.actor_name,
        entry.role.value,
        entry.action,
        entry.targets,
        entry.filter,
        entry.affected,
        entry.request_id,
        entry.source,
        entry.outcome.value,
        entry.status,
    )


async def insert_many(conn: Connection, made: Sequence[tuple[AuditRecord, object]]) -> None:
    """Entries in the caller's transaction (one round trip: asyncpg pipelines them), each naming,
    last among its targets, what its request made."""
    await conn.executemany(Q.insert_audit_entry, [_values(_naming(entry, what)) for entry, what in made])


def entries(audited: Sequence[tuple[int, AuditRecord]], ids: Sequence[object]) -> str | None:
    """The entries of a statement that writes them with its change (jobs.insert_jobs' $3), as one
    JSON document, each naming `ids[n]` (n: its index) last among its targets; None for none."""
    if not audited:
        return None
    rows = [dict(zip(_COLUMNS, _values(_naming(entry, ids[n])), strict=True)) for n, entry in audited]
    return msgspec.json.encode(rows).decode()


def _naming(entry: AuditRecord, what: object) -> AuditRecord:
    return msgspec.structs.replace(entry, targets=[*entry.targets, str(what)])


_COLUMNS = (
    "tenant_id", "actor", "actor_name", "role", "action", "targets", "filter", "affected",
    "request_id", "source", "outcome", "status",
)  # fmt: skip


async def write(db: Executor, scope: Scope) -> None:
    """The scope's entry on its own (its change, if any, was not one of this layer's)."""
    if not scope.written:
        await insert(db, scope.entry)
        scope.written = True


async def list_entries(db: Executor, tenant: str, query: AuditQuery) -> Page[AuditEntry]:
    """A page of the tenant's entries, newest first unless the page asks otherwise."""
    equal = {"actor": query.actor, "action": query.action}
    holding = {"targets": [query.target]} if query.target is not None else None
    return await fetch_page(db, "audit_log", "bigint", tenant, query.page, _entry, equal, holding=holding)


def _entry(row: asyncpg.Record) -> AuditEntry:
    return record(AuditEntry, row)


async def prune(db: Executor, days: float, batch: int) -> int:
    """Delete up to `batch` entries older than `days` days, oldest first; how many went."""
    status = await db.execute(Q.prune_audit_log, days, batch)
    return int(status.split()[-1])
