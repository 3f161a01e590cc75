"""System routes: durable tenant-scoped stats, whoami, tasks of live in-process workers, and the
public probes."""

from __future__ import annotations

import pytest

import shared
from tests.api.helpers import (
    ACME,
    ACME_RO,
    DEV,
    GLOBEX,
    STRICT,
    WORKER,
    bearer,
    complete_job,
    create_batch,
    create_job,
    expect_error,
    fail_job,
    lease_one,
    list_json,
    make_jwt,
    parse_time,
)
from tests.support.waiting import eventually

STAT_FIELDS = {
    "jobs_created",
    "jobs_completed",
    "jobs_failed",
    "jobs_retried",
    "jobs_dead_lettered",
    "workflows_created",
    "workflows_completed",
    "workflows_failed",
}
BUILTIN_TASKS = ["echo", "fail", "log", "sleep"]


# --- stats -----------------------------------------------------------------------------------------


async def test_stats_of_a_fresh_tenant_are_all_zero(api):
    client = await api()
    body = await list_json(client, "/api/v1/stats")
    assert body == dict.fromkeys(STAT_FIELDS, 0)


async def test_stats_count_the_tenants_jobs_by_outcome(api):
    client = await api()
    done = await create_job(client, config={"queue": "q-s"})
    await complete_job(client, done, await lease_one(client, "q-s", done))
    dead = await create_job(client, config={"queue": "q-s"})
    await fail_job(client, dead, await lease_one(client, "q-s", dead), retryable=False)
    retried = await create_job(client, config={"queue": "q-s", "max_retries": 5})
    await fail_job(client, retried, await lease_one(client, "q-s", retried), retryable=True)
    cancelled = await create_job(client)
    assert (await client.post(f"/api/v1/jobs/{cancelled}/cancel", headers=DEV)).status == 204
    await create_batch(client, [{"task_name": "t"}] * 2)
    body = await list_json(client, "/api/v1/stats")
    assert body == {
        "jobs_created": 6,
        "jobs_completed": 1,
        "jobs_failed": 1,
        "jobs_retried": 1,
        "jobs_dead_lettered": 1,
        "workflows_created": 0,
        "workflows_completed": 0,
        "workflows_failed": 0,
    }


async def test_stats_are_scoped_to_the_callers_tenant(api):
    client = await api(**STRICT)
    await create_batch(client, [{"task_name": "t"}] * 3, ACME)
    job_id = await create_job(client, GLOBEX, config={"queue": "q-g"})
    await fail_job(client, job_id, await lease_one(client, "q-g", job_id, WORKER), headers=WORKER)
    acme = await list_json(client, "/api/v1/stats", ACME)
    globex = await list_json(client, "/api/v1/stats", GLOBEX)
    assert (acme["jobs_created"], acme["jobs_failed"], acme["jobs_dead_lettered"]) == (3, 0, 0)
    assert (globex["jobs_created"], globex["jobs_failed"], globex["jobs_dead_lettered"]) == (1, 1, 1)
    assert (await list_json(client, "/api/v1/stats", bearer(make_jwt("nobody"))))["jobs_created"] == 0


async def test_stats_are_durable_across_processes(api):
    first = await api()
    await create_batch(first, [{"task_name": "t"}] * 4)
    before = await list_json(first, "/api/v1/stats")
    second = await api()  # another process on the same database
    assert await list_json(second, "/api/v1/stats") == before
    assert before["jobs_created"] == 4


async def test_stats_readable_with_a_read_only_credential(api):
    client = await api(**STRICT)
    await create_job(client, ACME)
    assert (await list_json(client, "/api/v1/stats", ACME_RO))["jobs_created"] == 1


# --- whoami ----------------------------------------------------------------------------------------


async def test_whoami_in_dev_mode_is_tenant1_read_write(api):
    client = await api()
    body = await list_json(client, "/api/v1/whoami")
    assert body == {"tenant": "tenant1", "access": "read_write", "role": "admin", "actor": body["actor"]}
    assert body["actor"].startswith("dev:") and "dev" not in body["actor"][4:]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (ACME, {"tenant": "acme", "access": "read_write", "role": "admin"}),
        (GLOBEX, {"tenant": "globex", "access": "read_write", "role": "admin"}),
        (ACME_RO, {"tenant": "acme", "access": "read_only", "role": "viewer"}),
        (bearer(make_jwt("initech")), {"tenant": "initech", "access": "read_write", "role": "admin"}),
        (
            bearer(make_jwt("initech", scope="read")),
            {"tenant": "initech", "access": "read_only", "role": "viewer"},
        ),
    ],
    ids=["key1", "key2", "ro key", "jwt", "read jwt"],
)
async def test_whoami_reports_the_credentials_tenant_and_access(api, headers, expected):
    client = await api(**STRICT)
    body = await list_json(client, "/api/v1/whoami", headers)
    assert {k: body[k] for k in ("tenant", "access", "role")} == expected


async def test_whoami_needs_a_tenant_credential(api):
    client = await api(**STRICT)
    await expect_error(await client.get("/api/v1/whoami"), 401)
    await expect_error(await client.get("/api/v1/whoami", headers=WORKER), 403)


# --- tasks -----------------------------------------------------------------------------------------


async def test_tasks_is_empty_without_in_process_workers(api):
    client = await api()
    assert await list_json(client, "/api/v1/tasks") == {"tasks": []}


async def test_tasks_lists_the_builtin_tasks_sorted_once_workers_run(api):
    client = await api(mode="all")

    async def listed():
        body = await list_json(client, "/api/v1/tasks")
        return body if body["tasks"] else None

    body = await eventually(listed)
    assert body == {"tasks": BUILTIN_TASKS}


async def test_tasks_lists_each_task_once_with_several_worker_processes(api):
    await api(mode="all")
    client = await api(mode="all", queues=("default", "other"))

    async def listed():
        return (await list_json(client, "/api/v1/tasks"))["tasks"] or None

    assert await eventually(listed) == BUILTIN_TASKS


async def test_tasks_are_not_tenant_scoped_but_need_a_credential(api):
    client = await api(mode="all", **STRICT)

    async def listed():
        return (await list_json(client, "/api/v1/tasks", GLOBEX))["tasks"] or None

    assert await eventually(listed) == BUILTIN_TASKS
    assert (await list_json(client, "/api/v1/tasks", ACME_RO))["tasks"] == BUILTIN_TASKS
    await expect_error(await client.get("/api/v1/tasks"), 401)


# --- probes ----------------------------------------------------------------------------------------


async def test_health_is_healthy_with_timestamp_and_version(api):
    client = await api(**STRICT)
    resp = await client.get("/health")
    assert resp.status == 200
    body = await resp.json()
    assert set(body) == {"status", "timestamp", "version"}
    assert body["status"] == "healthy"
    assert body["version"] == shared.__version__
    assert parse_time(body["timestamp"]).tzinfo is not None


async def test_ready_is_ready(api):
    client = await api(**STRICT)
    resp = await client.get("/ready")
    assert resp.status == 200
    assert await resp.json() == {"status": "ready"}


async def test_probes_ignore_credentials(api):
    client = await api(**STRICT)
    for headers in ({}, bearer("garbage"), WORKER, ACME):
        assert (await client.get("/health", headers=headers)).status == 200
        assert (await client.get("/ready", headers=headers)).status == 200


async def test_health_and_ready_answer_in_every_mode(api):
    client = await api(mode="all")
    assert (await list_json(client, "/health", {}))["status"] == "healthy"
    assert await list_json(client, "/ready", {}) == {"status": "ready"}
