"""The audit log (docs/access.md, "The audit log"): one entry per mutating request, with the right
actor, role, outcome and status, none for reads; written in the change's transaction; never a
secret; GET /api/v1/audit's filters, paging and tenant isolation."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from services.api.routes import ROUTES, Route
from shared.domain.access import key_id
from tests.api.helpers import JWT_SECRET, bearer, create_job, expect_error, list_json, make_jwt
from tests.support.api import database_of, janitor_of

KEYS = {
    "dev": False,
    "worker_token": "wtok",
    "api_keys": "k-admin:acme:admin,k-op:acme:operator,k-view:acme:viewer,k-globex:globex",
    "jwt_secret": JWT_SECRET,
    "push_allow_cidrs": ("127.0.0.0/8",),
}
ADMIN = bearer("k-admin")
OPERATOR = bearer("k-op")
VIEWER = bearer("k-view")
GLOBEX = bearer("k-globex")
PATH_VALUES = {"id": "00000000-0000-4000-8000-0000000000aa", "queue": "q-audit", "key": "k-audit"}
AUDITED = [r for r in ROUTES if r.audited]
READS = [r for r in ROUTES if r.role is not None and r.method == "GET"]


def _path(route: Route) -> str:
    path = route.path
    for name, value in PATH_VALUES.items():
        path = path.replace(f"{{{name}}}", value)
    return path


async def _rows(client) -> list[dict[str, Any]]:
    rows = await database_of(client).pool.fetch("SELECT * FROM queueflow.audit_log ORDER BY id")
    return [dict(r) for r in rows]


async def _entries(client, headers=ADMIN, **params) -> list[dict[str, Any]]:
    return (await list_json(client, "/api/v1/audit", headers, **params))["entries"]


def test_every_tenant_write_is_audited():
    writes = {r.operation_id for r in ROUTES if r.role is not None and r.method != "GET"}
    assert writes == {r.operation_id for r in AUDITED}
    assert "createJob" in writes
    assert all(r.method != "GET" and r.role is not None for r in AUDITED)


async def test_concurrent_single_enqueues_each_write_one_entry_naming_their_own_job(api):
    """Single enqueues share a group commit (docs/enqueue.md): each request's entry is written in
    that transaction, naming the job its own request created, whoever else's jobs it carried."""
    client = await api(**KEYS)

    async def enqueue(headers: dict[str, str], n: int) -> tuple[str, str]:
        resp = await client.post("/api/v1/jobs", json={"task_name": f"t{n}"}, headers=headers)
        assert resp.status == 201, await resp.text()
        return (await resp.json())["job_id"], headers["Authorization"]

    made = await asyncio.gather(*(enqueue(OPERATOR if n % 2 else ADMIN, n) for n in range(20)))
    entries = await _rows(client)
    assert len(entries) == 20
    actor = {
        OPERATOR["Authorization"]: f"key:{key_id('k-op')}",
        ADMIN["Authorization"]: f"key:{key_id('k-admin')}",
    }
    assert sorted((e["targets"][0], e["actor"]) for e in entries) == sorted(
        (job_id, actor[auth]) for job_id, auth in made
    )
    assert {(e["action"], e["outcome"], e["status"], len(e["targets"])) for e in entries} == {
        ("createJob", "success", 201, 1)
    }
    # Written with their jobs: each entry's time is its job's (one now() a transaction).
    created = dict(await database_of(client).pool.fetch("SELECT id::text, created_at FROM queueflow.jobs"))
    assert all(e["created_at"] == created[e["targets"][0]] for e in entries)


async def test_an_idempotent_enqueue_again_writes_an_entry_naming_the_original_job(api):
    """A job with an idempotency key may insert nothing (its key was used): its group writes the
    entries in a transaction of its own, and the repeat names the job the key already made."""
    client = await api(**KEYS)
    body = {"task_name": "t", "idempotency_key": "once"}
    first = await (await client.post("/api/v1/jobs", json=body, headers=ADMIN)).json()
    again = await client.post("/api/v1/jobs", json=body, headers=OPERATOR)
    assert (await again.json())["job_id"] == first["job_id"]
    entries = await _rows(client)
    assert [(e["action"], e["targets"], e["role"]) for e in entries] == [
        ("createJob", [first["job_id"]], "admin"),
        ("createJob", [first["job_id"]], "operator"),
    ]
    assert [e["status"] for e in entries] == [201, again.status]


@pytest.mark.parametrize("route", AUDITED, ids=[r.operation_id for r in AUDITED])
async def test_each_mutating_route_writes_one_entry_with_its_actor_role_and_status(api, route):
    client = await api(**KEYS)
    kwargs: dict[str, Any] = {"headers": ADMIN}
    if route.request is not None:
        kwargs["json"] = {}
    resp = await client.request(route.method, _path(route), **kwargs)
    assert resp.status != 403, await resp.text()
    [entry] = await _rows(client)
    assert (entry["tenant_id"], entry["actor"], entry["role"]) == (
        "acme",
        f"key:{key_id('k-admin')}",
        "admin",
    )
    assert (entry["action"], entry["status"]) == (route.operation_id, resp.status)
    assert entry["outcome"] == ("success" if resp.status < 400 else "failed")
    assert entry["request_id"] == resp.headers["X-Request-ID"]
    assert entry["source"] == "127.0.0.1"
    for name, value in PATH_VALUES.items():
        if f"{{{name}}}" in route.path:
            assert value in entry["targets"]


@pytest.mark.parametrize("route", AUDITED, ids=[r.operation_id for r in AUDITED])
async def test_a_refused_mutating_request_is_logged_as_denied(api, route):
    client = await api(**KEYS)
    resp = await client.request(route.method, _path(route), headers=VIEWER, json={})
    await expect_error(resp, 403)
    [entry] = await _rows(client)
    assert (entry["action"], entry["role"], entry["outcome"], entry["status"]) == (
        route.operation_id,
        "viewer",
        "denied",
        403,
    )


async def test_reads_never_write_an_entry_nor_do_requests_without_a_credential(api):
    client = await api(**KEYS)
    for route in READS:
        if route.operation_id == "listAudit":
            continue
        for headers in (ADMIN, VIEWER):
            await client.request(route.method, _path(route), headers=headers)
    for route in AUDITED:
        await client.request(route.method, _path(route), json={})
    assert await _rows(client) == []


async def test_bulk_and_batch_actions_record_their_filter_and_count(api):
    client = await api(**KEYS)
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": [{"task_name": "t"}] * 3}, headers=OPERATOR)
    assert resp.status == 201, await resp.text()
    resp = await client.post("/api/v1/jobs/cancel", json={"queue": "default"}, headers=OPERATOR)
    assert (await resp.json())["cancelled"] == 3
    resp = await client.post("/api/v1/jobs/retry", json={"status": "cancelled"}, headers=OPERATOR)
    assert resp.status == 200, await resp.text()
    batch, cancel, retry = await _rows(client)
    assert (batch["action"], batch["affected"], batch["targets"]) == ("createBatchJobs", 3, [])
    assert (cancel["action"], cancel["affected"], cancel["filter"]["queue"]) == ("cancelJobs", 3, "default")
    assert (retry["action"], retry["affected"], retry["filter"]["statuses"]) == (
        "retryJobs",
        3,
        ["cancelled"],
    )
    assert {e["actor"] for e in (batch, cancel, retry)} == {f"key:{key_id('k-op')}"}
    assert {e["role"] for e in (batch, cancel, retry)} == {"operator"}


async def test_worker_key_and_limit_changes_name_what_they_changed(api):
    client = await api(**KEYS)
    made = await (await client.post("/api/v1/worker-keys", json={"name": "w"}, headers=ADMIN)).json()
    assert (await client.delete(f"/api/v1/worker-keys/{made['id']}", headers=ADMIN)).status == 204
    resp = await client.put("/api/v1/limits/acme-api", json={"concurrency": 2}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    assert (await client.delete("/api/v1/limits/acme-api", headers=ADMIN)).status == 204
    entries = await _entries(client, order_by="created_at ASC")
    assert [(e["action"], e["targets"], e["outcome"]) for e in entries] == [
        ("createWorkerKey", [made["id"]], "success"),
        ("deleteWorkerKey", [made["id"]], "success"),
        ("putLimit", ["acme-api"], "success"),
        ("deleteLimit", ["acme-api"], "success"),
    ]


async def test_a_change_that_fails_leaves_a_failed_entry_and_no_success(api):
    client = await api(**KEYS)
    job_id = await create_job(client, OPERATOR)
    assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=OPERATOR)).status == 204
    await expect_error(await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=OPERATOR), 409)
    assert [(e["action"], e["outcome"], e["status"]) for e in await _rows(client)] == [
        ("createJob", "success", 201),
        ("cancelJob", "success", 204),
        ("cancelJob", "failed", 409),
    ]


async def test_an_entry_and_its_change_commit_together_or_not_at_all(api):
    """A failure after the entry's insert, at commit (a deferred trigger the test plants): the
    limit is not created and no success entry remains; the failure is logged on its own."""
    client = await api(**KEYS)
    pool = database_of(client).pool
    await pool.execute(
        """
        CREATE FUNCTION queueflow.refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.outcome = 'success' THEN RAISE EXCEPTION 'planted failure at commit'; END IF;
            RETURN NULL;
        END $$;
        CREATE CONSTRAINT TRIGGER refuse_audit AFTER INSERT ON queueflow.audit_log
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION queueflow.refuse_audit();
        """
    )
    resp = await client.put("/api/v1/limits/planted", json={"concurrency": 1}, headers=ADMIN)
    assert resp.status == 500, await resp.text()
    assert await pool.fetchval("SELECT count(*) FROM queueflow.limit_policies") == 0
    # A single enqueue's entry rides its group commit: refused at commit, so is the job.
    resp = await client.post("/api/v1/jobs", json={"task_name": "planted"}, headers=ADMIN)
    assert resp.status >= 500, await resp.text()
    assert await pool.fetchval("SELECT count(*) FROM queueflow.jobs") == 0
    assert [(e["action"], e["outcome"], e["status"]) for e in await _rows(client)] == [
        ("putLimit", "failed", 500),
        ("createJob", "failed", resp.status),
    ]
    await pool.execute("DROP TRIGGER refuse_audit ON queueflow.audit_log")
    resp = await client.put("/api/v1/limits/planted", json={"concurrency": 1}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    assert await pool.fetchval("SELECT count(*) FROM queueflow.limit_policies") == 1
    assert [e["outcome"] for e in await _rows(client)] == ["failed", "failed", "success"]


async def test_no_secret_ever_reaches_the_audit_table(api):
    client = await api(**KEYS)
    jwt_token = make_jwt("acme", role="admin")
    planted = ["k-admin", jwt_token, "planted-header-secret-9f3b"]
    made = await (await client.post("/api/v1/worker-keys", json={"name": "w"}, headers=ADMIN)).json()
    planted.append(made["token"])
    endpoint = {
        "name": "hook",
        "url": "http://127.0.0.1:9/hook",
        "queues": ["pushed"],
        "headers": {"X-Api-Key": "planted-header-secret-9f3b"},
    }
    resp = await client.post("/api/v1/push-endpoints", json=endpoint, headers=bearer(jwt_token))
    assert resp.status == 201, await resp.text()
    pushed = await resp.json()
    planted.append(pushed["secret"])
    resp = await client.post(
        f"/api/v1/push-endpoints/{pushed['id']}/rotate-secret", json={"grace_secs": 0}, headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    planted.append((await resp.json())["secret"])
    # a secret in a failed request's body, too
    await client.post("/api/v1/worker-keys", json={"name": "w", "token": "planted-body-9c1d"}, headers=ADMIN)
    planted.append("planted-body-9c1d")
    dump = await database_of(client).pool.fetchval(
        "SELECT string_agg(row_to_json(a)::text, E'\\n') FROM queueflow.audit_log a"
    )
    assert dump.count("\n") == 3  # (the four entries are there)
    for secret in planted:
        assert secret not in dump


async def test_each_tenant_sees_only_its_own_entries(api):
    client = await api(**KEYS)
    await client.post("/api/v1/queues/q-acme/pause", headers=OPERATOR)
    await client.post("/api/v1/queues/q-globex/pause", headers=GLOBEX)
    assert [e["targets"] for e in await _entries(client, ADMIN)] == [["q-acme"]]
    assert [e["targets"] for e in await _entries(client, GLOBEX)] == [["q-globex"]]
    assert await _entries(client, GLOBEX, target="q-acme") == []
    await expect_error(await client.get("/api/v1/audit", headers=OPERATOR), 403)


async def test_the_audit_listing_filters_and_pages_with_a_cursor(api):
    client = await api(**KEYS)
    for queue in ("a", "b", "c"):
        await client.post(f"/api/v1/queues/{queue}/pause", headers=OPERATOR)
    await client.post("/api/v1/queues/a/resume", headers=ADMIN)
    assert [e["action"] for e in await _entries(client, action="resumeQueue")] == ["resumeQueue"]
    assert len(await _entries(client, actor=f"key:{key_id('k-op')}")) == 3
    assert [e["action"] for e in await _entries(client, target="a")] == ["resumeQueue", "pauseQueue"]
    everything = await _entries(client)
    assert len(everything) == 4
    newest = everything[0]["created_at"]
    assert [e["id"] for e in await _entries(client, since=newest)] == [everything[0]["id"]]
    assert len(await _entries(client, until=newest)) == 3
    first = await list_json(client, "/api/v1/audit", ADMIN, limit=3)
    assert first["has_more"] and len(first["entries"]) == 3
    rest = await list_json(client, "/api/v1/audit", ADMIN, limit=3, cursor=first["next_cursor"])
    assert [e["id"] for e in first["entries"] + rest["entries"]] == [e["id"] for e in everything]


@pytest.mark.parametrize(
    ("days", "kept"), [(90.0, ["recent"]), (0.0, ["old", "recent"])], ids=["90 days", "0 keeps all"]
)
async def test_the_janitor_prunes_entries_past_the_audit_retention(api, days, kept):
    client = await api(**KEYS, audit_retention_days=days, retention_hours=1.0)
    pool = database_of(client).pool
    for action, age in (("old", timedelta(days=91)), ("recent", timedelta(days=89))):
        await pool.execute(
            "INSERT INTO queueflow.audit_log (created_at, tenant_id, actor, role, action, outcome, status)"
            " VALUES (now() - $1::interval, 'acme', 'key:x', 'admin', $2, 'success', 200)",
            age,
            action,
        )
    await janitor_of(client).prune_audit_log()
    assert [e["action"] for e in await _rows(client)] == kept
