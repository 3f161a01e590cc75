"""Tenant JWTs: the `scope` claim as a set of the two scopes the server knows (shared/domain/scopes.py),
`aud` and `iss` when --jwt-audience and --jwt-issuer are set, and the same over a real `serve`
process, whose start-up also refuses a short secret unless --allow-weak-jwt-secret."""

from __future__ import annotations

import json
import warnings

import aiohttp
import jwt
import pytest

from tests.api.helpers import (
    ACME,
    STRICT,
    bearer,
    count,
    create_job,
    expect_error,
    list_json,
    make_jwt,
)

READ_WRITE = {"tenant": "acme", "access": "read_write"}
READ_ONLY = {"tenant": "acme", "access": "read_only"}

# scope claim -> the access it grants
GRANTED = {
    "no scope claim": (None, READ_WRITE),
    "read": ("read", READ_ONLY),
    "read as a list": (["read"], READ_ONLY),
    "read, spaced": ("  read ", READ_ONLY),
    "read twice": ("read read", READ_ONLY),
    "write": ("write", READ_WRITE),
    "write as a list": (["write"], READ_WRITE),
    "read and write": ("read write", READ_WRITE),
    "write and read as a list": (["write", "read"], READ_WRITE),
}

# scope claims that are refused (401), never granted write
REFUSED = {
    "read:jobs": "read:jobs",
    "read:jobs as a list": ["read:jobs"],
    "an unknown scope": "admin",
    "read beside an unknown scope": "read openid",
    "write beside an unknown scope": ["write", "jobs:write"],
    "upper case": "READ",
    "empty string": "",
    "empty list": [],
    "a number": 42,
    "an object": {"read": True},
    "a list with a number": ["read", 1],
    "null": None,
}


def _token(scope: object, **claims: object) -> dict[str, str]:
    body = dict(claims) if scope is None else {"scope": scope, **claims}
    return bearer(make_jwt("acme", **body))


@pytest.mark.parametrize(("scope", "access"), GRANTED.values(), ids=GRANTED.keys())
async def test_a_jwt_scope_grants_read_only_or_read_write(api, scope, access):
    client = await api(**STRICT)
    assert upstream_fields(await list_json(client, "/api/v1/whoami", _token(scope))) == access
    resp = await client.post("/api/v1/jobs", json={"task_name": "t"}, headers=_token(scope))
    if access == READ_ONLY:
        await expect_error(resp, 403, "access denied")
        assert await count(client, "jobs") == 0
    else:
        assert resp.status == 201, await resp.text()


@pytest.mark.parametrize("scope", REFUSED.values(), ids=REFUSED.keys())
async def test_a_jwt_scope_the_server_does_not_know_is_401(api, scope):
    client = await api(**STRICT)
    headers = bearer(make_jwt("acme", scope=scope))
    assert await expect_error(await client.get("/api/v1/whoami", headers=headers), 401) == "unauthorized"
    await expect_error(await client.post("/api/v1/jobs", json={"task_name": "t"}, headers=headers), 401)
    await expect_error(await client.post("/api/v1/queues/q/lease", json={}, headers=headers), 401)
    assert await count(client, "jobs") == 0


async def test_a_read_only_jwt_cannot_cancel_its_tenants_job(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME)
    resp = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=_token(["read"]))
    await expect_error(resp, 403, "access denied")
    assert await count(client, "jobs", "status = 'pending'") == 1


# --- aud and iss ---------------------------------------------------------------------------------

AUDIENCES = {
    "the audience": ("queueflow", 200),
    "a list naming it": (["billing", "queueflow"], 200),
    "another audience": ("billing", 401),
    "no aud claim": (None, 401),
}


@pytest.mark.parametrize(("aud", "status"), AUDIENCES.values(), ids=AUDIENCES.keys())
async def test_with_jwt_audience_set_the_aud_claim_must_name_it(api, aud, status):
    client = await api(**STRICT, jwt_audience="queueflow")
    claims = {} if aud is None else {"aud": aud}
    resp = await client.get("/api/v1/whoami", headers=bearer(make_jwt("acme", **claims)))
    assert resp.status == status, await resp.text()


async def test_without_jwt_audience_a_token_that_names_an_audience_is_refused(api):
    client = await api(**STRICT)
    await expect_error(
        await client.get("/api/v1/whoami", headers=bearer(make_jwt("acme", aud="queueflow"))), 401
    )


ISSUERS = {
    "the issuer": ("https://idp.example.com", 200),
    "another issuer": ("https://evil.example.com", 401),
    "no iss claim": (None, 401),
}


@pytest.mark.parametrize(("iss", "status"), ISSUERS.values(), ids=ISSUERS.keys())
async def test_with_jwt_issuer_set_the_iss_claim_must_equal_it(api, iss, status):
    client = await api(**STRICT, jwt_issuer="https://idp.example.com")
    claims = {} if iss is None else {"iss": iss}
    resp = await client.get("/api/v1/whoami", headers=bearer(make_jwt("acme", **claims)))
    assert resp.status == status, await resp.text()


async def test_without_jwt_issuer_any_iss_is_accepted(api):
    client = await api(**STRICT)
    headers = bearer(make_jwt("acme", iss="https://anyone.example.com"))
    assert upstream_fields(await list_json(client, "/api/v1/whoami", headers)) == READ_WRITE


# --- a real server -------------------------------------------------------------------------------

SECRET = "a-real-secret-of-at-least-32-bytes-0123456789"
WEAK = "upstream-secret"  # 15 bytes, as a move from upstream might bring


def upstream_fields(whoami: dict) -> dict:
    """whoami's `tenant` and `access`, upstream's fields (the role beside them: tests/api/test_roles.py)."""
    return {k: whoami[k] for k in ("tenant", "access")}


async def _whoami(http: aiohttp.ClientSession, url: str, token: str) -> tuple[int, dict]:
    async with http.get(f"{url}/api/v1/whoami", headers=bearer(token)) as resp:
        body = await resp.json()
        return resp.status, upstream_fields(body) if resp.status == 200 else body


async def test_a_real_server_reads_jwt_scopes_audience_and_issuer(database_url, service):
    args = ["--worker-token", "w", "--jwt-secret", SECRET, "--jwt-audience", "qf", "--jwt-issuer", "idp"]
    proc = await service(database_url, mode="api", dev=False, extra_args=args)

    def token(**claims: object) -> str:
        return make_jwt("acme", secret=SECRET, aud="qf", iss="idp", **claims)

    async with aiohttp.ClientSession() as http:
        assert await _whoami(http, proc.base_url, token()) == (200, READ_WRITE)
        assert await _whoami(http, proc.base_url, token(scope="read")) == (200, READ_ONLY)
        assert await _whoami(http, proc.base_url, token(scope=["read", "write"])) == (200, READ_WRITE)
        assert (await _whoami(http, proc.base_url, token(scope="read:jobs")))[0] == 401
        assert (await _whoami(http, proc.base_url, make_jwt("acme", secret=SECRET, iss="idp")))[0] == 401
        assert (await _whoami(http, proc.base_url, make_jwt("acme", secret=SECRET, aud="qf")))[0] == 401
        body = {"task_name": "t"}
        async with http.post(
            f"{proc.base_url}/api/v1/jobs", json=body, headers=bearer(token(scope=["read"]))
        ) as resp:
            assert resp.status == 403, await resp.text()
        async with http.post(f"{proc.base_url}/api/v1/queues/q/lease", json={}, headers=bearer("w")) as resp:
            assert resp.status == 200  # the worker token is untouched by the JWT settings


async def test_a_weak_jwt_secret_starts_only_with_the_escape_flag_and_warns(database_url, service):
    args = ["--worker-token", "w", "--jwt-secret", WEAK]
    refused = await service(database_url, mode="api", dev=False, extra_args=args, start=False)
    with pytest.raises(RuntimeError, match="exited with"):
        await refused.start(ready_within=30)
    assert "15 bytes" in refused.log_text() and "openssl rand -base64 48" in refused.log_text()

    proc = await service(database_url, mode="api", dev=False, extra_args=[*args, "--allow-weak-jwt-secret"])
    events = [json.loads(line) for line in proc.log_text().splitlines() if line.startswith("{")]
    assert "weak_jwt_secret" in [e.get("event") for e in events]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)  # what the flag accepts
        weak_token = make_jwt("acme", secret=WEAK)
    async with aiohttp.ClientSession() as http:
        assert await _whoami(http, proc.base_url, weak_token) == (200, READ_WRITE)
