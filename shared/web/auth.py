"""Credentials: tenant API keys and HS256 JWTs, the separate worker token, and development mode.

Tenant routes: no token 401; the worker token 403 (infrastructure gets no tenant identity); a
valid API key or JWT is that tenant; anything else 401. Worker routes: the worker token passes; a
valid tenant credential is 403; anything else 401. `--dev` accepts any non-empty token as tenant
`tenant1` when no API keys and no JWT secret are configured, and as a worker when no worker token
is configured (with one, the worker routes take only it). Every secret comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

import jwt

from shared.config import Settings
from shared.domain.errors import Forbidden, Unauthorized
from shared.web.body import is_utf8

DEV_TENANT = "tenant1"


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    read_only: bool = False

    @property
    def access(self) -> Literal["read_write", "read_only"]:
        return "read_only" if self.read_only else "read_write"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when absent or empty."""
    if not header or not header.startswith("Bearer "):
        return None
    token = header[len("Bearer ") :].strip()
    if not token or not is_utf8(token):
        return None  # bytes that are not UTF-8 arrive as surrogates: no credential has them
    return token


class Authenticator:
    """`--dev` fills in only what is not configured: unknown tokens are the placeholder tenant
    only while no API keys and no JWT secret are set, and any token opens the worker routes only
    while no worker token is set. A credential that is configured is always enforced."""

    def __init__(self, settings: Settings) -> None:
        self._worker = _digest(settings.worker_token) if settings.worker_token else None
        self._keys = [(_digest(k.token), Tenant(k.tenant, k.read_only)) for k in settings.api_keys]
        self._jwt_secret = settings.jwt_secret
        self._dev_tenants = settings.dev and not settings.api_keys and not settings.jwt_secret
        self._dev_workers = settings.dev and self._worker is None

    def _is_worker_token(self, digest: bytes) -> bool:
        return self._worker is not None and hmac.compare_digest(digest, self._worker)

    def _tenant_credential(self, token: str, digest: bytes) -> Tenant | None:
        found = None
        for key_digest, tenant in self._keys:  # no early exit: every key is compared
            if hmac.compare_digest(digest, key_digest):
                found = tenant
        if found is not None:
            return found
        if self._jwt_secret and token.count(".") == 2:
            try:
                claims = jwt.decode(
                    token,
                    self._jwt_secret,
                    algorithms=["HS256"],
                    options={"require": ["exp", "sub"]},
                    leeway=30,
                )
            except jwt.PyJWTError:
                return None
            sub = claims.get("sub")
            if isinstance(sub, str) and sub:
                return Tenant(sub, read_only=claims.get("scope") == "read")
        return None

    def tenant(self, header: str | None) -> Tenant:
        token = bearer_token(header)
        if token is None:
            raise Unauthorized()
        digest = _digest(token)
        if self._is_worker_token(digest):
            raise Forbidden()
        tenant = self._tenant_credential(token, digest)
        if tenant is not None:
            return tenant
        if self._dev_tenants:
            return Tenant(DEV_TENANT)
        raise Unauthorized()

    def worker(self, header: str | None) -> None:
        token = bearer_token(header)
        if token is None:
            raise Unauthorized()
        digest = _digest(token)
        if self._is_worker_token(digest):
            return
        tenant = self._tenant_credential(token, digest)
        if tenant is not None or (self._dev_tenants and self._worker is not None):
            # A tenant's credential (in --dev, any token that is not the worker token is one)
            raise Forbidden("access denied: worker routes need the worker token")
        if self._dev_workers:
            return
        raise Unauthorized()
