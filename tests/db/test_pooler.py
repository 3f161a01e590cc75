"""The start-up probe for a transaction pooler (shared/db/pooler.py) against Debian's real PgBouncer
(1.18): no false positive straight to PostgreSQL or through session pooling, found in transaction
pooling however the bouncer hands out its server connections (one of them, or several shared with
busy clients), named statements known not to survive it, statement pooling refused with what to
configure; and the migrations, which go through the same URL when no listen URL is set, apply
through it once under concurrency and leave no lock behind. PgBouncer 1.21+ with
max_prepared_statements, which no registry the project may use ships, is emulated by
tests/support/tracking_pooler.py: still a transaction pooler to the probe, with the cache kept."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

from shared.config import ConfigError
from shared.db.migrate import _LOCK_KEY, apply_migrations, migration_files
from shared.db.pooler import DIRECT, Pooling, plan, probe
from tests.support.pgbouncer import pgbouncer
from tests.support.tracking_pooler import tracking_pooler

pytestmark = pytest.mark.timeout(120)

UNTRACKED = Pooling(transaction_pooler=True, named_statements=False)


async def test_a_direct_connection_is_not_taken_for_a_pooler(database_url: str) -> None:
    for _ in range(3):
        assert await probe(database_url) == DIRECT


async def test_pgbouncer_in_session_mode_is_not_taken_for_a_transaction_pooler(database_url: str) -> None:
    with pgbouncer(database_url, pool_mode="session", pool_size=4) as bouncer:
        for _ in range(3):
            assert await probe(bouncer.url_for(database_url)) == DIRECT
        assert "login attempt: db=" in bouncer.log_text()  # the probe went through it


async def test_named_statements_do_not_survive_pgbouncer_1_18_in_transaction_mode(database_url: str) -> None:
    """What the probe relies on, shown with the driver alone: a statement prepared on one server
    connection is unknown to another (so a default-cache pool through this bouncer would fail)."""
    with pgbouncer(database_url, pool_mode="transaction", pool_size=4) as bouncer:
        url = bouncer.url_for(database_url)
        first = await asyncpg.connect(url, statement_cache_size=0)
        second = await asyncpg.connect(url, statement_cache_size=0)
        try:
            statement = await first.prepare("SELECT pg_backend_pid()", name="named_here")
            prepared_on = await statement.fetchval()
            async with second.transaction():
                # The bouncer lends the second connection the server the first just released...
                assert await second.fetchval("SELECT pg_backend_pid()") == prepared_on
                # ... so the first runs on another one, which has never heard of the statement.
                with pytest.raises(asyncpg.InvalidSQLStatementNameError):
                    await statement.fetchval()
        finally:
            await first.close()
            await second.close()


async def test_pgbouncer_in_transaction_mode_is_found_and_its_named_statements_are_not_trusted(
    database_url: str,
) -> None:
    with pgbouncer(database_url, pool_mode="transaction", pool_size=8) as bouncer:
        for _ in range(3):
            assert await probe(bouncer.url_for(database_url)) == UNTRACKED


async def test_a_transaction_pooler_with_a_single_server_connection_is_found(database_url: str) -> None:
    """Every transaction then gets the same server process: the proof is that two open
    connections share it, which no direct connection or session pool can do."""
    with pgbouncer(database_url, pool_mode="transaction", pool_size=1) as bouncer:
        assert await probe(bouncer.url_for(database_url)) == UNTRACKED


async def test_a_transaction_pooler_shared_with_busy_clients_is_found(database_url: str) -> None:
    """Other clients keep taking and releasing the bouncer's server connections meanwhile, so the
    probe's connections are lent whichever is free."""
    with pgbouncer(database_url, pool_mode="transaction", pool_size=6) as bouncer:
        url = bouncer.url_for(database_url)
        async with _busy_clients(url, 4):
            for _ in range(3):
                assert await probe(url) == UNTRACKED


@contextlib.asynccontextmanager
async def _busy_clients(url: str, count: int) -> AsyncIterator[None]:
    stop = asyncio.Event()

    async def client() -> None:
        conn = await asyncpg.connect(url, statement_cache_size=0)
        try:
            while not stop.is_set():
                async with conn.transaction():
                    await conn.fetchval("SELECT pg_backend_pid()")
                    await asyncio.sleep(0)  # hold the server connection across a loop turn
        finally:
            await conn.close()

    tasks = [asyncio.create_task(client()) for _ in range(count)]
    await asyncio.sleep(0.1)
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def test_statement_pooling_is_refused_with_what_to_configure(database_url: str) -> None:
    with (
        pgbouncer(database_url, pool_mode="statement", pool_size=4) as bouncer,
        pytest.raises(ConfigError) as refused,
    ):
        await probe(bouncer.url_for(database_url))
    message = str(refused.value)
    assert "DATABASE_URL goes through a pooler in statement mode" in message
    assert "QUEUEFLOW_LISTEN_DATABASE_URL" in message and "QUEUEFLOW_STATEMENT_CACHE_SIZE=0" in message


async def test_the_plan_for_only_a_transaction_pooler_url_turns_the_cache_off_and_polls(
    database_url: str,
) -> None:
    with pgbouncer(database_url, pool_mode="transaction", pool_size=4) as bouncer:
        url = bouncer.url_for(database_url)
        route = await plan(url, url, 100, 1.0)
        assert (route.pooled, route.statement_cache_size, route.listen) == (("DATABASE_URL",), 0, False)
        assert route.warning is not None
        assert "QUEUEFLOW_LISTEN_DATABASE_URL" in route.warning
        assert "QUEUEFLOW_STATEMENT_CACHE_SIZE=0" in route.warning
        # Configured as documented: nothing to adapt, nothing to warn of, LISTEN straight to PostgreSQL.
        configured = await plan(url, database_url, 0, 1.0)
        assert (configured.pooled, configured.statement_cache_size, configured.listen) == (
            ("DATABASE_URL",),
            0,
            True,
        )
        assert configured.warning is None
        # A listen URL that goes through the pooler too is no better than none.
        both = await plan(url, bouncer.url_for(database_url) + "?application_name=other", 0, 1.0)
        assert (both.pooled, both.listen) == (("DATABASE_URL", "QUEUEFLOW_LISTEN_DATABASE_URL"), False)
    direct = await plan(database_url, database_url, 100, 1.0)
    assert (direct.pooled, direct.statement_cache_size, direct.listen, direct.warning) == (
        (),
        100,
        True,
        None,
    )


async def test_migrations_through_a_transaction_pooler_apply_once_and_leave_no_lock(
    empty_database: str,
) -> None:
    with pgbouncer(empty_database, pool_mode="transaction", pool_size=3) as bouncer:
        url = bouncer.url_for(empty_database)
        results = await asyncio.gather(*(apply_migrations(url) for _ in range(4)))
        assert sorted(r for r in results if r) == [[v for v, _ in migration_files()]]
        assert await apply_migrations(url) == []
    conn = await asyncpg.connect(empty_database)
    try:
        held = await conn.fetchval("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert held == 0
        # And the lock is free for the next migrator, which does not wait.
        assert await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _LOCK_KEY) is True
    finally:
        await conn.close()


async def test_a_transaction_pooler_that_carries_named_statements_is_found_and_keeps_the_cache(
    database_url: str,
) -> None:
    """PgBouncer 1.21+ with max_prepared_statements, emulated: found as a transaction pooler
    (so a missing listen URL is still polled around), and the statement cache is left on."""
    async with tracking_pooler(database_url, pool_size=4) as pooler:
        url = pooler.url_for(database_url)
        for _ in range(3):
            assert await probe(url) == Pooling(transaction_pooler=True, named_statements=True)
        assert pooler.carried >= 1  # the probe's statement really ran on a server connection that lacked it
        route = await plan(url, url, 100, 1.0)
        assert (route.pooled, route.statement_cache_size, route.listen) == (("DATABASE_URL",), 100, False)
        assert route.warning is not None and "QUEUEFLOW_LISTEN_DATABASE_URL" in route.warning
        assert "QUEUEFLOW_STATEMENT_CACHE_SIZE" not in route.warning
        configured = await plan(url, database_url, 100, 1.0)
        assert (configured.statement_cache_size, configured.listen, configured.warning) == (100, True, None)
