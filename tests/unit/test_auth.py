"""Credential parsing and classification (shared.web.auth): tenant keys and JWTs, the worker token, 401
versus 403, and development mode."""

from __future__ import annotations

import time

import jwt
import pytest

from shared.config import Settings, parse_api_keys
from shared.domain.access import Role, key_id
from shared.domain.errors import Forbidden, Unauthorized
from shared.web.auth import DEV_TENANT, Authenticator, bearer_token

SECRET = "jwt-secret-for-tests-0123456789abcdef"


def strict(**overrides) -> Authenticator:
    base = {
        "worker_token": "w-token",
        "api_keys": parse_api_keys("k-acme:acme,k-ro:acme:ro"),
        "jwt_secret": SECRET,
    }
    return Authenticator(Settings(database_url="postgresql://x/y", **{**base, **overrides}))


def bearer(token: str) -> str:
    return f"Bearer {token}"


def token_for(sub: str | None = "globex", exp_in: float | None = 300, key: str = SECRET, **claims) -> str:
    body = dict(claims)
    if sub is not None:
        body["sub"] = sub
    if exp_in is not None:
        body["exp"] = int(time.time() + exp_in)
    return jwt.encode(body, key, algorithm="HS256")


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("Bearer   abc  ", "abc"),
        ("Bearer ", None),
        ("Basic abc", None),
        (None, None),
        ("", None),
        ("abc", None),
    ],
)
def test_bearer_token_extraction(header, token):
    assert bearer_token(header) == token


def who(principal) -> tuple[str, Role]:
    return principal.tenant, principal.role


async def test_an_api_key_is_its_tenant_as_admin_and_the_ro_suffix_makes_it_a_read_only_viewer():
    auth = strict()
    key = await auth.tenant(bearer("k-acme"))
    assert who(key) == ("acme", Role.ADMIN) and key.access == "read_write"
    ro = await auth.tenant(bearer("k-ro"))
    assert who(ro) == ("acme", Role.VIEWER) and ro.access == "read_only"


async def test_an_api_key_is_its_actor_by_a_digest_never_by_the_key():
    principal = await strict().tenant(bearer("k-acme"))
    assert principal.actor == f"key:{key_id('k-acme')}"
    assert "k-acme" not in principal.actor and len(key_id("k-acme")) == 12


async def test_an_api_key_with_a_role_has_that_role():
    auth = strict(api_keys=parse_api_keys("k-op:acme:operator,k-v:acme:viewer"))
    assert who(await auth.tenant(bearer("k-op"))) == ("acme", Role.OPERATOR)
    assert who(await auth.tenant(bearer("k-v"))) == ("acme", Role.VIEWER)


async def test_a_jwt_sub_is_the_tenant_and_scope_read_is_read_only():
    auth = strict()
    assert who(await auth.tenant(bearer(token_for("globex")))) == ("globex", Role.ADMIN)
    assert who(await auth.tenant(bearer(token_for("globex", scope="write")))) == ("globex", Role.ADMIN)
    assert (await auth.tenant(bearer(token_for("globex", scope="read")))).read_only
    assert (await auth.tenant(bearer(token_for("globex")))).actor == "jwt:globex"


@pytest.mark.parametrize(
    ("claims", "role"),
    [
        ({"role": "operator"}, Role.OPERATOR),
        ({"role": "viewer", "scope": "write"}, Role.VIEWER),
        ({"role": "admin", "scope": "read"}, Role.VIEWER),  # read alone caps the role
        ({"role": "Admin"}, Role.ADMIN),
    ],
)
async def test_a_jwt_role_claim_names_its_role(claims, role):
    assert who(await strict().tenant(bearer(token_for("globex", **claims)))) == ("globex", role)


@pytest.mark.parametrize("role", ["root", "", 3, ["admin"]])
async def test_a_jwt_whose_role_claim_names_no_role_is_401(role):
    with pytest.raises(Unauthorized):
        await strict().tenant(bearer(token_for("globex", role=role)))


@pytest.mark.parametrize(
    "token",
    [
        token_for(exp_in=-3600),  # expired
        token_for(exp_in=None),  # no exp
        token_for(sub=None),  # no sub
        token_for(key="another-secret-another-secret-123"),  # forged
        jwt.encode({"sub": "x", "exp": int(time.time()) + 60}, key=None, algorithm="none"),
        "not.a.jwt",
        "garbage",
    ],
    ids=["expired", "no-exp", "no-sub", "forged", "alg-none", "not-a-jwt", "garbage"],
)
async def test_an_invalid_tenant_token_is_401(token):
    with pytest.raises(Unauthorized):
        await strict().tenant(bearer(token))


async def test_no_token_is_401_everywhere():
    auth = strict()
    with pytest.raises(Unauthorized):
        await auth.tenant(None)
    with pytest.raises(Unauthorized):
        await auth.worker(None)


async def test_the_worker_token_gets_no_tenant_identity():
    with pytest.raises(Forbidden):
        await strict().tenant(bearer("w-token"))


async def test_worker_routes_take_only_the_worker_token():
    auth = strict()
    assert await auth.worker(bearer("w-token")) is None
    with pytest.raises(Forbidden):
        await auth.worker(bearer("k-acme"))
    with pytest.raises(Forbidden):
        await auth.worker(bearer(token_for("globex")))
    with pytest.raises(Unauthorized):
        await auth.worker(bearer("guess"))


async def test_development_mode_makes_any_token_tenant1_and_a_worker():
    auth = Authenticator(Settings(database_url="postgresql://x/y", dev=True))
    assert who(await auth.tenant(bearer("dev"))) == (DEV_TENANT, Role.ADMIN)
    assert who(await auth.tenant(bearer("anything"))) == ("tenant1", Role.ADMIN)
    assert await auth.worker(bearer("dev")) is None
    with pytest.raises(Unauthorized):
        await auth.tenant(None)


async def test_without_dev_placeholder_tokens_are_refused():
    auth = strict()
    for token in ("dev", "tenant1", "anything"):
        with pytest.raises(Unauthorized):
            await auth.tenant(bearer(token))


async def test_dev_with_a_worker_token_opens_the_worker_routes_to_that_token_only():
    auth = Authenticator(Settings(database_url="postgresql://x/y", dev=True, worker_token="w"))
    assert await auth.worker(bearer("w")) is None
    for token in ("dev", "anything"):  # tenant tokens in --dev: a tenant on a worker route is 403
        with pytest.raises(Forbidden):
            await auth.worker(bearer(token))
    assert who(await auth.tenant(bearer("dev"))) == (DEV_TENANT, Role.ADMIN)
    with pytest.raises(Forbidden):
        await auth.tenant(bearer("w"))


async def test_dev_with_api_keys_maps_no_unknown_token_to_the_placeholder_tenant():
    auth = Authenticator(
        Settings(database_url="postgresql://x/y", dev=True, api_keys=parse_api_keys("k:acme"))
    )
    assert who(await auth.tenant(bearer("k"))) == ("acme", Role.ADMIN)
    with pytest.raises(Unauthorized):
        await auth.tenant(bearer("dev"))
    # No worker token configured: --dev still lets workers in, as the worker token would.
    assert await auth.worker(bearer("anything")) is None
    with pytest.raises(Forbidden):
        await auth.worker(bearer("k"))


async def test_dev_with_a_jwt_secret_maps_no_unknown_token_to_the_placeholder_tenant():
    auth = Authenticator(Settings(database_url="postgresql://x/y", dev=True, jwt_secret="s" * 40))
    with pytest.raises(Unauthorized):
        await auth.tenant(bearer("dev"))
