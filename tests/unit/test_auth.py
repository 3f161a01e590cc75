"""Credential parsing and classification (shared.web.auth): tenant keys and JWTs, the worker token, 401
versus 403, and development mode."""

from __future__ import annotations

import time

import jwt
import pytest

from shared.config import Settings, parse_api_keys
from shared.domain.errors import Forbidden, Unauthorized
from shared.web.auth import DEV_TENANT, Authenticator, Tenant, bearer_token

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


def test_an_api_key_is_its_tenant_and_the_ro_suffix_makes_it_read_only():
    auth = strict()
    assert auth.tenant(bearer("k-acme")) == Tenant("acme")
    ro = auth.tenant(bearer("k-ro"))
    assert ro == Tenant("acme", read_only=True) and ro.access == "read_only"


def test_a_jwt_sub_is_the_tenant_and_scope_read_is_read_only():
    auth = strict()
    assert auth.tenant(bearer(token_for("globex"))) == Tenant("globex")
    assert auth.tenant(bearer(token_for("globex", scope="read"))).read_only


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
def test_an_invalid_tenant_token_is_401(token):
    with pytest.raises(Unauthorized):
        strict().tenant(bearer(token))


def test_no_token_is_401_everywhere():
    auth = strict()
    with pytest.raises(Unauthorized):
        auth.tenant(None)
    with pytest.raises(Unauthorized):
        auth.worker(None)


def test_the_worker_token_gets_no_tenant_identity():
    with pytest.raises(Forbidden):
        strict().tenant(bearer("w-token"))


def test_worker_routes_take_only_the_worker_token():
    auth = strict()
    auth.worker(bearer("w-token"))
    with pytest.raises(Forbidden):
        auth.worker(bearer("k-acme"))
    with pytest.raises(Forbidden):
        auth.worker(bearer(token_for("globex")))
    with pytest.raises(Unauthorized):
        auth.worker(bearer("guess"))


def test_development_mode_makes_any_token_tenant1_and_a_worker():
    auth = Authenticator(Settings(database_url="postgresql://x/y", dev=True))
    assert auth.tenant(bearer("dev")) == Tenant(DEV_TENANT)
    assert auth.tenant(bearer("anything")) == Tenant("tenant1")
    auth.worker(bearer("dev"))
    with pytest.raises(Unauthorized):
        auth.tenant(None)


def test_without_dev_placeholder_tokens_are_refused():
    auth = strict()
    for token in ("dev", "tenant1", "anything"):
        with pytest.raises(Unauthorized):
            auth.tenant(bearer(token))


def test_dev_with_a_worker_token_opens_the_worker_routes_to_that_token_only():
    auth = Authenticator(Settings(database_url="postgresql://x/y", dev=True, worker_token="w"))
    auth.worker(bearer("w"))
    for token in ("dev", "anything"):  # tenant tokens in --dev: a tenant on a worker route is 403
        with pytest.raises(Forbidden):
            auth.worker(bearer(token))
    assert auth.tenant(bearer("dev")) == Tenant(DEV_TENANT)
    with pytest.raises(Forbidden):
        auth.tenant(bearer("w"))


def test_dev_with_api_keys_maps_no_unknown_token_to_the_placeholder_tenant():
    auth = Authenticator(
        Settings(database_url="postgresql://x/y", dev=True, api_keys=parse_api_keys("k:acme"))
    )
    assert auth.tenant(bearer("k")) == Tenant("acme")
    with pytest.raises(Unauthorized):
        auth.tenant(bearer("dev"))
    auth.worker(bearer("anything"))  # no worker token configured: --dev still lets workers in
    with pytest.raises(Forbidden):
        auth.worker(bearer("k"))


def test_dev_with_a_jwt_secret_maps_no_unknown_token_to_the_placeholder_tenant():
    auth = Authenticator(Settings(database_url="postgresql://x/y", dev=True, jwt_secret="s" * 40))
    with pytest.raises(Unauthorized):
        auth.tenant(bearer("dev"))
