"""What the db layer does about an unreachable database: which errors say so, the retry of writes
across it, the give-back of a claim whose answer was lost, and the group commit failing a whole
group at once. The end-to-end proof (a real crash and outage) is tests/e2e/test_database_outage.py."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from shared.db import jobs as jobs_db
from shared.db.batcher import GroupCommit
from shared.db.pool import create_pool, is_unavailable, until_answered
from shared.web.errors import error_middleware
from tests.support.waiting import eventually


@pytest.mark.parametrize(
    "err",
    [
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError(),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.CannotConnectNowError("the database system is starting up"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        asyncpg.InterfaceError("connection is closed"),
        asyncpg.InterfaceError("pool is closing"),
        asyncpg.exceptions.InternalClientError(
            "cannot switch to state 15; another operation (2) is in progress"
        ),
    ],
)
def test_errors_that_say_the_database_is_unreachable(err: BaseException) -> None:
    assert is_unavailable(err)


@pytest.mark.parametrize(
    "err",
    [
        asyncpg.UniqueViolationError("duplicate key"),
        asyncpg.UndefinedColumnError("column x does not exist"),
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        ValueError("a bug"),
        KeyError("a bug"),
    ],
)
def test_errors_that_are_not_about_reaching_it(err: BaseException) -> None:
    assert not is_unavailable(err)


async def test_until_answered_retries_only_unavailability() -> None:
    tries: list[float] = []

    async def flaky() -> str:
        tries.append(asyncio.get_running_loop().time())
        if len(tries) < 4:
            raise ConnectionRefusedError(111, "Connection refused")
        return "written"

    seen: list[float] = []
    assert await until_answered(flaky, lambda _err, delay: seen.append(delay)) == "written"
    assert len(tries) == 4 and seen == [0.05, 0.1, 0.2]  # backing off, doubling

    async def broken() -> None:
        raise asyncpg.UniqueViolationError("duplicate key")

    with pytest.raises(asyncpg.UniqueViolationError):
        await until_answered(broken)


async def test_a_claim_whose_answer_was_lost_is_given_back_by_its_key(db, database_url) -> None:
    pool = await create_pool(database_url, 1, 2)
    try:
        await db.execute(
            "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, retry_count)"
            " SELECT gen_random_uuid(), 'q', 't', '{}'::jsonb, CASE WHEN i = 1 THEN 1 ELSE 0 END"
            " FROM generate_series(1, 3) i"
        )
        key, other = uuid.uuid4(), uuid.uuid4()
        leases = await jobs_db.claim(pool, "q", 2, 30, key=key)
        assert len(leases) == 2
        assert {lease.token.version for lease in leases} == {4}  # shaped as random UUIDs
        assert len({lease.token for lease in leases}) == 2
        unclaimed = await jobs_db.claim(pool, "q", 1, 30, key=other)
        # Completed by its holder before the give-back: it stays completed.
        done = leases[0]
        assert await jobs_db.complete_many(pool, [(done.job.id, done.token, {})]) == [None]

        assert await jobs_db.release_unanswered_claim(pool, "q", uuid.uuid4()) == 0
        assert await jobs_db.release_unanswered_claim(pool, "q", key) == 1
        assert await jobs_db.release_unanswered_claim(pool, "q", key) == 0  # idempotent
        rows = {
            r["id"]: r
            for r in await db.fetch("SELECT id, status, retry_count, lease_token FROM queueflow.jobs")
        }
        given_back = rows[leases[1].job.id]
        assert given_back["status"] in ("pending", "retrying") and given_back["lease_token"] is None
        assert given_back["status"] == ("retrying" if given_back["retry_count"] else "pending")
        assert rows[done.job.id]["status"] == "completed"
        assert rows[unclaimed[0].job.id]["status"] == "running"  # another claim's job: untouched
    finally:
        await pool.close()


class _Unreachable(GroupCommit[int, int]):
    def __init__(self) -> None:
        super().__init__(pool=None)  # type: ignore[arg-type]
        self.calls: list[list[int]] = []

    async def _write_many(self, items: list[int]) -> list[int | BaseException]:
        self.calls.append(items)
        raise ConnectionRefusedError(111, "Connection refused")


async def test_a_group_meeting_an_unreachable_database_fails_at_once_not_item_by_item() -> None:
    group = _Unreachable()
    try:
        answers = await asyncio.gather(*(group.submit(i) for i in range(5)), return_exceptions=True)
    finally:
        await group.close()
    assert all(isinstance(a, ConnectionRefusedError) for a in answers)
    assert group.calls == [[0, 1, 2, 3, 4]]  # one try for the group, no one-by-one fallback


async def test_the_api_answers_503_with_retry_after_for_an_unreachable_database() -> None:
    async def unreachable(_request: web.Request) -> web.Response:
        raise ConnectionRefusedError(111, "Connection refused")

    async def bug(_request: web.Request) -> web.Response:
        raise KeyError("a bug")

    app = web.Application(middlewares=[error_middleware(is_unavailable)])
    app.router.add_get("/down", unreachable)
    app.router.add_get("/bug", bug)
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/down")
        assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        body = await resp.json()
        assert body["error"] == "database unavailable" and set(body) == {"error", "timestamp"}
        resp = await client.get("/bug")
        assert resp.status == 500 and "Retry-After" not in resp.headers


async def test_lease_jobs_gives_back_a_claim_whose_answer_was_lost(db, database_url, monkeypatch) -> None:
    """The claim commits, then its connection drops before the answer arrives: the caller gets the
    error (a 503, or the worker's retry), and the jobs are given back once the database answers."""
    from shared.db.database import Database
    from shared.runtime import leasing
    from shared.runtime.keys import Lifecycle

    await db.execute(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config)"
        " SELECT gen_random_uuid(), 'q', 't', '{}'::jsonb FROM generate_series(1, 3)"
    )
    real_claim = jobs_db.claim

    async def claim_then_lose_the_answer(*args, **kwargs):
        await real_claim(*args, **kwargs)  # committed
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr(leasing.jobs_db, "claim", claim_then_lose_the_answer)
    database = await Database.open(database_url, min_connections=1, max_connections=2, migrate=False)
    try:
        with pytest.raises(ConnectionResetError):
            await leasing.lease_jobs(database, Lifecycle(), "q", 3, 30, 0, 5)

        async def given_back() -> bool:
            return await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'pending'") == 3

        await eventually(given_back, timeout=10, message="the claim's jobs are given back")
        assert await db.fetchval("SELECT sum(retry_count) FROM queueflow.jobs") == 0
    finally:
        await database.close()


def test_asyncpg_pool_warnings_lose_their_traceback_only_for_an_unreachable_database(caplog) -> None:
    import logging

    pool_log = logging.getLogger("asyncpg.pool")
    with caplog.at_level(logging.WARNING, logger="asyncpg.pool"):
        for err in (ConnectionRefusedError(111, "Connection refused"), KeyError("a bug")):
            try:
                raise err
            except Exception:
                pool_log.warning("Failed to restore the pool connection floor; retrying", exc_info=True)
    unreachable, bug = caplog.records
    assert unreachable.exc_info is None and "ConnectionRefusedError" in unreachable.getMessage()
    assert bug.exc_info is not None
