"""Large batches without idempotency or unique keys go in by COPY (shared/db/jobs.py): the rows,
the defaults, the limit keys' state, the tenant's queue and the wake-up are those the insert
statement gives."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig, NewJob
from shared.domain.traces import TraceContext

N = jobs_db.COPY_MIN_JOBS + 10
# Every column a job's insert writes or defaults, beside its id (compared as its place in the batch).
COLUMNS = """queue_name, task_name, payload, config::text AS config, status, retry_count, delivery_count,
    priority, metadata, tenant_id, idempotency_key, workflow_id, workflow_step_id, step_index,
    step_attempt, limit_keys, traceparent, tracestate, scheduled_at = created_at AS due_at_creation,
    scheduled_at, lease_token, locked_until, started_at, completed_at, result, error_message"""


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    await init_connection(connection)  # jsonb as Python objects, like the server's pool
    try:
        yield connection
    finally:
        await connection.close()


def _plain_batch(queue: str, run_at: datetime | None) -> list[NewJob]:
    """What the copy writes in its short form: payloads and configs only."""
    return [
        NewJob(
            task_name=f"t{n % 3}",
            queue=queue,
            config=JobConfig.of({"max_retries": n % 5, "timeout_secs": 10 + n}),
            payload={"n": n} if n % 3 else {},
            run_at=run_at,
        )
        for n in range(N)
    ]


# Limit keys as every job may give them: one to four, multi-byte UTF-8, a key of the longest size.
_KEYS = ([], ["c:{n}", "all"], [], ["ключ:{n}", "all", "ü" * 64, "z"])


def _limited_batch(queue: str, run_at: datetime | None) -> list[NewJob]:
    """One of the optional columns set (the copy writes it and leaves the others to their defaults);
    its text[] goes in as the db layer's own binary encoding (pool.text_array)."""
    return [
        NewJob(
            task_name="t",
            queue=queue,
            config=JobConfig.of({"limits": [k.format(n=n % 7) for k in _KEYS[n % 4]]}),
            payload={"n": n},
            run_at=run_at,
        )
        for n in range(N)
    ]


def _batch(queue: str, run_at: datetime | None) -> list[NewJob]:
    trace = TraceContext(traceparent="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", tracestate="k=v")
    return [
        NewJob(
            task_name=f"t{n % 3}",
            queue=queue,
            config=JobConfig.of(
                {"priority": n % 4, "max_retries": n % 5, "limits": [f"c:{n % 7}"] if n % 2 else []}
            ),
            payload={"n": n, "nested": {"list": [n, None, "x"]}} if n % 3 else {},
            metadata={"m": str(n)} if n % 4 else {},
            run_at=run_at,
            workflow_id=f"wf{n}" if n % 5 == 0 else None,
            workflow_step=f"s{n}" if n % 5 == 0 else None,
            step_index=n if n % 5 == 0 else None,
            step_attempt=1 if n % 5 == 0 else None,
            trace=trace if n % 6 == 0 else None,
        )
        for n in range(N)
    ]


class _Recording:
    """The connection, with the way each insert went recorded (a COPY through the db layer's
    copy_rows, which the repository module calls by name)."""

    def __init__(self, conn: asyncpg.Connection, monkeypatch: pytest.MonkeyPatch) -> None:
        self.conn, self.ways = conn, []
        copy_rows = jobs_db.copy_rows

        async def recorded(db: object, *args: Any, **kwargs: Any) -> str:
            assert db is self
            self.ways.append("copy")
            return await copy_rows(conn, *args, **kwargs)

        monkeypatch.setattr(jobs_db, "copy_rows", recorded)

    async def fetch(self, query: str, *args: object) -> list[asyncpg.Record]:
        self.ways.append("statement")
        return await self.conn.fetch(query, *args)


async def _rows(conn: asyncpg.Connection, ids: list[uuid.UUID]) -> list[dict]:
    rows = {
        r["id"]: r
        for r in await conn.fetch(f"SELECT id, {COLUMNS} FROM queueflow.jobs WHERE id = ANY ($1)", ids)
    }
    return [{k: v for k, v in rows[i].items() if k != "id"} for i in ids]


@pytest.mark.parametrize(
    "shape", [_batch, _limited_batch, _plain_batch], ids=["every-column", "one-column", "plain"]
)
@pytest.mark.parametrize("run_at", [None, datetime.now(UTC) + timedelta(hours=1)], ids=["due", "delayed"])
async def test_a_copied_batch_writes_the_rows_the_insert_statement_writes(
    conn, monkeypatch, run_at, shape
) -> None:
    db = _Recording(conn, monkeypatch)
    copied = await jobs_db.insert_jobs(db, "acme", shape("copied", run_at))
    monkeypatch.setattr(jobs_db, "COPY_MIN_JOBS", 10**6)
    inserted = await jobs_db.insert_jobs(db, "acme", shape("inserted", run_at))
    assert db.ways == ["copy", "statement"]

    copied_rows, inserted_rows = await _rows(conn, copied), await _rows(conn, inserted)
    for row in copied_rows + inserted_rows:
        row.pop("queue_name")
        if run_at is None:
            row.pop("scheduled_at")  # each statement's now(), as due_at_creation says
    for n, (copied_row, inserted_row) in enumerate(zip(copied_rows, inserted_rows, strict=True)):
        assert copied_row == inserted_row, (n, {k: (v, inserted_row[k]) for k, v in copied_row.items()})
    assert all(r["due_at_creation"] == (run_at is None) for r in copied_rows)
    # the statement trigger ran for the copy: the tenant's queue (its limit keys' state rows are
    # made by the first claim that meets them, migration 30)
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM queueflow.tenant_queues WHERE tenant_key = 'acme' AND queue_name = 'copied'"
        )
        == 1
    )


async def test_a_batch_with_idempotency_keys_or_mixed_run_ats_takes_the_statement(conn, monkeypatch) -> None:
    db = _Recording(conn, monkeypatch)
    keyed = [NewJob(task_name="t", queue="q", idempotency_key=f"k{n % (N - 1)}") for n in range(N)]
    ids = await jobs_db.insert_jobs(db, None, keyed)
    assert ids[0] == ids[N - 1] and len(set(ids)) == N - 1  # the repeated key answers the original
    later = datetime.now(UTC) + timedelta(hours=1)
    mixed = [NewJob(task_name="t", queue="q", run_at=later if n % 2 else None) for n in range(N)]
    assert len(set(await jobs_db.insert_jobs(db, None, mixed))) == N
    assert "copy" not in db.ways
    assert await conn.fetchval("SELECT count(*) FROM queueflow.jobs") == 2 * N - 1
