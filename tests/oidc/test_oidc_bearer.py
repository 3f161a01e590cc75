"""The API takes the OpenID provider's access tokens as bearer tokens, beside API keys: verified
against the provider's JWKS (fetched by discovery, refetched for a kid it has not seen), with
its tenant and roles claims mapped to today's access levels. Tokens from another issuer, for
another audience, unsigned, HMAC-signed with the public key, expired or not yet valid are 401."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import jwt
import pytest

from tests.oidc.minted import MintingIssuer, hs256_with, payload_of, public_pem, unsigned
from tests.oidc.provider import CONFIDENTIAL_CLIENT, PUBLIC_CLIENT, USERS, OidcProvider, provider_binary
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)


async def call(server, token: str, method: str = "GET", path: str = "/api/v1/whoami", **kw):
    async with (
        aiohttp.ClientSession() as http,
        http.request(
            method, server.base_url + path, headers={"Authorization": f"Bearer {token}"}, **kw
        ) as resp,
    ):
        body = await resp.json(content_type=None)
        return resp.status, body


async def who(server, token: str) -> tuple[int, str | None, str | None, str | None]:
    """whoami's status, tenant, role and actor for `token`."""
    status, body = await call(server, token)
    return status, body.get("tenant"), body.get("role"), body.get("actor")


@pytest.fixture
async def server(oidc_server):
    return await oidc_server()


@pytest.fixture(scope="module")
async def other_provider(tmp_path_factory):
    started = await OidcProvider(provider_binary(), tmp_path_factory.mktemp("other-provider")).start()
    try:
        yield started
    finally:
        await started.stop()


async def test_a_providers_access_token_is_a_bearer_token_of_its_tenant_and_role(server, provider):
    operator = (await provider.tokens(USERS["operator"]))["access_token"]
    assert await who(server, operator) == (200, "acme", "operator", "oidc:u-olga")
    viewer = (await provider.tokens(USERS["viewer"]))["access_token"]
    assert await who(server, viewer) == (200, "acme", "viewer", "oidc:u-victor")
    # The role is checked as any caller's: a viewer reads and may not enqueue; an operator may.
    status, body = await call(server, viewer, "POST", "/api/v1/jobs", json={"task_name": "t", "payload": {}})
    assert (status, body["error"]) == (
        403,
        "access denied: this needs the operator role (the credential's role is viewer)",
    )
    status, _ = await call(server, operator, "POST", "/api/v1/jobs", json={"task_name": "t", "payload": {}})
    assert status == 201
    admin = (await provider.tokens(USERS["admin"]))["access_token"]
    assert await who(server, admin) == (200, "acme", "admin", "oidc:u-ada")
    # API keys are unchanged beside it.
    assert (await who(server, "rw"))[:3] == (200, "acme", "admin")


async def test_a_token_whose_claims_map_to_no_role_or_no_tenant_is_403_saying_why(server, provider):
    status, body = await call(server, (await provider.tokens(USERS["nobody"]))["access_token"])
    assert (status, body["error"]) == (
        403,
        "access denied: no value of the token's groups claim maps to a role",
    )
    status, body = await call(server, (await provider.tokens(USERS["untenanted"]))["access_token"])
    assert (status, body["error"]) == (403, "access denied: the token has no tenant claim naming a tenant")


async def test_a_default_tenant_names_the_tenant_of_tokens_without_the_claim(oidc_server, provider):
    server = await oidc_server("--oidc-default-tenant", "solo")
    token = (await provider.tokens(USERS["untenanted"]))["access_token"]
    assert await who(server, token) == (200, "solo", "operator", "oidc:u-una")
    # A token that names its tenant keeps it.
    token = (await provider.tokens(USERS["viewer"]))["access_token"]
    assert await who(server, token) == (200, "acme", "viewer", "oidc:u-victor")


async def test_a_token_for_another_client_is_401_as_a_wrong_audience(server, provider):
    tokens = await provider.tokens(USERS["operator"], client_id=CONFIDENTIAL_CLIENT)
    assert payload_of(tokens["access_token"])["aud"] == [CONFIDENTIAL_CLIENT]
    status, body = await call(server, tokens["access_token"])
    assert (status, body["error"]) == (401, "unauthorized")


async def test_tokens_from_another_issuer_unsigned_or_hmac_signed_with_the_public_key_are_401(
    server, provider, other_provider
):
    foreign = (await other_provider.tokens(USERS["operator"]))["access_token"]
    good = (await provider.tokens(USERS["operator"]))["access_token"]
    claims = payload_of(good)
    assert claims["aud"] == [PUBLIC_CLIENT] and claims["iss"] == provider.issuer
    key = next(k for k in (await provider.jwks())["keys"] if k["kty"] == "RSA")
    for token in (
        foreign,
        unsigned(claims, key["kid"]),
        unsigned(claims),
        hs256_with(public_pem(key), claims, key["kid"]),
        hs256_with(public_pem(key), claims),
        good[: good.rindex(".") + 1] + "AAAA",  # the signature of another token
    ):
        status, body = await call(server, token)
        assert (status, body["error"]) == (401, "unauthorized"), token
    assert (await call(server, good))[0] == 200


async def test_a_rotated_key_is_fetched_when_its_kid_first_appears_rsa_or_ec(server, provider):
    before = (await provider.tokens(USERS["operator"]))["access_token"]
    assert (await call(server, before))[0] == 200
    for alg in ("ES256", "RS256"):
        kid = await provider.rotate(alg)
        token = (await provider.tokens(USERS["operator"]))["access_token"]
        assert jwt_header(token) == {"alg": alg, "kid": kid, "typ": "JWT"}
        assert await who(server, token) == (200, "acme", "operator", "oidc:u-olga")
    # The old key is still published, so its tokens still pass; once retired they do not.
    assert (await call(server, before))[0] == 200
    await provider.rotate("RS256", retire=True)
    fresh = (await provider.tokens(USERS["operator"]))["access_token"]
    assert (await call(server, fresh))[0] == 200  # (a new kid: the JWKS is fetched again)
    assert (await call(server, before))[0] == 401


def jwt_header(token: str) -> dict:
    return jwt.get_unverified_header(token)


@pytest.fixture
async def minting():
    issuer = await MintingIssuer().start()
    try:
        yield issuer
    finally:
        await issuer.stop()


async def minted_server(service, database_url, minting: MintingIssuer):
    proc = await service(
        database_url,
        mode="api",
        dev=False,
        extra_args=[
            "--worker-token",
            "w",
            "--oidc-issuer",
            minting.issuer,
            "--oidc-client-id",
            "qf",
            "--oidc-roles-claim",
            "groups",
            "--oidc-role-map",
            "qf-operators=operator",
        ],
        start=False,
    )
    proc.argv += ["--public-url", proc.base_url]
    return await proc.start()


async def test_expired_not_yet_valid_and_unknown_key_tokens_are_401(service, database_url, minting):
    kid = minting.add_key("RS256")
    server = await minted_server(service, database_url, minting)
    now = int(time.time())
    assert (await call(server, minting.mint(minting.claims("qf"), kid)))[0] == 200
    ec_kid = minting.add_key("ES256")
    assert (await call(server, minting.mint(minting.claims("qf"), ec_kid)))[0] == 200
    unpublished = minting.add_key("RS256", publish=False)
    for claims, key, alg in (
        (minting.claims("qf", exp=now - 120), kid, None),  # expired, past the leeway
        (minting.claims("qf", nbf=now + 300), kid, None),  # not valid yet
        (minting.claims("qf", exp=None), kid, None),  # no expiry
        (minting.claims("qf", aud="someone-else"), kid, None),
        (minting.claims("qf", iss=minting.issuer + "/other"), kid, None),
        (minting.claims("qf"), unpublished, None),  # a key the JWKS does not have
        (minting.claims("qf"), kid, "RS512"),  # the JWK says RS256
    ):
        status, body = await call(server, minting.mint(claims, key, alg))
        assert (status, body["error"]) == (401, "unauthorized"), claims


async def test_made_up_kids_share_refetches_and_a_key_published_later_is_found(
    service, database_url, minting
):
    kid = minting.add_key("RS256")
    server = await minted_server(service, database_url, minting)
    assert (await call(server, minting.mint(minting.claims("qf"), kid)))[0] == 200
    fetched = minting.jwks_fetches
    ghosts = [minting.mint(minting.claims("qf"), minting.add_key("RS256", publish=False)) for _ in range(20)]
    answers = await asyncio.gather(*(call(server, token) for token in ghosts))
    assert {status for status, _ in answers} == {401}
    # Callers whose kid a refetch since their arrival did not find are refused without another.
    assert 1 <= minting.jwks_fetches - fetched < len(ghosts)
    late = minting.mint(minting.claims("qf"), minting.add_key("ES256"))

    async def taken() -> bool:
        return (await call(server, late))[0] == 200

    await eventually(taken, timeout=15)
