"""Retention (--retention-hours): the janitor deletes terminal history older than the window, in
bounded rounds, and never what is still live or what a remaining dead letter points to."""

from __future__ import annotations

import asyncio
import uuid

from shared.db.janitor import RETENTION_ROUND
from shared.db.workflows import OUTBOX_ATTEMPTS
from tests.support.api import janitor_of
from tests.support.waiting import eventually

INSERT_JOB = """
INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, created_at, scheduled_at,
                            completed_at, tenant_id)
VALUES ($1, 'default', 'echo', '{}'::jsonb, $2, now() - $3::text::interval, now() + $4::text::interval,
        CASE WHEN $2 IN ('completed', 'failed', 'cancelled') THEN now() - $5::text::interval END, 'tenant1')
"""


async def add_job(
    db, status: str, *, age: str = "3 days", finished: str = "2 hours", scheduled_in: str = "0 seconds"
) -> uuid.UUID:
    job_id = uuid.uuid4()
    await db.execute(INSERT_JOB, job_id, status, age, scheduled_in, finished)
    return job_id


async def add_dead_letter(db, job_id: uuid.UUID, age: str) -> int:
    return int(
        await db.fetchval(
            "INSERT INTO queueflow.dead_letters (job_id, queue_name, task_name, reason, tenant_id, created_at) "
            "VALUES ($1, 'default', 'echo', 'max_attempts_exceeded', 'tenant1', now() - $2::text::interval) RETURNING id",
            job_id,
            age,
        )
    )


async def add_workflow(db, status: str, finished: str | None) -> str:
    wf_id = str(uuid.uuid4())
    await db.execute(
        "INSERT INTO queueflow.workflows (id, name, status, tenant_id, created_at, completed_at) "
        "VALUES ($1, 'wf', $2, 'tenant1', now() - interval '3 days', now() - $3::text::interval)",
        wf_id,
        status,
        finished,
    )
    return wf_id


async def job_ids(db) -> set[uuid.UUID]:
    return {r["id"] for r in await db.fetch("SELECT id FROM queueflow.jobs")}


async def test_retention_deletes_old_terminal_history_and_keeps_everything_else(api, db):
    old_completed = await add_job(db, "completed")
    old_cancelled = await add_job(db, "cancelled")
    old_failed = await add_job(db, "failed")
    old_failed_dl = await add_dead_letter(db, old_failed, "2 hours")
    recent_completed = await add_job(db, "completed", finished="10 minutes")
    far_future_pending = await add_job(db, "pending", scheduled_in="30 days")
    old_running = await add_job(db, "running")
    old_retrying = await add_job(db, "retrying", scheduled_in="1 hour")
    # A failed job whose dead letter is still inside the window: the entry must stay replayable.
    pinned = await add_job(db, "failed")
    pinned_dl = await add_dead_letter(db, pinned, "5 minutes")
    # An old dead letter of a recently finished job: the entry goes, the job stays.
    recent_failed = await add_job(db, "failed", finished="5 minutes")
    stale_dl = await add_dead_letter(db, recent_failed, "2 hours")
    old_wf = await add_workflow(db, "completed", "2 hours")
    old_failed_wf = await add_workflow(db, "partially_failed", "2 hours")
    recent_wf = await add_workflow(db, "completed", "5 minutes")
    running_wf = await add_workflow(db, "running", None)

    await api(mode="janitor", janitor_interval_secs=0.1, retention_hours=1, retention_interval_secs=0.1)

    async def pruned() -> bool:
        return old_completed not in await job_ids(db)

    await eventually(pruned)
    await eventually(lambda: _settled(db))
    assert await job_ids(db) == {
        recent_completed,
        far_future_pending,
        old_running,
        old_retrying,
        pinned,
        recent_failed,
    }
    assert old_cancelled not in await job_ids(db) and old_failed not in await job_ids(db)
    dls = {r["id"] for r in await db.fetch("SELECT id FROM queueflow.dead_letters")}
    assert dls == {pinned_dl}
    assert old_failed_dl not in dls and stale_dl not in dls
    wfs = {r["id"] for r in await db.fetch("SELECT id FROM queueflow.workflows")}
    assert wfs == {recent_wf, running_wf}
    assert old_wf not in wfs and old_failed_wf not in wfs


async def _settled(db) -> bool:
    """No row that retention should delete is left: no job, and no workflow (a later round of the
    same pruning than the jobs', so the jobs' being gone does not say the workflows are)."""
    jobs = await db.fetchval(
        "SELECT count(*) FROM queueflow.jobs j WHERE status IN ('completed', 'failed', 'cancelled') "
        "AND completed_at < now() - interval '1 hour' "
        "AND NOT EXISTS (SELECT 1 FROM queueflow.dead_letters d WHERE d.job_id = j.id)"
    )
    workflows = await db.fetchval(
        "SELECT count(*) FROM queueflow.workflows "
        "WHERE status IN ('completed', 'failed', 'partially_failed', 'cancelled') "
        "AND completed_at < now() - interval '1 hour'"
    )
    return jobs == 0 and workflows == 0


async def test_a_dead_letter_that_survives_retention_can_still_be_replayed(api, db):
    pinned = await add_job(db, "failed")
    dl = await add_dead_letter(db, pinned, "1 minute")
    client = await api()
    janitor = janitor_of(client)

    assert await janitor.prune(1.0) == 0

    resp = await client.post(f"/api/v1/dlq/{dl}/replay", headers={"Authorization": "Bearer dev"})
    assert resp.status == 201


async def test_a_large_backlog_is_deleted_completely_in_bounded_rounds(api, db):
    n = 2 * RETENTION_ROUND + 1234
    await db.execute(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, created_at, completed_at) "
        "SELECT gen_random_uuid(), 'default', 'echo', '{}'::jsonb, 'completed', now() - interval '9 days', "
        "now() - interval '8 days' FROM generate_series(1, $1)",
        n,
    )
    keep = await add_job(db, "completed", finished="1 minute")
    client = await api()

    deleted = await janitor_of(client).prune(24.0)

    assert deleted == n
    assert await job_ids(db) == {keep}


async def test_concurrent_janitors_prune_each_row_once_and_never_fail(api, db):
    n = RETENTION_ROUND + 777
    await db.execute(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, created_at, completed_at) "
        "SELECT gen_random_uuid(), 'default', 'echo', '{}'::jsonb, 'cancelled', now() - interval '9 days', "
        "now() - interval '8 days' FROM generate_series(1, $1)",
        n,
    )
    apps = [await api() for _ in range(3)]

    results = await asyncio.gather(*(janitor_of(c).prune(24.0) for c in apps))

    # Losers of the advisory lock stop at once; the holder always carries on to the end.
    assert sum(results) == n
    assert await job_ids(db) == set()


async def test_retention_removes_old_outbox_rows_the_advancer_set_aside_and_keeps_the_rest(api, db):
    async def outbox_row(attempts: int, age: str) -> int:
        return await db.fetchval(
            "INSERT INTO queueflow.workflow_outbox (workflow_id, kind, attempts, last_error, created_at) "
            f"VALUES ('wf', 'heal', $1, 'boom', now() - interval '{age}') RETURNING id",
            attempts,
        )

    old_abandoned = await outbox_row(OUTBOX_ATTEMPTS, "3 days")
    recent_abandoned = await outbox_row(OUTBOX_ATTEMPTS, "1 minute")
    old_pending = await outbox_row(1, "3 days")  # still to be applied: never retention's
    client = await api()

    assert await janitor_of(client).prune(24.0) == 1

    left = {r["id"] for r in await db.fetch("SELECT id FROM queueflow.workflow_outbox")}
    assert left == {recent_abandoned, old_pending}
    assert old_abandoned not in left
