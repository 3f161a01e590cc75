"""Queues that remove completed jobs (migration 37), at the statements: what the completing
statement deletes and what it keeps, for which tenant, with which dependent rows, and under
concurrent readers and log appends."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest

from shared.db import janitor, queues, visibility
from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.db.queries import Q
from shared.domain.errors import NotFound
from shared.domain.jobs import JobConfig, NewJob, Retention, UniquePolicy
from shared.domain.visibility import NewLogLine
from tests.support.waiting import eventually

TENANT = "acme"


async def connect(database_url: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)  # jsonb as Python objects, like the server's pool
    return conn


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await connect(database_url)
    try:
        yield conn
    finally:
        await conn.close()


async def enqueue(db: asyncpg.Connection, queue: str, tenant: str = TENANT, **fields: object) -> uuid.UUID:
    [job_id] = await jobs_db.insert_jobs(db, tenant, [NewJob(task_name="t", queue=queue, **fields)])
    return job_id


async def claim(db: asyncpg.Connection, queue: str, tenant: str = TENANT) -> dict[uuid.UUID, uuid.UUID]:
    """Every due job of the queue, leased: job id -> lease token."""
    leases = await jobs_db.claim(db, queue, 100, 60, tenant=tenant)
    return {lease.job.id: lease.token for lease in leases}


async def complete(db: asyncpg.Connection, leases: dict[uuid.UUID, uuid.UUID]) -> list[object]:
    return await jobs_db.complete_many(
        db, [(job, token, {"done": str(job)}) for job, token in leases.items()]
    )


async def waiting_on_a_lock(db: asyncpg.Connection, session: asyncpg.Connection) -> bool:
    """Whether `session` is waiting for a lock (`db`, another connection, asks)."""
    return bool(
        await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid = $1",
            session.get_server_pid(),
        )
    )


async def remaining(db: asyncpg.Connection, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    rows = await db.fetch("SELECT id, status FROM queueflow.jobs WHERE id = ANY($1::uuid[])", list(ids))
    return {r["id"]: r["status"] for r in rows}


async def removes(db: asyncpg.Connection, queue: str, tenant: str = TENANT) -> None:
    await queues.set_retention(db, tenant, queue, Retention.REMOVE_COMPLETED)


async def test_a_completed_job_of_a_removing_queue_is_deleted_by_the_statement_that_completes_it(db):
    await removes(db, "fast")
    ids = [await enqueue(db, "fast") for _ in range(3)]
    leases = await claim(db, "fast")
    assert await complete(db, leases) == [None, None, None]
    assert await remaining(db, ids) == {}
    assert await db.fetchval("SELECT count(*) FROM queueflow.job_removals") == 0


async def test_a_queue_keeps_its_completed_jobs_unless_told_otherwise(db):
    ids = [await enqueue(db, "plain") for _ in range(2)]
    assert await complete(db, await claim(db, "plain")) == [None, None]
    assert await remaining(db, ids) == dict.fromkeys(ids, "completed")


async def test_removal_is_the_tenants_own_choice_and_the_fleet_default_fills_in_for_the_others(db):
    await queues.record_retention_defaults(db, {"shared": Retention.REMOVE_COMPLETED})
    await queues.set_retention(db, "keeper", "shared", Retention.KEEP)
    await removes(db, "mine", tenant="remover")
    ids = {
        ("remover", "shared"): await enqueue(db, "shared", tenant="remover"),
        ("keeper", "shared"): await enqueue(db, "shared", tenant="keeper"),
        ("remover", "mine"): await enqueue(db, "mine", tenant="remover"),
        ("keeper", "mine"): await enqueue(db, "mine", tenant="keeper"),
    }
    for tenant, queue in ids:
        await complete(db, await claim(db, queue, tenant))
    left = await remaining(db, list(ids.values()))
    assert {key for key, job in ids.items() if job in left} == {("keeper", "shared"), ("keeper", "mine")}

    await queues.record_retention_defaults(db, {})  # the flag dropped at the next start
    again = await enqueue(db, "shared", tenant="remover")
    await complete(db, await claim(db, "shared", "remover"))
    assert await remaining(db, [again]) == {again: "completed"}


@pytest.mark.parametrize("own", [None, Retention.KEEP, Retention.REMOVE_COMPLETED])
@pytest.mark.parametrize("fleet", [None, Retention.KEEP, Retention.REMOVE_COMPLETED])
async def test_the_completing_statement_and_removes_completed_agree(db, own, fleet):
    await queues.record_retention_defaults(db, {} if fleet is None else {"q": fleet})
    if own is not None:
        await queues.set_retention(db, TENANT, "q", own)
    job = await enqueue(db, "q")
    said = await db.fetchval("SELECT queueflow.removes_completed('q', $1)", TENANT)
    await complete(db, await claim(db, "q"))
    assert (job not in await remaining(db, [job])) is said
    assert said is (
        own is Retention.REMOVE_COMPLETED or (own is None and fleet is Retention.REMOVE_COMPLETED)
    )


async def test_jobs_whose_row_keeps_a_promise_are_completed_in_place_on_a_removing_queue(db):
    await removes(db, "fast")
    keyed = await enqueue(db, "fast", idempotency_key="order-42")
    unique = await enqueue(
        db, "fast", config=JobConfig.of({"unique": UniquePolicy(key="charge:42", window_secs=3600)})
    )
    cron = await enqueue(
        db, "fast", idempotency_key="cron:c1:1700000000", metadata={"cron_id": "c1", "cron_name": "n"}
    )
    plain = await enqueue(db, "fast")
    await complete(db, await claim(db, "fast"))
    assert await remaining(db, [keyed, unique, cron, plain]) == {keyed: "completed", unique: "completed"}
    assert await db.fetchval("SELECT count(*) FROM queueflow.job_removals") == 0
    # The key still answers with its job: a retried create makes no second one.
    assert await jobs_db.insert_jobs(
        db, TENANT, [NewJob(task_name="t", queue="fast", idempotency_key="order-42")]
    ) == [keyed]


async def test_a_job_its_creator_may_read_back_is_completed_in_place_and_removed_after_the_grace(db):
    await removes(db, "fast")
    created = await enqueue(db, "fast", lingers=True)
    await complete(db, await claim(db, "fast"))
    assert await remaining(db, [created]) == {created: "completed"}
    assert await db.fetchval("SELECT job_id FROM queueflow.job_removals") == created
    assert await janitor.remove_lingering(db, 3600, 100) == 0  # within its grace
    assert await janitor.remove_lingering(db, 0, 100) == 1
    assert await remaining(db, [created]) == {}
    assert await db.fetchval("SELECT count(*) FROM queueflow.job_removals") == 0


async def test_reading_an_unfinished_job_of_a_removing_queue_keeps_its_outcome_for_the_reader(db):
    await removes(db, "fast")
    read, unread = await enqueue(db, "fast"), await enqueue(db, "fast")
    leases = await claim(db, "fast")
    assert (await jobs_db.get_job_watched(db, TENANT, read)).status == "running"
    await complete(db, leases)
    assert await remaining(db, [read, unread]) == {read: "completed"}
    done = await jobs_db.get_job_watched(db, TENANT, read)
    assert (done.status, done.result) == ("completed", {"done": str(read)})


async def test_reading_a_job_of_a_keeping_queue_changes_nothing(db):
    job = await enqueue(db, "plain")
    await jobs_db.get_job_watched(db, TENANT, job)
    assert await db.fetchval("SELECT lingers FROM queueflow.jobs WHERE id = $1", job) is False


async def test_a_reader_that_comes_while_the_completion_runs_still_gets_the_outcome(db, database_url):
    await removes(db, "fast")
    job = await enqueue(db, "fast")
    leases = await claim(db, "fast")
    reader = await connect(database_url)
    completer = await connect(database_url)
    try:
        tx = reader.transaction()
        await tx.start()
        await reader.execute("UPDATE queueflow.jobs SET lingers = true WHERE id = $1", job)  # holds the row
        completion = asyncio.create_task(complete(completer, leases))

        await eventually(lambda: waiting_on_a_lock(db, completer))
        await tx.commit()
        assert await completion == [None]
    finally:
        await reader.close()
        await completer.close()
    assert await remaining(db, [job]) == {job: "completed"}
    assert await db.fetchval("SELECT job_id FROM queueflow.job_removals") == job


async def test_a_removed_job_takes_its_attempts_and_log_lines_with_it(db):
    await removes(db, "fast")
    job = await enqueue(db, "fast", config=JobConfig.of({"max_retries": 3, "retry_delay_secs": 0}))
    [(_, first)] = (await claim(db, "fast")).items()
    await visibility.append_logs(db, job, first, [NewLogLine(message="try 1")], 10_000)
    assert await jobs_db.fail(db, job, first, "flaky", retryable=True) == "retrying"
    [(_, second)] = (await claim(db, "fast")).items()
    await visibility.append_logs(db, job, second, [NewLogLine(message="try 2")], 10_000)
    counts = "SELECT count(*) FROM queueflow.{0}"
    assert [await db.fetchval(counts.format(t)) for t in ("job_attempts", "job_log_state", "job_logs")] == [
        1,
        1,
        2,
    ]
    await complete(db, {job: second})
    assert await remaining(db, [job]) == {}
    assert [await db.fetchval(counts.format(t)) for t in ("job_attempts", "job_log_state", "job_logs")] == [
        0,
        0,
        0,
    ]


async def test_retention_still_deletes_a_job_with_its_attempts_and_lines(db):
    job = await enqueue(db, "plain", config=JobConfig.of({"max_retries": 0}))
    [(_, token)] = (await claim(db, "plain")).items()
    await visibility.append_logs(db, job, token, [NewLogLine(message="boom")], 10_000)
    await jobs_db.fail(db, job, token, "boom", retryable=False)
    await db.execute("DELETE FROM queueflow.dead_letters")  # its dead letter went first
    await db.execute("UPDATE queueflow.jobs SET completed_at = now() - interval '2 hours'")
    cutoff = await db.fetchval("SELECT now() - interval '1 hour'")
    assert await db.fetchval(Q.prune_jobs, cutoff, 100) == 1
    for table in ("jobs", "job_attempts", "job_log_state", "job_logs"):
        assert await db.fetchval(f"SELECT count(*) FROM queueflow.{table}") == 0, table


async def test_a_log_append_and_a_removal_at_once_leave_no_line_of_a_removed_job(db, database_url):
    await removes(db, "fast")
    appender = await connect(database_url)
    try:
        # The append first: the removal waits for it, then deletes its lines too.
        job = await enqueue(db, "fast")
        [(_, token)] = (await claim(db, "fast")).items()
        tx = appender.transaction()
        await tx.start()
        await visibility.append_logs(appender, job, token, [NewLogLine(message="late")], 10_000)
        completion = asyncio.create_task(complete(db, {job: token}))
        await eventually(lambda: waiting_on_a_lock(appender, db))
        await tx.commit()
        await completion
        assert await remaining(db, [job]) == {}
        # The removal first: the append waits for it, then finds no job (and writes nothing).
        job = await enqueue(db, "fast")
        [(_, token)] = (await claim(db, "fast")).items()
        tx = db.transaction()
        await tx.start()
        await jobs_db.complete_many(db, [(job, token, {})])
        appending = asyncio.create_task(
            visibility.append_logs(appender, job, token, [NewLogLine(message="later")], 10_000)
        )
        watcher = await connect(database_url)
        try:
            await eventually(lambda: waiting_on_a_lock(watcher, appender))
        finally:
            await watcher.close()
        await tx.commit()
        with pytest.raises(NotFound):  # the job is gone by then
            await appending
    finally:
        await appender.close()
    for table in ("job_log_state", "job_logs"):
        assert await db.fetchval(f"SELECT count(*) FROM queueflow.{table}") == 0, table


async def test_a_removed_step_job_leaves_its_outcome_in_the_workflow_outbox(db):
    await removes(db, "steps")
    await db.execute("INSERT INTO queueflow.workflows (id, name) VALUES ('wf1', 'w')")
    plain = await enqueue(db, "steps", workflow_id="wf1", workflow_step="a", step_attempt=1)
    child = await enqueue(db, "steps", workflow_id="wf1", workflow_step="b", step_index=0, step_attempt=1)
    await complete(db, await claim(db, "steps"))
    assert await remaining(db, [plain, child]) == {child: "completed"}
    rows = await db.fetch(
        "SELECT step_name, job_id, step_index, step_attempt, outcome, result, error_message"
        " FROM queueflow.workflow_outbox ORDER BY step_name"
    )
    assert [dict(r) for r in rows] == [
        {
            "step_name": "a",
            "job_id": plain,
            "step_index": None,
            "step_attempt": 1,
            "outcome": "completed",
            "result": {"done": str(plain)},
            "error_message": None,
        },
        {
            "step_name": "b",
            "job_id": child,
            "step_index": 0,
            "step_attempt": 1,
            "outcome": "completed",
            "result": {"done": str(child)},
            "error_message": None,
        },
    ]


async def test_a_completion_that_writes_no_outbox_row_wakes_no_advancer(db, database_url):
    await removes(db, "fast")
    heard: list[str] = []
    listener = await connect(database_url)
    try:
        await listener.add_listener("queueflow_workflow", lambda *args: heard.append(args[3]))
        await enqueue(db, "fast")
        await enqueue(db, "plain")
        await complete(db, await claim(db, "fast"))
        await complete(db, await claim(db, "plain"))
        await db.execute("INSERT INTO queueflow.workflows (id, name) VALUES ('wf1', 'w')")
        await enqueue(db, "fast", workflow_id="wf1", workflow_step="a", step_attempt=1)
        await complete(db, await claim(db, "fast"))
        await eventually(lambda: heard)
        await listener.execute("SELECT 1")  # anything sent before this is delivered by now
    finally:
        await listener.close()
    assert heard == [""]


async def test_a_removed_job_of_a_limit_key_gives_its_slot_back(db):
    await removes(db, "fast")
    await db.execute(
        "INSERT INTO queueflow.limit_policies (tenant_key, key, concurrency) VALUES ($1, 'api', 1)", TENANT
    )
    first = await enqueue(db, "fast", config=JobConfig.of({"limits": ["api"]}))
    second = await enqueue(db, "fast", config=JobConfig.of({"limits": ["api"]}))
    leases = await claim(db, "fast")
    assert list(leases) == [first]  # one slot
    await complete(db, leases)
    assert await remaining(db, [first]) == {}
    assert list(await claim(db, "fast")) == [second]
