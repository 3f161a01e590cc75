"""QueueFlow through a real PgBouncer (Debian's, 1.18) in transaction pooling.

The pool goes through the bouncer with `--statement-cache-size 0` (PgBouncer before 1.21 cannot
carry a named prepared statement from one transaction to the next); the LISTEN connection and the
migrations go straight to PostgreSQL (`--listen-database-url`). With the safety poll at 60 s, every
wake-up inside the test's waits comes from NOTIFY. The whole worker protocol, batch enqueue and
acknowledgement, in-process handlers, a workflow and a cron schedule run through it, with no 5xx.
The same run with asyncpg's default statement cache fails, which shows the pooler is really in the
path (and why the setting exists).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.support.metrics import requests_served_with
from tests.support.pgbouncer import Bouncer, pgbouncer
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

AUTH = {"Authorization": "Bearer dev"}
NO_SAFETY_POLL = ["--worker-poll-secs", "60", "--janitor-interval-secs", "0.2"]


@pytest.fixture
def bouncer(database_url: str) -> Any:
    with pgbouncer(database_url, pool_mode="transaction", pool_size=8) as b:
        yield b


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call(http: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> tuple[int, Any]:
    async with http.request(method, url, json=body, headers=AUTH) as resp:
        data = await resp.json() if resp.content_type == "application/json" else None
        return resp.status, data


async def test_everything_works_through_pgbouncer_in_transaction_mode(
    database_url: str, bouncer: Bouncer, service: Any, http: aiohttp.ClientSession
) -> None:
    proc = await service(
        bouncer.url_for(database_url),
        mode="all",
        extra_args=["--listen-database-url", database_url, "--statement-cache-size", "0", *NO_SAFETY_POLL],
    )
    api = f"{proc.base_url}/api/v1"
    loop = asyncio.get_running_loop()

    # A parked long-poll is woken by the enqueue's NOTIFY, through the direct LISTEN connection.
    lease = asyncio.create_task(
        call(http, "POST", f"{api}/queues/remote/lease", {"max_jobs": 1, "wait_secs": 30})
    )
    await asyncio.sleep(1)
    enqueued_at = loop.time()
    status, created = await call(
        http, "POST", f"{api}/jobs", {"task_name": "remote-echo", "config": {"queue": "remote"}}
    )
    assert status == 201, created
    status, leased = await lease
    woken_in = loop.time() - enqueued_at
    assert status == 200 and [j["job"]["id"] for j in leased["jobs"]] == [created["job_id"]], leased
    assert woken_in < 15, f"the long-poll returned after {woken_in:.1f} s: its time-out, not a NOTIFY"
    job_id, token = created["job_id"], leased["jobs"][0]["lease_token"]

    # The per-job protocol: heartbeat, complete, a replay, a stale token.
    assert await call(
        http, "POST", f"{api}/jobs/{job_id}/heartbeat", {"lease_token": token, "extend_secs": 30}
    ) == (
        200,
        {"status": "running"},
    )
    assert (
        await call(http, "POST", f"{api}/jobs/{job_id}/complete", {"lease_token": token, "result": {"ok": 1}})
    )[0] == 204
    assert (
        await call(http, "POST", f"{api}/jobs/{job_id}/complete", {"lease_token": token, "result": {"ok": 1}})
    )[0] == 204
    stale = "00000000-0000-4000-8000-000000000000"
    assert (await call(http, "POST", f"{api}/jobs/{job_id}/complete", {"lease_token": stale}))[0] == 409

    # Batch enqueue, a batch lease, the batch acknowledgement, and a failure with a retry.
    items = [
        {"task_name": "remote-echo", "payload": {"n": n}, "config": {"queue": "remote", "max_retries": 2}}
        for n in range(40)
    ]
    status, batch = await call(http, "POST", f"{api}/jobs/batch", {"jobs": items})
    assert status == 201 and batch["count"] == 40, batch
    status, leased = await call(http, "POST", f"{api}/queues/remote/lease", {"max_jobs": 40, "wait_secs": 5})
    assert status == 200 and len(leased["jobs"]) == 40, leased
    *to_complete, to_fail = leased["jobs"]
    status, answer = await call(
        http,
        "POST",
        f"{api}/jobs/complete",
        {
            "jobs": [
                {"id": j["job"]["id"], "lease_token": j["lease_token"], "result": {}} for j in to_complete
            ]
        },
    )
    assert status == 200 and {r["status"] for r in answer["results"]} == {204}, answer
    status, _ = await call(
        http,
        "POST",
        f"{api}/jobs/{to_fail['job']['id']}/fail",
        {"lease_token": to_fail["lease_token"], "error": "boom"},
    )
    assert status == 204
    status, failed = await call(http, "GET", f"{api}/jobs/{to_fail['job']['id']}")
    assert status == 200 and failed["status"] == "retrying" and failed["retry_count"] == 1, failed

    # In-process handlers, a workflow and a cron schedule, all woken by NOTIFY.
    status, local = await call(
        http,
        "POST",
        f"{api}/jobs/batch",
        {"jobs": [{"task_name": "echo", "payload": {"n": n}} for n in range(100)]},
    )
    assert status == 201
    steps = [
        {"name": "a", "task_name": "echo"},
        {"name": "b", "task_name": "echo", "depends_on": ["a"]},
        {"name": "c", "task_name": "echo", "depends_on": ["a"]},
        {"name": "d", "task_name": "echo", "depends_on": ["b", "c"]},
    ]
    status, workflow = await call(
        http, "POST", f"{api}/workflows", {"name": "through-the-bouncer", "steps": steps}
    )
    assert status == 201, workflow
    status, cron = await call(
        http, "POST", f"{api}/cron", {"name": "tick", "cron_expr": "* * * * * *", "task_name": "echo"}
    )
    assert status == 201, cron

    db = await asyncpg.connect(database_url)
    await db.set_type_codec("jsonb", schema="pg_catalog", encoder=json.dumps, decoder=json.loads)
    try:

        async def all_done() -> bool:
            local_open = await db.fetchval(
                "SELECT count(*) FROM queueflow.jobs WHERE id = ANY($1::uuid[]) AND status <> 'completed'",
                local["job_ids"],
            )
            wf = await db.fetchval(
                "SELECT status FROM queueflow.workflows WHERE id = $1", workflow["workflow_id"]
            )
            fired = await db.fetchval(
                "SELECT count(*) FROM queueflow.jobs WHERE metadata->>'cron_id' = $1 AND status = 'completed'",
                str(cron["cron_id"]),
            )
            assert (local_open, wf, fired >= 2) == (0, "completed", True), (local_open, wf, fired)
            return True

        await eventually(
            all_done, timeout=60, interval=0.2, message="in-process jobs, the workflow and cron run"
        )
        listener = await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = 'queueflow-listener'"
        )
        assert listener == 1  # straight to PostgreSQL: the bouncer would not keep a LISTEN
    finally:
        await db.close()

    status, listed = await call(http, "GET", f"{api}/jobs?limit=5")
    assert status == 200 and len(listed["jobs"]) == 5
    assert await requests_served_with(http, proc, "5") == 0
    assert "request_failed" not in proc.log_text()
    assert "login attempt: db=" in bouncer.log_text()  # the pool really went through the bouncer


async def test_the_default_statement_cache_fails_through_pgbouncer_1_18(
    database_url: str, bouncer: Bouncer, service: Any, http: aiohttp.ClientSession
) -> None:
    """Why --statement-cache-size exists: asyncpg's named prepared statements do not survive the
    pooler handing each transaction to another server connection (before PgBouncer 1.21)."""
    proc = await service(
        bouncer.url_for(database_url), mode="api", extra_args=["--listen-database-url", database_url]
    )
    statuses: list[int] = []
    for _ in range(5):  # concurrent requests, so that transactions move between server connections
        answers = await asyncio.gather(
            *(
                call(
                    http,
                    "POST",
                    f"{proc.base_url}/api/v1/jobs/batch",
                    {"jobs": [{"task_name": "echo", "payload": {"n": n}}]},
                )
                for n in range(16)
            )
        )
        statuses += [status for status, _ in answers]
    assert 500 in statuses, statuses
    assert 'prepared statement \\"__asyncpg_stmt_' in proc.log_text()
