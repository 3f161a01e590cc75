"""QueueFlow through a real PgBouncer (Debian's, 1.18).

Configured as documented: the pool goes through the bouncer in transaction pooling with
`--statement-cache-size 0` (PgBouncer before 1.21 cannot carry a named prepared statement from one
transaction to the next), and the LISTEN connection and the migrations go straight to PostgreSQL
(`--listen-database-url`). With the safety poll at 60 s, every wake-up inside the test's waits comes
from NOTIFY. The whole worker protocol, batch enqueue and acknowledgement, in-process handlers, a
workflow and a cron schedule run through it, with no 5xx.

Given only the bouncer's URL (nothing else set), the process finds the transaction pooler at start
(shared/db/pooler.py), says so in a warning, on /ready and on /metrics, turns its statement cache
off and polls instead of listening: concurrent requests get no 500, a remote worker's long-poll is
woken and its jobs completed, and a workflow finishes. Through session pooling nothing changes.
Through a transaction pooler that carries named statements (PgBouncer 1.21+ with
max_prepared_statements, emulated by tests/support/tracking_pooler.py: no registry the project may
use ships 1.21+) the cache stays on and the same work succeeds. (tests/db/test_pooler.py has the
probe's own cases.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.support.metrics import requests_served_with
from tests.support.pgbouncer import Bouncer, pgbouncer
from tests.support.tracking_pooler import tracking_pooler
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


async def ready(http: aiohttp.ClientSession, proc: Any) -> Any:
    async with http.get(f"{proc.base_url}/ready") as resp:
        assert resp.status == 200
        return await resp.json()


async def gauge(http: aiohttp.ClientSession, proc: Any, name: str) -> float:
    """The value of an unlabelled gauge on the process's /metrics."""
    async with http.get(f"{proc.metrics_url}/metrics") as resp:
        text = await resp.text()
    values = [float(line.split(" ")[1]) for line in text.splitlines() if line.startswith(name + " ")]
    assert len(values) == 1, (name, values)
    return values[0]


async def parked(http: aiohttp.ClientSession, proc: Any) -> bool:
    return await gauge(http, proc, "queueflow_long_poll_waiters") >= 1


def log_events(proc: Any) -> list[dict[str, Any]]:
    """The process's JSON log lines."""
    events = []
    for line in proc.log_text().splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict):
                events.append(event)
    return events


async def test_everything_works_through_pgbouncer_in_transaction_mode(
    database_url: str, bouncer: Bouncer, service: Any, http: aiohttp.ClientSession
) -> None:
    proc = await service(
        bouncer.url_for(database_url),
        mode="all",
        extra_args=["--listen-database-url", database_url, "--statement-cache-size", "0", *NO_SAFETY_POLL],
    )
    api = f"{proc.base_url}/api/v1"
    # Configured as documented: the pooler is reported, and nothing had to be adapted.
    assert await ready(http, proc) == {
        "status": "ready",
        "pooler": {"pooled": ["DATABASE_URL"], "statement_cache_size": 0, "notifications": "listen"},
    }
    found = [e for e in log_events(proc) if e.get("event") == "transaction_pooler_detected"]
    assert [e["level"] for e in found] == ["info"], found

    # A parked long-poll is woken by the enqueue's NOTIFY, through the direct LISTEN connection.
    lease = asyncio.create_task(
        call(http, "POST", f"{api}/queues/remote/lease", {"max_jobs": 1, "wait_secs": 30})
    )
    await eventually(lambda: parked(http, proc), message="the lease call parked")
    status, created = await call(
        http, "POST", f"{api}/jobs", {"task_name": "remote-echo", "config": {"queue": "remote"}}
    )
    assert status == 201, created
    # The wait is shorter than the safety poll: only the NOTIFY can wake it before it ends empty.
    status, leased = await lease
    assert status == 200 and [j["job"]["id"] for j in leased["jobs"]] == [created["job_id"]], leased
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


async def test_a_server_given_only_a_transaction_pooler_url_adapts_and_works(
    database_url: str, bouncer: Bouncer, service: Any, http: aiohttp.ClientSession
) -> None:
    """Nothing set but DATABASE_URL, the bouncer's: the default statement cache would fail here
    (tests/db/test_pooler.py shows it with the driver) and a LISTEN through it hears nothing. The
    safety poll is 60 s, longer than every wait below, so the poller is what wakes them."""
    proc = await service(bouncer.url_for(database_url), mode="all", extra_args=NO_SAFETY_POLL)

    # Found at start, and said: in a warning naming the two settings, on /ready and on /metrics.
    warnings = [e for e in log_events(proc) if e.get("event") == "transaction_pooler_detected"]
    assert [e["level"] for e in warnings] == ["warning"], warnings
    assert "QUEUEFLOW_LISTEN_DATABASE_URL" in warnings[0]["detail"]
    assert "QUEUEFLOW_STATEMENT_CACHE_SIZE=0" in warnings[0]["detail"]
    assert (warnings[0]["statement_cache_size"], warnings[0]["notifications"]) == (0, "poll")
    report = (await ready(http, proc))["pooler"]
    assert (report["pooled"], report["statement_cache_size"], report["notifications"]) == (
        ["DATABASE_URL"],
        0,
        "poll",
    )
    assert report["warning"] == warnings[0]["detail"]
    assert await gauge(http, proc, "queueflow_db_transaction_pooler") == 1
    assert await gauge(http, proc, "queueflow_notifications_polled") == 1
    assert "listener_connected" not in proc.log_text()  # no LISTEN through the bouncer

    await remote_jobs_and_a_workflow_run_by_polling(http, proc)
    assert await requests_served_with(http, proc, "5") == 0
    assert "request_failed" not in proc.log_text()
    assert "does not exist" not in proc.log_text()  # prepared statement "__asyncpg_stmt_..."
    assert "login attempt: db=" in bouncer.log_text()  # the pool really went through the bouncer


async def remote_jobs_and_a_workflow_run_by_polling(http: aiohttp.ClientSession, proc: Any) -> None:
    """A remote worker's long-polls and a two-step workflow, while concurrent requests move
    between the pooler's server connections; the safety poll (60 s) outlasts every wait."""
    api = f"{proc.base_url}/api/v1"
    # A remote worker's parked long-poll is woken (by the poller: no NOTIFY reaches it).
    lease = asyncio.create_task(
        call(http, "POST", f"{api}/queues/remote/lease", {"max_jobs": 1, "wait_secs": 30})
    )
    await eventually(lambda: parked(http, proc), message="the lease call parked")
    status, created = await call(
        http, "POST", f"{api}/jobs", {"task_name": "remote-echo", "config": {"queue": "remote"}}
    )
    assert status == 201, created
    status, leased = await lease
    assert status == 200 and [j["job"]["id"] for j in leased["jobs"]] == [created["job_id"]], leased
    token = leased["jobs"][0]["lease_token"]
    assert (await call(http, "POST", f"{api}/jobs/{created['job_id']}/complete", {"lease_token": token}))[
        0
    ] == 204

    # Concurrent requests, so that transactions move between the bouncer's server connections:
    # with the default statement cache these answered 500 (prepared statement does not exist).
    job_ids: list[str] = []
    for _ in range(5):
        answers = await asyncio.gather(
            *(
                call(
                    http,
                    "POST",
                    f"{api}/jobs/batch",
                    {
                        "jobs": [
                            {"task_name": "remote-echo", "payload": {"n": n}, "config": {"queue": "remote"}}
                        ]
                    },
                )
                for n in range(16)
            )
        )
        assert [status for status, _ in answers] == [201] * 16, answers
        job_ids += [job_id for _, body in answers for job_id in body["job_ids"]]
    # The remote worker leases them all (long-polls again) and completes them in one call.
    taken: list[Any] = []
    while len(taken) < len(job_ids):
        status, leased = await call(
            http, "POST", f"{api}/queues/remote/lease", {"max_jobs": 100, "wait_secs": 30}
        )
        assert status == 200 and leased["jobs"], leased
        taken += leased["jobs"]
    status, answer = await call(
        http,
        "POST",
        f"{api}/jobs/complete",
        {"jobs": [{"id": j["job"]["id"], "lease_token": j["lease_token"], "result": {}} for j in taken]},
    )
    assert status == 200 and {r["status"] for r in answer["results"]} == {204}, answer
    assert sorted(j["job"]["id"] for j in taken) == sorted(job_ids)

    # A workflow of two steps, run by the in-process workers, advanced without notifications.
    steps = [{"name": "a", "task_name": "echo"}, {"name": "b", "task_name": "echo", "depends_on": ["a"]}]
    status, workflow = await call(http, "POST", f"{api}/workflows", {"name": "polled", "steps": steps})
    assert status == 201, workflow

    async def finished() -> bool:
        status, body = await call(http, "GET", f"{api}/workflows/{workflow['workflow_id']}")
        assert status == 200 and body["status"] == "completed", body
        return True

    await eventually(finished, timeout=50, interval=0.2, message="the two-step workflow finished")


async def test_through_session_pooling_nothing_is_adapted_and_notify_wakes_a_long_poll(
    database_url: str, service: Any, http: aiohttp.ClientSession
) -> None:
    """A session pool keeps each connection's server: no pooler to report, the statement cache as
    configured, and the LISTEN connection (through the same bouncer) hears the enqueue."""
    with pgbouncer(database_url, pool_mode="session", pool_size=60) as session_bouncer:
        proc = await service(session_bouncer.url_for(database_url), mode="api", extra_args=NO_SAFETY_POLL)
        api = f"{proc.base_url}/api/v1"
        assert await ready(http, proc) == {"status": "ready"}
        assert await gauge(http, proc, "queueflow_db_transaction_pooler") == 0
        assert await gauge(http, proc, "queueflow_notifications_polled") == 0
        assert "transaction_pooler_detected" not in proc.log_text()
        lease = asyncio.create_task(
            call(http, "POST", f"{api}/queues/remote/lease", {"max_jobs": 1, "wait_secs": 30})
        )
        await eventually(lambda: parked(http, proc), message="the lease call parked")
        status, created = await call(
            http, "POST", f"{api}/jobs", {"task_name": "remote-echo", "config": {"queue": "remote"}}
        )
        assert status == 201, created
        # Shorter than the 60 s safety poll, and no poller: only the NOTIFY can wake it in time.
        status, leased = await lease
        assert status == 200 and [j["job"]["id"] for j in leased["jobs"]] == [created["job_id"]], leased
        assert "login attempt: db=" in session_bouncer.log_text()
        await proc.terminate(grace=15.0)


async def test_a_server_through_a_pooler_that_carries_named_statements_keeps_its_cache(
    database_url: str, service: Any, http: aiohttp.ClientSession
) -> None:
    """PgBouncer 1.21+ with max_prepared_statements, emulated: a transaction pooler all the same
    (no LISTEN through it, so the process polls and warns of that only), and named statements
    carried between its server connections, so the configured cache stays on and works."""
    async with tracking_pooler(database_url, pool_size=12) as pooler:
        proc = await service(pooler.url_for(database_url), mode="all", extra_args=NO_SAFETY_POLL)
        report = (await ready(http, proc))["pooler"]
        assert (report["pooled"], report["statement_cache_size"], report["notifications"]) == (
            ["DATABASE_URL"],
            100,
            "poll",
        )
        assert "QUEUEFLOW_LISTEN_DATABASE_URL" in report["warning"]
        assert "QUEUEFLOW_STATEMENT_CACHE_SIZE" not in report["warning"]
        carried = pooler.carried
        await remote_jobs_and_a_workflow_run_by_polling(http, proc)
        assert pooler.carried > carried  # the pool's named statements moved between server connections
        assert await requests_served_with(http, proc, "5") == 0
        assert "request_failed" not in proc.log_text()
        await proc.terminate(grace=15.0)
