"""The asyncpg pool every service uses (jsonb as Python objects via msgspec, UTC sessions), and the
handles the rest of the code may hold without importing the driver: `Pool`, `Connection`,
`Executor` (either), and `transaction(pool)`, which hands out a connection inside a transaction
for callers that compose several repository calls into one atomic change."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar
from urllib.parse import parse_qs, urlsplit

import asyncpg
import msgspec
from asyncpg.pool import PoolConnectionProxy

from shared.domain.jobs import DEFAULT_CONFIG

Record = asyncpg.Record
Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
# A connection of its own or one borrowed from the pool: repository functions accept either.
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"

_encode = msgspec.json.encode
_decode = msgspec.json.decode


class Executor(Protocol):
    """A pool or a connection: anything a single statement can run on."""

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]: ...
    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None: ...
    async def fetchval(self, query: str, *args: Any) -> Any: ...
    async def execute(self, query: str, *args: Any) -> str: ...


T = TypeVar("T")


def record(cls: type[T], row: asyncpg.Record, without: tuple[str, ...] = ()) -> T:
    """A domain record from a row: columns fill the fields of the same name (validated and typed
    by msgspec: text to StrEnums, jsonb to nested structs); columns the record lacks, and those
    named in `without`, are ignored."""
    columns = dict(row.items())
    for name in without:
        columns.pop(name, None)
    return msgspec.convert(columns, cls)


_DEFAULT_CONFIG_JSONB = b"\x01" + _encode(DEFAULT_CONFIG)


def _jsonb_encode(value: Any) -> bytes:
    if value is DEFAULT_CONFIG:  # the one shared instance most jobs carry: encoded once
        return _DEFAULT_CONFIG_JSONB
    return b"\x01" + _encode(value)


def jsonb_binary(document: bytes) -> bytes:
    """A JSON document (bytes) as a jsonb value's binary form: what copy_rows takes for a jsonb
    column given in `binary`."""
    return b"\x01" + document


def _jsonb_decode(data: bytes) -> Any:
    return _decode(data[1:])


# A one-dimensional text[] in PostgreSQL's binary form: dimensions, has-nulls, element type (text),
# length, lower bound; then each element's length and bytes.
_TEXT_ARRAY_HEAD = struct.Struct("!iiIii")
_TEXT_OID = 25


@functools.lru_cache(maxsize=4096)
def text_array(items: tuple[str, ...]) -> bytes:
    """`items` as a binary text[] (no NULL elements): what copy_rows takes for a text[] column.
    Cached: a bulk enqueue repeats a few (a limit key per customer)."""
    parts = [_TEXT_ARRAY_HEAD.pack(1, 0, _TEXT_OID, len(items), 1)]
    for item in items:
        data = item.encode()
        parts.append(len(data).to_bytes(4, "big"))
        parts.append(data)
    return b"".join(parts)


async def copy_rows(
    db: Executor,
    schema: str,
    table: str,
    columns: Sequence[str],
    records: list[tuple[Any, ...]],
    *,
    binary: frozenset[str] = frozenset(),
) -> str:
    """COPY `records` into `schema.table` (as asyncpg's copy_records_to_table), except that the
    columns named in `binary` arrive already in their binary form (bytes, or None for NULL), e.g.
    text_array's or jsonb_binary's, made once for the values a batch repeats. asyncpg's own array
    encoder costs about 1 µs an array (abstract-class checks on the list and on each element;
    docs/benchmarks.md, "Design decisions the measurements established"; 1c4a86a).

    asyncpg encodes each record by the types of a statement that selects the columns; here that
    statement selects the `binary` columns as bytea, whose binary form is the bytes as given."""
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as pooled:
            return await copy_rows(pooled, schema, table, columns, records, binary=binary)
    target = f"{_ident(schema)}.{_ident(table)}"
    selected = ", ".join(f"NULL::bytea AS {_ident(c)}" if c in binary else _ident(c) for c in columns)
    # asyncpg's own copy_records_to_table, with that statement: its internals (the version pinned
    # in pyproject.toml); a pool's proxy forwards them to its connection.
    conn: Any = db
    intro = await conn._prepare(f"SELECT {selected} FROM {target} LIMIT 1", use_cache=True)
    statement = f"COPY {target}({', '.join(map(_ident, columns))}) FROM STDIN (FORMAT binary)"
    status: str = await conn._protocol.copy_in(statement, None, None, records, intro._state, None)
    return status


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def init_connection(conn: Connection) -> None:
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=_jsonb_encode, decoder=_jsonb_decode, format="binary"
    )


async def _keep_session(conn: Connection) -> None:
    """Nothing to reset on release: pool connections never LISTEN, take session advisory locks or
    change settings (the listener and the migrator use connections of their own). asyncpg still
    rolls back a transaction left open; this only skips the reset query's extra round trip."""


async def create_pool(
    dsn: str, min_size: int = 2, max_size: int = 50, statement_cache_size: int = 100
) -> Pool:
    """`statement_cache_size` 0 makes asyncpg prepare every statement unnamed, within the exchange
    that runs it, which a transaction pooler without prepared-statement tracking (PgBouncer before
    1.21) needs: a named statement prepared on one server connection is unknown to the next."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min(min_size, max_size),
        max_size=max_size,
        statement_cache_size=statement_cache_size,
        init=init_connection,
        server_settings={"application_name": "queueflow", "timezone": "UTC"},
        max_inactive_connection_lifetime=60,  # a burst's extra connections do not linger
        reset=_keep_session,
    )
    assert pool is not None
    return pool


@contextlib.asynccontextmanager
async def transaction(pool: Pool) -> AsyncIterator[Connection]:
    """A pooled connection inside a transaction, committed when the block ends, rolled back when
    it raises."""
    async with pool.acquire() as conn, conn.transaction():
        yield conn


def where(dsn: str) -> str:
    """`dsn`'s hosts, ports and database name, for a message: never its user or password."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        return "the configured database"
    hosts = parts.netloc.rpartition("@")[2] or parse_qs(parts.query).get("host", ["localhost"])[0]
    return f"{hosts}{parts.path or '/'}"


def is_unavailable(err: BaseException) -> bool:
    """Whether `err` says the database cannot be reached right now (refused or lost connections,
    a server shutting down, crashed or still starting, no connection slot free), rather than that
    a statement was wrong: the same request may succeed later. The API answers it with 503 and
    Retry-After; the in-process worker retries its outcome writes until they land."""
    if isinstance(
        err,
        OSError  # refused, reset, timed out (TimeoutError), and the batchers' shutdown ConnectionError
        | asyncpg.PostgresConnectionError  # SQLSTATE class 08, and a connection lost mid-statement
        | asyncpg.exceptions.OperatorInterventionError  # 57: admin or crash shutdown, starting up
        | asyncpg.exceptions.InsufficientResourcesError,  # 53: too many connections, disk full
    ):
        return True
    # asyncpg's protocol state left inconsistent by a connection lost mid-exchange ("cannot switch
    # to state N"): the pool discards that connection on release.
    if isinstance(err, asyncpg.exceptions.InternalClientError):
        return True
    # asyncpg's own "connection is closed" / "pool is closing" (not its misuse errors, which are bugs)
    return isinstance(err, asyncpg.InterfaceError) and ("closed" in str(err) or "closing" in str(err))


def is_database_error(err: BaseException) -> bool:
    """Whether `err` came from the database or the connection to it (rather than from a bug):
    callers back off and try again instead of logging a traceback."""
    return is_unavailable(err) or isinstance(err, asyncpg.PostgresError | asyncpg.InterfaceError)


# Writes retried across an outage back off from this to RETRY_MAX_SECS.
RETRY_FIRST_SECS = 0.05
RETRY_MAX_SECS = 2.0


async def until_answered(
    write: Callable[[], Awaitable[T]], on_retry: Callable[[BaseException, float], None] | None = None
) -> T:
    """`write()`, tried again while the database is unreachable (`on_retry(error, delay)` before
    each wait) until it lands or answers; any other error is raised. For writes that are safe to
    repeat (lease-guarded outcomes, give-backs by key); cancelling the caller ends the tries."""
    delay = RETRY_FIRST_SECS
    while True:
        try:
            return await write()
        except Exception as err:
            if not is_unavailable(err):
                raise
            if on_retry is not None:
                on_retry(err, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_SECS)


class _QuietWhenUnreachable(logging.Filter):
    """asyncpg's pool logs each failed attempt to reopen its minimum connections with a traceback.
    While the database is unreachable that is an expected state, not a bug: keep the warning and
    the error's text, drop the traceback (a bug's still carries one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if err is not None and is_unavailable(err):
            record.msg = f"{record.getMessage()}: {type(err).__name__}: {err}"
            record.args = None
            record.exc_info = None
        return True


logging.getLogger("asyncpg.pool").addFilter(_QuietWhenUnreachable())
