"""Transactional enqueue: queueflow.enqueue() and queueflow.enqueue_batch() insert jobs as the API
does, inside the caller's transaction, so a job exists and wakes workers if and only if it commits."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import msgspec
import pytest

from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig
from tests.api.helpers import STRICT, WORKER
from tests.support.waiting import eventually

DEFAULT_CONFIG = msgspec.to_builtins(JobConfig())


DEV = {"Authorization": "Bearer dev"}
DEV_TENANT = "tenant1"
ENQUEUE = "SELECT queueflow.enqueue($1, $2, $3)"
ENQUEUE_DOC = (Path(__file__).resolve().parents[2] / "docs" / "enqueue.md").read_text()


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection with jsonb as Python objects, like the server's."""
    connection = await asyncpg.connect(database_url)
    await init_connection(connection)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
async def other(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    """A second session: what everyone else (the workers) sees."""
    connection = await asyncpg.connect(database_url)
    await init_connection(connection)
    try:
        yield connection
    finally:
        await connection.close()


class Notifications:
    """Everything PostgreSQL delivers on queueflow_work, in order; `flush()` sends a marker from a
    separate session and waits for it, so whatever was committed before it has arrived too."""

    def __init__(self, listener: asyncpg.Connection, sender: asyncpg.Connection) -> None:
        self.listener = listener
        self.sender = sender
        self.seen: list[str] = []

    def _on(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.seen.append(payload)

    async def flush(self) -> list[str]:
        marker = f"marker-{uuid.uuid4().hex}"
        await self.sender.execute("SELECT pg_notify('queueflow_work', $1)", marker)
        await eventually(lambda: marker in self.seen)
        before = self.seen[: self.seen.index(marker)]
        self.seen.clear()
        return before


@pytest.fixture
async def work_channel(database_url: str, other: asyncpg.Connection) -> AsyncIterator[Notifications]:
    listener = await asyncpg.connect(database_url)
    notes = Notifications(listener, other)
    await listener.add_listener("queueflow_work", notes._on)
    try:
        yield notes
    finally:
        await listener.close()


async def job_row(db: asyncpg.Connection, job_id: uuid.UUID | str) -> asyncpg.Record | None:
    return await db.fetchrow("SELECT * FROM queueflow.jobs WHERE id = $1", uuid.UUID(str(job_id)))


# --- commit and rollback -------------------------------------------------------------------------


async def test_a_committed_enqueue_is_run_by_an_in_process_worker_woken_at_commit(api, conn, other):
    # A long safety poll: only the commit's notification can wake the worker in time.
    client = await api(mode="all", worker_poll_secs=30)
    async with conn.transaction():
        job_id = await conn.fetchval(ENQUEUE, DEV_TENANT, "echo", {"order": 7})
        assert await job_row(other, job_id) is None  # invisible to workers until COMMIT

    async def completed():
        resp = await client.get(f"/api/v1/jobs/{job_id}", headers=DEV)
        job = await resp.json()
        return job if job.get("status") == "completed" else None

    job = await eventually(completed)
    assert job["result"] == {"order": 7, "echoed": True}
    assert job["tenant_id"] == DEV_TENANT


async def test_a_committed_enqueue_can_be_leased_by_a_remote_worker(api, conn):
    client = await api(**STRICT)
    async with conn.transaction():
        job_id = await conn.fetchval("SELECT queueflow.enqueue('acme', 'resize', queue => 'images')")

    resp = await client.post(
        "/api/v1/queues/images/lease", json={"max_jobs": 5, "wait_secs": 0}, headers=WORKER
    )

    assert resp.status == 200
    leased = (await resp.json())["jobs"]
    assert [j["job"]["id"] for j in leased] == [str(job_id)]
    assert leased[0]["job"]["task_name"] == "resize"


async def test_a_rolled_back_enqueue_leaves_no_job_and_sends_no_wake_up(conn, other, work_channel):
    tx = conn.transaction()
    await tx.start()
    job_id = await conn.fetchval("SELECT queueflow.enqueue('acme', 'echo', queue => 'rolled-back')")
    assert await job_row(conn, job_id) is not None  # the transaction sees its own job
    await tx.rollback()

    assert await job_row(other, job_id) is None
    assert await other.fetchval("SELECT count(*) FROM queueflow.jobs") == 0
    assert "rolled-back" not in await work_channel.flush()


async def test_the_wake_up_is_delivered_at_commit_and_not_before(conn, work_channel):
    tx = conn.transaction()
    await tx.start()
    await conn.fetchval("SELECT queueflow.enqueue('acme', 'echo', queue => 'at-commit')")
    assert "at-commit" not in await work_channel.flush()

    await tx.commit()

    assert "at-commit" in await work_channel.flush()


async def test_a_future_run_at_schedules_the_job_without_waking_workers(conn, work_channel):
    later = datetime.now(UTC) + timedelta(hours=1)
    job_id = await conn.fetchval(
        "SELECT queueflow.enqueue('acme', 'echo', queue => 'later', run_at => $1)", later
    )

    row = await job_row(conn, job_id)
    assert row is not None and row["scheduled_at"] == later and row["status"] == "pending"
    assert "later" not in await work_channel.flush()


# --- the row it writes ---------------------------------------------------------------------------


async def test_enqueue_writes_the_same_row_as_the_api(api, conn):
    client = await api(**STRICT)
    body = {
        "task_name": "send-mail",
        "payload": {"to": "a@example.com"},
        "metadata": {"source": "test"},
        "config": {
            "queue": "mail",
            "priority": 5,
            "max_retries": 7,
            "timeout": 90,
            "retry_backoff": "linear",
        },
    }
    resp = await client.post("/api/v1/jobs", json=body, headers={"Authorization": "Bearer key1"})
    assert resp.status == 201
    via_api = await job_row(conn, (await resp.json())["job_id"])

    via_sql = await job_row(
        conn,
        await conn.fetchval(
            "SELECT queueflow.enqueue('acme', 'send-mail', $1, 'mail', $2, metadata => $3)",
            {"to": "a@example.com"},
            {"priority": 5, "max_retries": 7, "timeout_secs": 90, "retry_backoff": "linear"},
            {"source": "test"},
        ),
    )

    assert via_api is not None and via_sql is not None
    same = (
        "queue_name",
        "task_name",
        "payload",
        "status",
        "priority",
        "metadata",
        "tenant_id",
        "retry_count",
        "delivery_count",
        "idempotency_key",
        "workflow_id",
        "result",
        "error_message",
    )
    assert {k: via_sql[k] for k in same} == {k: via_api[k] for k in same}
    # The API stores what differs from the defaults (and the timeout); the function stores the
    # config complete.
    # Both read as the same config.
    assert via_api["config"] == {
        "priority": 5,
        "max_retries": 7,
        "timeout_secs": 90,
        "retry_backoff": "linear",
    }
    assert via_sql["config"] == {**DEFAULT_CONFIG, **via_api["config"]}
    answers = [
        await (await client.get(f"/api/v1/jobs/{row['id']}", headers={"Authorization": "Bearer key1"})).json()
        for row in (via_api, via_sql)
    ]
    assert answers[0]["config"] == answers[1]["config"]
    assert answers[0]["config"]["jitter_factor"] == DEFAULT_CONFIG["jitter_factor"]


async def test_defaults_make_a_complete_config_and_a_pending_job_on_the_default_queue(conn):
    job_id = await conn.fetchval("SELECT queueflow.enqueue('acme', 'echo')")

    row = await job_row(conn, job_id)
    assert row is not None
    assert row["config"] == DEFAULT_CONFIG
    assert (row["queue_name"], row["status"], row["priority"]) == ("default", "pending", 0)
    assert (row["payload"], row["metadata"]) == ({}, {})
    assert row["scheduled_at"] <= await conn.fetchval("SELECT now()")
    assert uuid.UUID(str(job_id)).version == 4


async def test_a_whole_number_written_as_a_decimal_is_stored_as_an_integer(conn):
    job_id = await conn.fetchval(
        "SELECT queueflow.enqueue('acme', 'echo', config => $1)", {"max_retries": 2.0}
    )

    row = await job_row(conn, job_id)
    assert (
        row is not None
        and row["config"]["max_retries"] == 2
        and isinstance(row["config"]["max_retries"], int)
    )


async def test_the_api_lists_a_sql_enqueued_job_for_its_tenant_only(api, conn):
    client = await api(**STRICT)
    job_id = str(await conn.fetchval("SELECT queueflow.enqueue('acme', 'report', queue => 'reports')"))

    acme = await (await client.get("/api/v1/jobs", headers={"Authorization": "Bearer key1"})).json()
    globex = await (await client.get("/api/v1/jobs", headers={"Authorization": "Bearer key2"})).json()
    theirs = await client.get(f"/api/v1/jobs/{job_id}", headers={"Authorization": "Bearer key2"})

    assert [j["id"] for j in acme["jobs"]] == [job_id]
    assert acme["jobs"][0]["queue_name"] == "reports"
    assert globex["jobs"] == []
    assert theirs.status == 404


# --- idempotency ---------------------------------------------------------------------------------


async def test_a_repeated_idempotency_key_returns_the_existing_job_for_that_tenant(conn):
    sql = "SELECT queueflow.enqueue($1, 'charge', $2, idempotency_key => $3)"
    first = await conn.fetchval(sql, "acme", {"attempt": 1}, "order-42")
    again = await conn.fetchval(sql, "acme", {"attempt": 2}, " order-42 ")
    elsewhere = await conn.fetchval(sql, "globex", {"attempt": 1}, "order-42")

    assert again == first
    assert elsewhere != first
    assert await conn.fetchval("SELECT count(*) FROM queueflow.jobs") == 2
    row = await job_row(conn, first)
    assert row is not None and row["payload"] == {"attempt": 1} and row["idempotency_key"] == "order-42"


async def test_sql_and_the_api_share_one_idempotency_namespace(api, conn):
    client = await api(**STRICT)
    resp = await client.post(
        "/api/v1/jobs",
        json={"task_name": "charge"},
        headers={"Authorization": "Bearer key1", "Idempotency-Key": "pay-1"},
    )
    api_id = (await resp.json())["job_id"]

    sql_id = await conn.fetchval("SELECT queueflow.enqueue('acme', 'charge', idempotency_key => 'pay-1')")

    assert str(sql_id) == api_id


# --- batches -------------------------------------------------------------------------------------


async def test_a_batch_returns_one_id_per_job_in_order(conn):
    rows = await conn.fetch(
        "SELECT * FROM queueflow.enqueue_batch('acme', $1)",
        [
            {"task_name": "a", "payload": {"n": 1}},
            {"task_name": "b", "queue": "q2", "config": {"priority": 3}, "metadata": {"m": True}},
            {"task_name": "c", "run_at": "2031-01-02T03:04:05", "idempotency_key": "k"},
            {"task_name": "d", "idempotency_key": "k"},
        ],
    )
    ids = [r[0] for r in rows]

    assert len(ids) == 4 and ids[3] == ids[2]  # a key repeated inside the batch: the first job wins
    jobs = [await job_row(conn, i) for i in ids[:3]]
    assert [(j["task_name"], j["queue_name"], j["priority"]) for j in jobs] == [
        ("a", "default", 0),
        ("b", "q2", 3),
        ("c", "default", 0),
    ]
    assert jobs[0]["payload"] == {"n": 1} and jobs[1]["metadata"] == {"m": True}
    assert jobs[2]["scheduled_at"] == datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)  # no offset: UTC
    assert await conn.fetchval("SELECT count(*) FROM queueflow.jobs") == 3


async def test_an_invalid_batch_element_fails_the_whole_batch_naming_its_index(conn):
    with pytest.raises(asyncpg.InvalidParameterValueError, match=r"jobs\[1\]: config.max_retries must be"):
        await conn.fetch(
            "SELECT * FROM queueflow.enqueue_batch('acme', $1)",
            [{"task_name": "ok"}, {"task_name": "bad", "config": {"max_retries": -1}}],
        )

    assert await conn.fetchval("SELECT count(*) FROM queueflow.jobs") == 0


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ({"task_name": "x"}, "jobs must be a JSON array"),
        (["x"], r"jobs\[0\]: must be a JSON object"),
        ([{"task_name": "x", "priority": 1}], r"jobs\[0\]: unknown field 'priority'"),
        ([{"task_name": 5}], r"jobs\[0\]: task_name must be a string"),
        ([{"payload": {}}], r"jobs\[0\]: task_name is required"),
        ([{"task_name": "x", "run_at": "next tuesday"}], r"jobs\[0\]: run_at is not an RFC 3339 instant"),
        ([{"task_name": "x", "run_at": 5}], r"jobs\[0\]: run_at must be an RFC 3339 string"),
    ],
)
async def test_malformed_batches_raise_clear_errors(conn, jobs, message):
    with pytest.raises(asyncpg.InvalidParameterValueError, match=message):
        await conn.fetch("SELECT * FROM queueflow.enqueue_batch('acme', $1)", jobs)


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"tenant": None}, "tenant is required"),
        ({"tenant": " "}, "tenant is required"),
        ({"task_name": "  "}, "task_name is required"),
        ({"task_name": None}, "task_name is required"),
        ({"payload": [1, 2]}, "payload must be a JSON object, not array"),
        ({"metadata": "note"}, "metadata must be a JSON object, not string"),
        ({"queue": " "}, "queue must be 1 to 255 characters"),
        ({"queue": "q" * 256}, "queue must be 1 to 255 characters"),
        ({"idempotency_key": "k" * 256}, "idempotency_key is longer than 255 characters"),
        ({"config": [1]}, "config must be a JSON object"),
        ({"config": {"timeout": 5}}, "unknown config field 'timeout'"),
        ({"config": {"max_retries": 1001}}, "config.max_retries must be an integer from 0 to 1000, not 1001"),
        ({"config": {"max_retries": 1.5}}, "config.max_retries must be an integer from 0 to 1000"),
        ({"config": {"max_retries": "3"}}, "config.max_retries must be an integer from 0 to 1000"),
        ({"config": {"timeout_secs": 0}}, "config.timeout_secs must be an integer from 1 to 86400"),
        ({"config": {"timeout_secs": 86401}}, "config.timeout_secs must be an integer from 1 to 86400"),
        (
            {"config": {"retry_delay_secs": -1}},
            "config.retry_delay_secs must be an integer from 0 to 2592000",
        ),
        (
            {"config": {"retry_max_delay_secs": 2592001}},
            "config.retry_max_delay_secs must be an integer from 0",
        ),
        ({"config": {"jitter_factor": 1.5}}, "config.jitter_factor must be a number from 0 to 1"),
        (
            {"config": {"priority": 2**31}},
            "config.priority must be an integer from -2147483648 to 2147483647",
        ),
        ({"config": {"retry_backoff": "random"}}, "config.retry_backoff must be"),
    ],
)
async def test_invalid_arguments_raise_a_clear_error_and_insert_nothing(conn, args, message):
    given = {
        "tenant": "acme",
        "task_name": "echo",
        "payload": {},
        "queue": "default",
        "config": None,
        "idempotency_key": None,
        "metadata": {},
        **args,
    }
    with pytest.raises(asyncpg.InvalidParameterValueError, match=message) as raised:
        await conn.fetchval(
            "SELECT queueflow.enqueue($1, $2, $3, $4, $5, idempotency_key => $6, metadata => $7)",
            given["tenant"],
            given["task_name"],
            given["payload"],
            given["queue"],
            given["config"],
            given["idempotency_key"],
            given["metadata"],
        )

    assert str(raised.value).startswith("queueflow.enqueue: ")
    assert await conn.fetchval("SELECT count(*) FROM queueflow.jobs") == 0


async def test_the_bounds_themselves_are_accepted(conn):
    edge = {
        "priority": -(2**31),
        "max_retries": 1000,
        "timeout_secs": 86400,
        "retry_delay_secs": 0,
        "retry_max_delay_secs": 2592000,
        "jitter_factor": 1,
        "retry_backoff": "fixed",
    }
    job_id = await conn.fetchval("SELECT queueflow.enqueue('acme', 'echo', config => $1)", edge)

    row = await job_row(conn, job_id)
    assert row is not None and row["config"] == edge and row["priority"] == -(2**31)


async def test_concurrent_enqueues_with_one_key_yield_one_job(database_url):
    conns = [await asyncpg.connect(database_url) for _ in range(4)]
    try:
        ids = await asyncio.gather(
            *(
                c.fetchval("SELECT queueflow.enqueue('acme', 'echo', idempotency_key => 'race')")
                for c in conns
            )
        )
        assert len(set(ids)) == 1
        assert await conns[0].fetchval("SELECT count(*) FROM queueflow.jobs") == 1
    finally:
        for c in conns:
            await c.close()


# --- the documentation ---------------------------------------------------------------------------


async def test_the_sql_examples_in_docs_enqueue_md_run_as_documented(conn, other):
    blocks = [
        b
        for b in re.findall(r"```sql\n(.*?)```", ENQUEUE_DOC, re.S)
        if b.lstrip().startswith(("BEGIN", "SELECT"))
    ]
    assert len(blocks) == 2
    await conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer text, total numeric)")

    for block in blocks:
        await conn.execute(block)

    rows = await other.fetch("SELECT task_name, queue_name, tenant_id FROM queueflow.jobs ORDER BY task_name")
    assert [tuple(r) for r in rows] == [
        ("notify", "default", "acme"),
        ("resize", "images", "acme"),
        ("resize", "images", "acme"),
        ("send-receipt", "mail", "acme"),
    ]
