"""The claim statement keeps one generic plan whatever the other queues hold: its queue and batch
size are hidden from the planner, so a large backlog of another queue cannot make a custom plan
(planned again on every call, about 0.7 ms of a claim of 50) look cheaper than the generic one."""

from __future__ import annotations

from shared.db import jobs as jobs_db
from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig, NewJob

BACKLOG = 100_000  # another queue's waiting jobs, in the statistics


async def test_a_claim_beside_another_queues_backlog_keeps_its_generic_plan(db):
    await init_connection(db)
    await db.execute(
        """INSERT INTO queueflow.jobs (id, queue_name, task_name, payload, config)
           SELECT gen_random_uuid(), 'big', 't', '{}', '{}' FROM generate_series(1, $1::int)""",
        BACKLOG,
    )
    await db.execute("ANALYZE queueflow.jobs")
    # Jobs of a queue the statistics have not seen, as a new or quiet queue's are.
    await jobs_db.insert_jobs(
        db, None, [NewJob(task_name="t", queue="q", config=JobConfig()) for _ in range(200)]
    )

    claimed = []
    for _ in range(20):
        claimed += await jobs_db.claim(db, "q", 10, 60)
    assert len(claimed) == 200 and len({lease.job.id for lease in claimed}) == 200
    assert {lease.job.queue_name for lease in claimed} == {"q"}

    plans = await db.fetchrow(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '-- Lease up to%'"
    )
    # PostgreSQL plans the first five calls for their values, then compares: with the queue visible,
    # every call after them was planned again too (20 custom plans, no generic one).
    assert plans["custom_plans"] == 5 and plans["generic_plans"] == 15, dict(plans)
