"""Whether a URL reaches PostgreSQL through a transaction pooler, found at start, and the stand-in
for the LISTEN connection where one cannot work.

PgBouncer in transaction mode, and poolers like it, hand each transaction to whichever server
connection is free. Two things a process relies on then break: asyncpg's named prepared statements
(before PgBouncer 1.21, or without its `max_prepared_statements`, a statement prepared in one
transaction is unknown to the server connection of the next: `prepared statement
"__asyncpg_stmt_13__" does not exist`), and LISTEN (a notification goes to the session that
listens, which the pooler lends to other clients in between). The documented set-up points the
pool at the pooler with QUEUEFLOW_STATEMENT_CACHE_SIZE=0 and gives QUEUEFLOW_LISTEN_DATABASE_URL
straight to PostgreSQL. A process given less still works: `probe` finds the pooler, the pool then
prepares every statement unnamed unless named ones are seen to survive, and `Poller` wakes every
waiter at a bounded interval instead of a LISTEN connection that would hear nothing.

How `probe` knows. Two connections through the URL each ask which server process answers them
(pg_backend_pid()), over several rounds:

- Directly, and through a session pooler, a connection keeps one server process while it is open,
  and two open connections never share one. No answer can then look like pooling: the probe has no
  false positive.
- Through a transaction pooler, one connection's answer changes, or the second connection is lent
  the server process the first has just released (what a lightly loaded pooler does: it reuses the
  most recently released one). Either is proof, and one of them shows as soon as the second
  connection's transaction is given the first one's server, or the first is moved off it.

In each round the second connection holds a transaction open, which pins its server connection,
while the first runs a named statement it prepared at the start. When the second was lent the
server holding the statement, the first must run elsewhere, and the statement either fails there
(the pooler does not carry named statements: the cache goes off) or answers from the other server
process (the pooler prepares them again where needed, as PgBouncer 1.21+ does with
`max_prepared_statements`: the cache stays on). A probe that cannot tell takes them as lost.

A pooler in statement mode refuses transactions, which QueueFlow cannot do without: that is a
start-up error naming what to configure instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass

import asyncpg
import structlog

from shared.config import ConfigError
from shared.db.listener import Hub
from shared.db.pool import is_unavailable
from shared.db.queries import Q

log = structlog.get_logger("queueflow.db")

# Rounds of the probe before it concludes there is no transaction pooler. A lightly loaded pooler
# shows itself in the first; one shared with busy clients may lend other server connections, and
# each round is another chance to see a connection moved.
PROBE_ROUNDS = 8
# How long the second connection holds its transaction for the first one's statement. Only a
# pooler with a single free server connection makes the first wait for it; the round then ends
# with what it saw (the answers, not this wait, are what the probe concludes from).
HOLD_SECS = 0.5
# The longest the poller lets a waiter sleep between re-checks when there is no LISTEN connection.
POLL_SECS = 1.0


@dataclass(frozen=True, slots=True)
class Pooling:
    """What `probe` found behind a URL."""

    transaction_pooler: bool
    # A named prepared statement outlives its transaction (always, without a transaction pooler).
    named_statements: bool


DIRECT = Pooling(transaction_pooler=False, named_statements=True)


async def probe(dsn: str, setting: str = "DATABASE_URL") -> Pooling:
    """Whether `dsn` goes through a transaction pooler, and whether named prepared statements
    survive it (see the module's docstring). Raises ConfigError for a statement-mode pooler (naming
    `setting`, the URL's), and the driver's error when the URL cannot be reached."""
    first = await _connect(dsn)
    try:
        second = await _connect(dsn)
        try:
            return await _probe(first, second, setting)
        finally:
            await _close(second)
    finally:
        await _close(first)


async def _connect(dsn: str) -> asyncpg.Connection[asyncpg.Record]:
    # No statement cache: the probe's own queries are unnamed, so they work through any pooler.
    return await asyncpg.connect(
        dsn, statement_cache_size=0, server_settings={"application_name": "queueflow-probe"}
    )


async def _close(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(conn.close(), 2)


async def _probe(
    first: asyncpg.Connection[asyncpg.Record], second: asyncpg.Connection[asyncpg.Record], setting: str
) -> Pooling:
    # Through a pooler that does not carry it, the statement stays behind on one server connection
    # until that connection closes (it is a few bytes, and the name is never used again).
    statement = await first.prepare(Q.backend_pid, name=f"queueflow_probe_{uuid.uuid4().hex}")
    home = await statement.fetchval()  # the server process that prepared it
    firsts: set[int] = {home}
    seconds: set[int] = set()
    survives = False  # seen to answer from a server process other than the one that prepared it
    pooled = False
    for _ in range(PROBE_ROUNDS):
        held = second.transaction()
        try:
            await held.start()
        except asyncpg.PostgresConnectionError as err:
            if "statement pooling" in str(err):
                raise ConfigError(_STATEMENT_MODE.format(setting=setting)) from None
            raise
        try:
            seconds.add(await second.fetchval(Q.backend_pid))
            again = asyncio.ensure_future(statement.fetchval())
            await asyncio.wait([again], timeout=HOLD_SECS)
            waited = not again.done()
        finally:
            await held.rollback()
        try:
            answer: int = await again
        except asyncpg.InvalidSQLStatementNameError:
            # Only a pooler can lose a statement the connection prepared.
            return Pooling(transaction_pooler=True, named_statements=False)
        firsts.add(answer)
        survives = survives or answer != home
        pooled = len(firsts) > 1 or len(seconds) > 1 or bool(firsts & seconds)
        # Proof found; go on only while a later round could still see the statement elsewhere (a
        # round in which the first had to wait for a server will not: there is one to go round).
        if pooled and (survives or waited):
            break
    if not pooled:
        return DIRECT
    return Pooling(transaction_pooler=True, named_statements=survives)


_STATEMENT_MODE = (
    "{setting} goes through a pooler in statement mode, which refuses transactions "
    "('transaction blocks not allowed in statement pooling mode'), and QueueFlow needs them: use "
    "transaction pooling (pool_mode = transaction) with QUEUEFLOW_LISTEN_DATABASE_URL straight to "
    "PostgreSQL and QUEUEFLOW_STATEMENT_CACHE_SIZE=0 (before PgBouncer 1.21), or session pooling"
)


class Poller:
    """Stands in for the Listener when the LISTEN connection would go through a transaction
    pooler, where it would hear nothing: every `interval` seconds, every waiter of `hub` re-checks
    as after a lost connection (`Hub.wake_all`). The hub stays disconnected, so nothing trusts an
    empty claim for long, and the worker-key cache keeps no key (revocations are not heard)."""

    def __init__(self, hub: Hub, interval: float) -> None:
        self.hub = hub
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="queueflow-poller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.hub.wake_all()


@dataclass(frozen=True, slots=True)
class Route:
    """How the process reaches PostgreSQL, decided at start from the probes: what /ready reports."""

    # The settings whose URL goes through a transaction pooler ("DATABASE_URL", and
    # "QUEUEFLOW_LISTEN_DATABASE_URL" when that is set and does).
    pooled: tuple[str, ...] = ()
    statement_cache_size: int = 100  # the pool's, in effect
    listen: bool = True  # a LISTEN connection hears notifications (False: the Poller stands in)
    warning: str | None = None  # what the process adapted, and what to configure instead


async def plan(dsn: str, direct_dsn: str, statement_cache_size: int, poll_secs: float) -> Route:
    """Probe the pool's URL (`dsn`) and the LISTEN connection's (`direct_dsn`, probed only when it
    differs), and decide the pool's statement cache and whether LISTEN can work; logged once, as a
    warning when the process had to adapt. A listen URL that cannot be reached now is taken as
    direct: the listener tries it again until it answers, as it always has."""
    pool = await probe(dsn)
    if direct_dsn == dsn:
        listen = pool
    else:
        try:
            listen = await probe(direct_dsn, "QUEUEFLOW_LISTEN_DATABASE_URL")
        except Exception as err:
            if not is_unavailable(err):
                raise
            log.warning("listen_url_not_probed", error=str(err))
            listen = DIRECT
    pooled = tuple(
        name
        for name, found, own in (
            ("DATABASE_URL", pool, True),
            ("QUEUEFLOW_LISTEN_DATABASE_URL", listen, direct_dsn != dsn),
        )
        if own and found.transaction_pooler
    )
    if not pooled:
        return Route(statement_cache_size=statement_cache_size)
    adapted = []
    cache = statement_cache_size
    if pool.transaction_pooler and not pool.named_statements and cache > 0:
        cache = 0
        adapted.append(
            "its named prepared statements do not outlive a transaction, so the pool prepares every"
            " statement unnamed (set QUEUEFLOW_STATEMENT_CACHE_SIZE=0 to say so; PgBouncer 1.21+"
            " with max_prepared_statements keeps them)"
        )
    if listen.transaction_pooler:
        adapted.append(
            "LISTEN needs a session of its own: set QUEUEFLOW_LISTEN_DATABASE_URL to a URL straight"
            " to PostgreSQL (or through a session-mode pool); until then there is no LISTEN"
            f" connection, and waiters re-check for work every {poll_secs:g} s instead of being"
            " notified"
        )
    warning = None
    if adapted:
        goes = "goes" if len(pooled) == 1 else "go"
        warning = f"{' and '.join(pooled)} {goes} through a transaction pooler: " + "; ".join(adapted)
    route = Route(pooled, cache, not listen.transaction_pooler, warning)
    fields = {
        "urls": list(pooled),
        "statement_cache_size": cache,
        "named_statements": pool.named_statements,
        "notifications": "listen" if route.listen else "poll",
    }
    if warning is not None:
        log.warning("transaction_pooler_detected", detail=warning, **fields)
    else:
        log.info("transaction_pooler_detected", **fields)
    return route
