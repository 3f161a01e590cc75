"""Credentials and tenant isolation: 401 versus 403 on tenant and worker routes, read-only access,
JWT validation, another tenant's resources answering 404, and development mode."""

from __future__ import annotations

import base64
import json

import jwt
import pytest

from tests.api.helpers import (
    ACME,
    ACME_RO,
    DEV,
    GLOBEX,
    STRICT,
    WORKER,
    bearer,
    count,
    create_job,
    expect_error,
    get_job,
    lease_one,
    list_json,
    make_dead_letter,
    make_jwt,
)

MISSING_JOB = "00000000-0000-4000-8000-0000000000aa"

# Tenant routes as (method, path, json body); {job} is replaced by a real job id.
TENANT_READS = [
    ("GET", "/api/v1/jobs", None),
    ("GET", "/api/v1/jobs/{job}", None),
    ("GET", "/api/v1/dlq", None),
    ("GET", "/api/v1/dlq/1", None),
    ("GET", "/api/v1/stats", None),
    ("GET", "/api/v1/tasks", None),
    ("GET", "/api/v1/whoami", None),
]
TENANT_WRITES = [
    ("POST", "/api/v1/jobs", {"task_name": "t"}),
    ("POST", "/api/v1/jobs/batch", {"jobs": [{"task_name": "t"}]}),
    ("POST", "/api/v1/jobs/cancel", {}),
    ("POST", "/api/v1/jobs/{job}/cancel", None),
    ("POST", "/api/v1/dlq/1/replay", None),
    ("POST", "/api/v1/dlq/replay", {}),
]
WORKER_ROUTES = [
    ("POST", "/api/v1/queues/default/lease", {}),
    ("POST", "/api/v1/jobs/{job}/heartbeat", {"lease_token": MISSING_JOB, "extend_secs": 30}),
    ("POST", "/api/v1/jobs/{job}/complete", {"lease_token": MISSING_JOB, "result": {}}),
    ("POST", "/api/v1/jobs/{job}/fail", {"lease_token": MISSING_JOB, "error": "x"}),
]


async def whoami(client, headers) -> dict:
    """whoami's tenant, access and role (its actor is checked in tests/api/test_roles.py)."""
    body = await list_json(client, "/api/v1/whoami", headers)
    return {k: body[k] for k in ("tenant", "access", "role")}


def _ids(routes):
    return [f"{m} {p}" for m, p, _ in routes]


async def _call(client, method, path, body, headers, job_id=MISSING_JOB):
    kwargs = {"headers": headers}
    if body is not None:
        kwargs["json"] = body
    return await client.request(method, path.replace("{job}", job_id), **kwargs)


def _unsigned(claims: dict) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


# --- tenant routes ---------------------------------------------------------------------------------


BAD_TENANT_HEADERS = {
    "missing": {},
    "empty bearer": {"Authorization": "Bearer "},
    "blank bearer": {"Authorization": "Bearer    "},
    "basic scheme": {"Authorization": "Basic a2V5MTp4"},
    "lowercase scheme": {"Authorization": "bearer key1"},
    "no scheme": {"Authorization": "key1"},
    "unknown token": bearer("nope"),
    "dev placeholder": bearer("dev"),
}


@pytest.mark.parametrize("headers", BAD_TENANT_HEADERS.values(), ids=BAD_TENANT_HEADERS.keys())
async def test_tenant_routes_without_a_valid_credential_are_401(api, headers):
    client = await api(**STRICT)
    for method, path, body in TENANT_READS + TENANT_WRITES:
        resp = await _call(client, method, path, body, headers)
        assert await expect_error(resp, 401) == "unauthorized", (method, path)
    assert await count(client, "jobs") == 0


async def test_worker_token_on_tenant_routes_is_403(api):
    client = await api(**STRICT)
    for method, path, body in TENANT_READS + TENANT_WRITES:
        resp = await _call(client, method, path, body, WORKER)
        await expect_error(resp, 403, "access denied")
    assert await count(client, "jobs") == 0


async def test_auth_is_checked_before_the_body_is_validated(api):
    client = await api(**STRICT)
    resp = await client.post("/api/v1/jobs", data=b"{not json", headers={"Content-Type": "application/json"})
    await expect_error(resp, 401)
    resp = await client.post("/api/v1/jobs", data=b"{not json", headers=ACME_RO)
    await expect_error(resp, 403)


async def test_bearer_token_surrounding_whitespace_is_trimmed(api):
    client = await api(**STRICT)
    resp = await client.get("/api/v1/whoami", headers={"Authorization": "Bearer   key1  "})
    assert resp.status == 200
    assert (await resp.json())["tenant"] == "acme"


async def test_api_key_identifies_its_tenant(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    assert (await get_job(client, job_id, ACME))["tenant_id"] == "acme"


# --- read-only credentials -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "token", ["ro1", make_jwt("acme", scope="read")], ids=["ro api key", "scope read jwt"]
)
@pytest.mark.parametrize(("method", "path", "body"), TENANT_WRITES, ids=_ids(TENANT_WRITES))
async def test_read_only_credential_writing_is_403_and_writes_nothing(api, method, path, body, token):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    _, dl_id = await make_dead_letter(client, "q-ro", headers=ACME, worker=WORKER)
    resp = await _call(client, method, path.replace("/1/", f"/{dl_id}/"), body, bearer(token), job_id)
    await expect_error(resp, 403, "access denied")
    assert await count(client, "jobs") == 2
    assert await count(client, "jobs", "status = 'pending'") == 1
    assert await count(client, "dead_letters", "replayed_at IS NULL") == 1


@pytest.mark.parametrize(
    "token", ["ro1", make_jwt("acme", scope="read")], ids=["ro api key", "scope read jwt"]
)
async def test_read_only_credential_reads_its_tenants_data(api, token):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    headers = bearer(token)
    assert (await get_job(client, job_id, headers))["id"] == job_id
    assert [j["id"] for j in (await list_json(client, "/api/v1/jobs", headers))["jobs"]] == [job_id]
    assert (await list_json(client, "/api/v1/stats", headers))["jobs_created"] == 1
    assert await whoami(client, headers) == {"tenant": "acme", "access": "read_only", "role": "viewer"}


# --- JWTs ------------------------------------------------------------------------------------------


async def test_hs256_jwt_sub_is_the_tenant(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    token = make_jwt("acme")
    assert await whoami(client, bearer(token)) == {"tenant": "acme", "access": "read_write", "role": "admin"}
    assert (await get_job(client, job_id, bearer(token)))["tenant_id"] == "acme"
    minted = await create_job(client, bearer(make_jwt("initech")))
    assert (await get_job(client, minted, bearer(make_jwt("initech"))))["tenant_id"] == "initech"


async def test_jwt_with_scope_write_is_read_write(api):
    client = await api(**STRICT)
    body = await whoami(client, bearer(make_jwt("acme", scope="write")))
    assert body == {"tenant": "acme", "access": "read_write", "role": "admin"}


BAD_JWTS = {
    "expired": lambda: make_jwt("acme", exp_in=-3600),
    "wrong secret": lambda: make_jwt("acme", secret="other-" * 12),
    "hs512": lambda: make_jwt("acme", algorithm="HS512"),
    "hs384": lambda: make_jwt("acme", algorithm="HS384"),
    "alg none": lambda: _unsigned({"sub": "acme", "exp": 4102444800}),
    "pyjwt alg none": lambda: jwt.encode({"sub": "acme", "exp": 4102444800}, None, algorithm="none"),
    "no exp": lambda: make_jwt("acme", exp_in=None),
    "no sub": lambda: make_jwt(None),
    "empty sub": lambda: make_jwt(""),
    "garbage": lambda: "a.b.c",
    "tampered": lambda: make_jwt("acme")[:-2] + "xx",
}


@pytest.mark.parametrize("make", BAD_JWTS.values(), ids=BAD_JWTS.keys())
async def test_invalid_jwt_is_401(api, make):
    client = await api(**STRICT)
    resp = await client.get("/api/v1/whoami", headers=bearer(make()))
    assert await expect_error(resp, 401) == "unauthorized"
    resp = await client.post("/api/v1/jobs", json={"task_name": "t"}, headers=bearer(make()))
    await expect_error(resp, 401)
    assert await count(client, "jobs") == 0


async def test_jwt_is_not_accepted_when_no_secret_is_configured(api):
    client = await api(dev=False, worker_token="wtok", api_keys="key1:acme")
    await expect_error(await client.get("/api/v1/whoami", headers=bearer(make_jwt("acme"))), 401)


# --- worker routes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers", [ACME, ACME_RO, bearer(make_jwt("acme"))], ids=["api key", "ro key", "jwt"]
)
async def test_tenant_credential_on_worker_routes_is_403(api, headers):
    client = await api(**STRICT)
    for method, path, body in WORKER_ROUTES:
        await expect_error(await _call(client, method, path, body, headers), 403, "access denied")


@pytest.mark.parametrize(
    "headers",
    [{}, bearer("nope"), {"Authorization": "Bearer "}, {"Authorization": "wtok"}],
    ids=["missing", "unknown", "empty", "no scheme"],
)
async def test_worker_routes_without_a_valid_credential_are_401(api, headers):
    client = await api(**STRICT)
    for method, path, body in WORKER_ROUTES:
        assert await expect_error(await _call(client, method, path, body, headers), 401) == "unauthorized"


async def test_worker_token_leases_every_tenants_jobs(api):
    client = await api(**STRICT)
    a = await create_job(client, ACME, config={"queue": "shared"})
    b = await create_job(client, GLOBEX, config={"queue": "shared"})
    resp = await client.post("/api/v1/queues/shared/lease", json={"max_jobs": 10}, headers=WORKER)
    assert resp.status == 200
    assert sorted(item["job"]["id"] for item in (await resp.json())["jobs"]) == sorted([a, b])


# --- tenant isolation ------------------------------------------------------------------------------


async def test_another_tenants_job_is_404_everywhere(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    expected = f"job not found: {job_id}"
    assert await expect_error(await client.get(f"/api/v1/jobs/{job_id}", headers=GLOBEX), 404) == expected
    assert (
        await expect_error(await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=GLOBEX), 404)
        == expected
    )
    assert (
        await expect_error(await client.get(f"/api/v1/jobs/{job_id}/events", headers=GLOBEX), 404) == expected
    )
    assert (await list_json(client, "/api/v1/jobs", GLOBEX))["jobs"] == []
    assert (await get_job(client, job_id, ACME))["status"] == "pending"


async def test_another_tenants_dead_letter_is_404_and_not_replayed(api):
    client = await api(**STRICT)
    _, dl_id = await make_dead_letter(client, "q-iso", headers=ACME, worker=WORKER)
    await expect_error(await client.get(f"/api/v1/dlq/{dl_id}", headers=GLOBEX), 404)
    await expect_error(await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=GLOBEX), 404)
    assert (await list_json(client, "/api/v1/dlq", GLOBEX))["dead_letters"] == []
    resp = await client.post("/api/v1/dlq/replay", json={}, headers=GLOBEX)
    assert await resp.json() == {"replayed": 0, "results": []}
    assert await count(client, "dead_letters", "replayed_at IS NULL") == 1
    assert await count(client, "jobs") == 1


async def test_foreign_and_missing_jobs_answer_identically(api):
    """No existence oracle: another tenant's id looks exactly like an unknown id."""
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    foreign = await client.get(f"/api/v1/jobs/{job_id}", headers=GLOBEX)
    missing = await client.get(f"/api/v1/jobs/{MISSING_JOB}", headers=GLOBEX)
    assert foreign.status == missing.status == 404
    assert (await foreign.json())["error"].replace(job_id, "ID") == (await missing.json())["error"].replace(
        MISSING_JOB, "ID"
    )


# --- development mode ------------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["dev", "anything-at-all", "wtok"])
async def test_dev_mode_accepts_any_token_as_tenant1(api, token):
    client = await api()
    assert await whoami(client, bearer(token)) == {
        "tenant": "tenant1",
        "access": "read_write",
        "role": "admin",
    }
    job_id = await create_job(client, bearer(token), config={"queue": "q-dev"})
    assert (await get_job(client, job_id, DEV))["tenant_id"] == "tenant1"
    await lease_one(client, "q-dev", job_id, bearer(token))


async def test_dev_mode_still_needs_a_token(api):
    client = await api()
    await expect_error(await client.get("/api/v1/jobs"), 401)
    await expect_error(await client.post("/api/v1/queues/default/lease", json={}), 401)
    await expect_error(await client.get("/api/v1/jobs", headers={"Authorization": "Bearer "}), 401)


async def test_dev_mode_with_real_keys_maps_them_and_refuses_unknown_tokens(api):
    # The contract's decision: --dev's placeholder tenant only while no API key or JWT secret is set.
    # `serve` now refuses --dev beside any credential (tests/e2e/test_startup_refusals.py); an app
    # built with both still enforces the credential.
    client = await api(dev=True, api_keys="key1:acme")
    assert (await list_json(client, "/api/v1/whoami", ACME))["tenant"] == "acme"
    await expect_error(await client.get("/api/v1/whoami", headers=DEV), 401)


async def test_dev_mode_with_a_worker_token_takes_only_it_on_the_worker_routes(api):
    client = await api(dev=True, worker_token="wtok")
    body = {"max_jobs": 1}
    assert (await client.post("/api/v1/queues/q/lease", json=body, headers=WORKER)).status == 200
    await expect_error(await client.post("/api/v1/queues/q/lease", json=body, headers=DEV), 403)


# --- public routes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/health", "/ready", "/openapi.json"])
async def test_public_routes_need_no_credential(api, path):
    client = await api(**STRICT)
    assert (await client.get(path)).status == 200
