"""A rate-limited key's wake-up (the janitor's, once the rate has room again) wakes the queue whose
claim used the rate up and the tenant's other queues where a waiting job leads with the key; not a
queue whose waiting jobs are of other keys. Before, the others waited for their next poll."""

from __future__ import annotations

import asyncpg

from shared.db import jobs as jobs_db
from shared.db import limits
from shared.db.pool import init_connection
from shared.domain.jobs import JobConfig, NewJob
from tests.support.waiting import eventually


async def test_a_rate_wake_up_wakes_every_queue_where_a_waiting_job_leads_with_the_key(db, database_url):
    await init_connection(db)  # jsonb as Python objects, like the server's pool
    for queue, keys in (("a", ("r",)), ("b", ("r",)), ("c", ("other",)), ("d", ("r",))):
        await jobs_db.insert_jobs(
            db, None, [NewJob(task_name="t", queue=queue, config=JobConfig(limits=keys))]
        )
    await db.execute("UPDATE queueflow.tenant_queues SET paused = true WHERE queue_name = 'd'")
    # The key's row as a claim on queue a left it two windows ago, having used the rate up: its
    # wake-up is due and its rate has room.
    await db.execute(
        """INSERT INTO queueflow.limit_state
               (tenant_key, key, rate_count, rate_per_secs, rate_start, rate_prev, rate_cur, wake_at, wake_queue)
           VALUES ('', 'r', 1, 60, now() - interval '200 seconds', 0, 1, now() - interval '1 second', 'a')"""
    )
    woken: list[str] = []
    listener = await asyncpg.connect(database_url)
    try:
        await listener.add_listener(
            "queueflow_work", lambda _conn, _pid, _channel, queue: woken.append(queue)
        )
        assert await limits.wake_limited_queues(db) == 2
        await eventually(lambda: len(woken) >= 2)
        await db.execute("SELECT pg_notify('queueflow_work', 'end')")  # (delivered after the wake-ups)
        await eventually(lambda: "end" in woken)
    finally:
        await listener.close()
    assert sorted(woken) == ["a", "b", "end"]  # not c (other keys), not d (paused)
    assert await db.fetchval("SELECT wake_at FROM queueflow.limit_state WHERE key = 'r'") is None
