"""Roles per tenant (docs/access.md): every route of the table called with every role and with no
credential, the 403 that names the role needed, the roles API keys and JWTs carry, and the table in
/openapi.json."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from services.api.routes import ROUTES, Route
from shared.domain.access import Role, key_id
from tests.api.helpers import JWT_SECRET, bearer, expect_error, list_json, make_jwt

KEYS = {Role.VIEWER: "k-viewer", Role.OPERATOR: "k-operator", Role.ADMIN: "k-admin"}
ROLE_KEYS = {
    "dev": False,
    "worker_token": "wtok",
    "api_keys": "k-viewer:acme:viewer,k-operator:acme:operator,k-admin:acme:admin,k-ro:acme:ro,k-rw:acme",
    "jwt_secret": JWT_SECRET,
}
TENANT_ROUTES = [route for route in ROUTES if route.role is not None]
PATH_VALUES = {"id": "00000000-0000-4000-8000-0000000000aa", "queue": "q-roles", "key": "k-roles"}

# What the issue asks of each action, written out here rather than read from the table: a change to
# the table that moves one of these fails this test.
EXPECTED = {
    # viewer reads
    "listJobs": Role.VIEWER,
    "getJob": Role.VIEWER,
    "listDeadLetters": Role.VIEWER,
    "listWorkerKeys": Role.VIEWER,
    "listLimits": Role.VIEWER,
    "whoAmI": Role.VIEWER,
    # operator also cancels, retries, replays, pauses and resumes
    "cancelJob": Role.OPERATOR,
    "cancelJobs": Role.OPERATOR,
    "retryJob": Role.OPERATOR,
    "retryJobs": Role.OPERATOR,
    "cancelWorkflow": Role.OPERATOR,
    "retryWorkflow": Role.OPERATOR,
    "replayDeadLetter": Role.OPERATOR,
    "replayDeadLetters": Role.OPERATOR,
    "pauseQueue": Role.OPERATOR,
    "resumeQueue": Role.OPERATOR,
    "pauseCron": Role.OPERATOR,
    "resumeCron": Role.OPERATOR,
    # admin also manages worker keys, limits, cron schedules, queue settings and push endpoints
    "createWorkerKey": Role.ADMIN,
    "deleteWorkerKey": Role.ADMIN,
    "putLimit": Role.ADMIN,
    "deleteLimit": Role.ADMIN,
    "createCron": Role.ADMIN,
    "deleteCron": Role.ADMIN,
    "updateQueue": Role.ADMIN,
    "createPushEndpoint": Role.ADMIN,
    "updatePushEndpoint": Role.ADMIN,
    "deletePushEndpoint": Role.ADMIN,
    "rotatePushSecret": Role.ADMIN,
}


def _path(route: Route) -> str:
    path = route.path
    for name, value in PATH_VALUES.items():
        path = path.replace(f"{{{name}}}", value)
    return path


async def _call(client, route: Route, headers: dict[str, str]):
    kwargs: dict = {"headers": headers}
    if route.request is not None:
        kwargs["json"] = {}
    return await client.request(route.method, _path(route), **kwargs)


def test_the_expectation_names_only_routes_of_the_table_and_the_table_agrees_with_it():
    roles = {route.operation_id: route.role for route in TENANT_ROUTES}
    assert set(EXPECTED) <= set(roles)
    assert {op: roles[op] for op in EXPECTED} == EXPECTED


def test_every_tenant_read_needs_only_a_viewer_except_the_audit_log():
    reads = {r.operation_id: r.role for r in TENANT_ROUTES if r.method == "GET"}
    assert {op for op, role in reads.items() if role is not Role.VIEWER} <= {"listAudit"}


def test_every_tenant_write_needs_more_than_a_viewer():
    assert [r.operation_id for r in TENANT_ROUTES if r.method != "GET" and r.role is Role.VIEWER] == []


@pytest.mark.parametrize("route", TENANT_ROUTES, ids=[f"{r.method} {r.path}" for r in TENANT_ROUTES])
async def test_each_route_refuses_exactly_the_roles_below_its_own(api, route):
    client = await api(**ROLE_KEYS)
    await expect_error(await _call(client, route, {}), 401)
    needed = EXPECTED.get(route.operation_id, route.role)
    for role in Role:
        resp = await _call(client, route, bearer(KEYS[role]))
        if not role.allows(needed):
            message = await expect_error(resp, 403)
            assert f"needs the {needed} role" in message and f"role is {role}" in message, message
        else:
            text = await resp.text()
            assert resp.status not in (401, 403) and resp.status < 500, f"{role}: {resp.status} {text}"


@pytest.mark.parametrize(
    ("token", "role"),
    [("k-ro", "viewer"), ("k-rw", "admin"), ("k-operator", "operator"), ("k-viewer", "viewer")],
    ids=["ro suffix", "no suffix", "operator", "viewer"],
)
async def test_whoami_names_the_role_and_the_keys_id_never_the_key(api, token, role):
    client = await api(**ROLE_KEYS)
    body = await list_json(client, "/api/v1/whoami", bearer(token))
    assert body == {
        "tenant": "acme",
        "access": "read_only" if role == "viewer" else "read_write",
        "role": role,
        "actor": f"key:{key_id(token)}",
    }
    assert token not in body["actor"]


async def test_a_jwt_role_claim_sets_the_role_and_its_name_is_shown(api):
    client = await api(**ROLE_KEYS)
    token = make_jwt("acme", role="operator", name="Ada")
    body = await list_json(client, "/api/v1/whoami", bearer(token))
    assert (body["role"], body["actor"], body["name"]) == ("operator", "jwt:acme", "Ada")
    resp = await client.post("/api/v1/worker-keys", json={}, headers=bearer(token))
    assert "needs the admin role" in await expect_error(resp, 403)
    await expect_error(await client.get("/api/v1/whoami", headers=bearer(make_jwt("acme", role="root"))), 401)


async def test_an_operator_cancels_a_job_but_may_not_mint_a_worker_key(api):
    client = await api(**ROLE_KEYS)
    resp = await client.post("/api/v1/jobs", json={"task_name": "t"}, headers=bearer("k-operator"))
    assert resp.status == 201, await resp.text()
    job_id = (await resp.json())["job_id"]
    resp = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=bearer("k-operator"))
    assert resp.status == 204, await resp.text()
    resp = await client.post("/api/v1/worker-keys", json={"name": "w"}, headers=bearer("k-operator"))
    assert await expect_error(resp, 403) == (
        "access denied: this needs the admin role (the credential's role is operator)"
    )
    resp = await client.post("/api/v1/worker-keys", json={"name": "w"}, headers=bearer("k-admin"))
    assert resp.status == 201, await resp.text()


async def test_the_openapi_document_shows_each_tenant_operations_role(api):
    client = await api(**ROLE_KEYS)
    spec = await list_json(client, "/openapi.json", {})
    shown = {
        op["operationId"]: op.get("x-required-role")
        for methods in spec["paths"].values()
        for op in methods.values()
    }
    for route in ROUTES:
        assert shown[route.operation_id] == (route.role.value if route.role else None), route.operation_id
    assert {op: shown[op] for op in EXPECTED} == {op: role.value for op, role in EXPECTED.items()}


def test_docs_access_md_lists_every_tenant_route_with_its_role():
    text = (Path(__file__).parents[2] / "docs" / "access.md").read_text()
    rows = dict(re.findall(r"^\| `[A-Z]+ [^`]+` \| `(\w+)` \| (\w+) \|$", text, re.MULTILINE))
    assert rows == {route.operation_id: route.auth for route in TENANT_ROUTES}
