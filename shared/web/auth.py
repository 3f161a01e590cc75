"""Credentials: tenant API keys and HS256 JWTs, the OpenID provider's access tokens
(--oidc-issuer, shared/web/oidc.py), the separate worker token, worker keys, and development mode.

Tenant routes: no token 401; the worker token or a live worker key 403 (infrastructure gets no
tenant identity); a valid API key or JWT is that tenant; anything else 401. Worker routes: the
worker token passes for every tenant; a live worker key passes for its own tenant (the handlers
hold it to its tenant and queues); a valid tenant credential is 403; anything else, a revoked or
expired key included, 401. A credential carries a role (shared/domain/access.py): an API key's
third field (`ro` is viewer, none is admin); a JWT's `role` claim, else admin, capped at viewer by a
`scope` of `read` alone (shared/domain/scopes.py: a scope outside the vocabulary, or a `role` that
names no role, is 401); with --jwt-audience and --jwt-issuer its `aud` and `iss` must match. `--dev` accepts any non-empty token as tenant `tenant1` when no API
keys and no JWT secret are configured, and as a worker when no worker token is configured (with
one, the worker routes take only it); `serve` refuses --dev beside any credential
(shared/config.py check_dev_mode), and this class enforces a configured credential regardless. A
token shaped like a worker key is always judged as one, so that revoking a key holds in --dev too.
Every secret comparison is constant-time.

Worker keys live in the database. Each process caches what it looked up, by token digest, for at
most KEY_CACHE_SECS, and only while its LISTEN connection is up: a revocation's notification drops
the key at once, and one missed while that connection was down cannot keep a key alive. A digest
that names no key is remembered as unknown for UNKNOWN_KEY_CACHE_SECS only (no notification is
needed to take a key minted since: it is taken within that second), in a table of its own, so
that unknown tokens never push known keys out. Each lookup of a digest the process does not know
spends a token of its source address's bucket (given back when the key exists): an address that
presents unknown keys faster than --unknown-worker-key-rate is answered 429 without a query.
"""

from __future__ import annotations

import hmac
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import jwt

from shared.config import Settings
from shared.domain.access import Principal, Role, role_of_claims
from shared.domain.admission import RateTable, source_of
from shared.domain.errors import Forbidden, TooManyRequests, Unauthorized
from shared.domain.scopes import scope_read_only
from shared.domain.worker_keys import WorkerGrant, may_be_key
from shared.domain.worker_keys import token_digest as _digest
from shared.web.body import is_utf8
from shared.web.oidc import Identity, OpenIdProvider

DEV_TENANT = "tenant1"
# The longest a process trusts its cached copy of a worker key without asking the database again.
KEY_CACHE_SECS = 10.0
# Entries the cache holds at most (the oldest go first): presented tokens are not trusted to be few.
KEY_CACHE_SIZE = 10_000
# How long a digest that named no key is taken as unknown without asking again, and how many such
# digests are remembered (the oldest go first). A key minted after such a miss (its token cannot be
# presented before it is minted, but a row restored from a backup can be) is taken within this.
UNKNOWN_KEY_CACHE_SECS = 1.0
UNKNOWN_KEY_CACHE_SIZE = 10_000

KeyLookup = Callable[[bytes], Awaitable[WorkerGrant | None]]


def principal_of_identity(identity: Identity) -> Principal:
    """The caller a verified provider token (shared/web/oidc.py) names: its subject as the actor
    `oidc:<sub>`, its mapped tenant and role."""
    return Principal.from_claims(
        subject=identity.subject, tenant=identity.tenant, role=Role(identity.role), name=identity.name
    )


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when absent or empty."""
    if not header or not header.startswith("Bearer "):
        return None
    token = header[len("Bearer ") :].strip()
    if not token or not is_utf8(token):
        return None  # bytes that are not UTF-8 arrive as surrogates: no credential has them
    return token


class WorkerKeyCache:
    """Worker keys looked up by token digest, each kept for KEY_CACHE_SECS, none while
    `listening()` says revocations could go unheard; digests that named no key, each for
    UNKNOWN_KEY_CACHE_SECS. `forget` is fed by the revocation channel; a lookup that was under way
    when something was forgotten is used once but not kept, so a key revoked during its lookup is
    not cached. With `misses`, each lookup spends a token of its source (given back when the key
    exists), and a source without one is TooManyRequests, asking nothing."""

    def __init__(
        self, lookup: KeyLookup, listening: Callable[[], bool], misses: RateTable | None = None
    ) -> None:
        self._lookup = lookup
        self._listening = listening
        self._misses = misses
        self._entries: dict[bytes, tuple[float, WorkerGrant]] = {}
        self._unknown: OrderedDict[bytes, float] = OrderedDict()  # digest -> until when
        self._forgotten = 0  # counts forget calls: a lookup's answer is kept only if none came

    async def find(self, digest: bytes, address: str | None = "") -> WorkerGrant | None:
        """`address`: the caller's peer address, counted under its source (admission.source_of)
        only when the digest has to be looked up."""
        now = time.monotonic()
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > now and self._listening():
            return hit[1]
        if self._unknown.get(digest, now) > now:
            return None
        source = source_of(address)
        if self._misses is not None and (wait := self._misses.take(source, now)):
            raise TooManyRequests(
                "too many unknown worker keys presented from this address; retry later", wait
            )
        forgotten = self._forgotten
        try:
            grant = await self._lookup(digest)
        except BaseException:
            if self._misses is not None:
                self._misses.give_back(source, now)  # (nothing was learnt of the key)
            raise
        if grant is not None and self._misses is not None:
            self._misses.give_back(source, now)
        if forgotten == self._forgotten:
            self._keep(digest, grant, now)
        return grant

    def _keep(self, digest: bytes, grant: WorkerGrant | None, now: float) -> None:
        self._entries.pop(digest, None)
        self._unknown.pop(digest, None)
        if grant is None:
            if len(self._unknown) >= UNKNOWN_KEY_CACHE_SIZE:
                self._unknown.popitem(last=False)
            self._unknown[digest] = now + UNKNOWN_KEY_CACHE_SECS
        elif self._listening():
            if len(self._entries) >= KEY_CACHE_SIZE:
                del self._entries[next(iter(self._entries))]
            self._entries[digest] = (now + KEY_CACHE_SECS, grant)

    def forget(self, key_id: str) -> None:
        """Drop the key with this id; "" drops every entry (notifications may have been missed)."""
        self._forgotten += 1
        if not key_id:
            self._entries.clear()
            self._unknown.clear()
            return
        try:
            gone = uuid.UUID(key_id)
        except ValueError:
            return
        for digest, (_, grant) in list(self._entries.items()):
            if grant.key_id == gone:
                del self._entries[digest]


class Authenticator:
    """`--dev` fills in only what is not configured: unknown tokens are the placeholder tenant
    only while no API keys and no JWT secret are set, and any token opens the worker routes only
    while no worker token is set. A credential that is configured is always enforced."""

    def __init__(self, settings: Settings) -> None:
        self._worker = _digest(settings.worker_token) if settings.worker_token else None
        self._keys = [
            (_digest(k.token), Principal.for_api_key(k.token, k.tenant, k.role)) for k in settings.api_keys
        ]
        self._jwt_secret = settings.jwt_secret
        self._jwt_audience = settings.jwt_audience
        self._jwt_issuer = settings.jwt_issuer
        self._jwt_required = ["exp", "sub"] + [
            claim for claim, want in (("aud", settings.jwt_audience), ("iss", settings.jwt_issuer)) if want
        ]
        self._dev_tenants = (
            settings.dev and not settings.api_keys and not settings.jwt_secret and not settings.oidc_issuer
        )
        # The OpenID provider whose access tokens are tenant credentials too (--oidc-issuer).
        self.oidc = OpenIdProvider(settings) if settings.oidc_issuer else None
        self._dev_workers = settings.dev and self._worker is None
        self.worker_keys: WorkerKeyCache | None = None  # set once the database is open

    async def _worker_key(self, digest: bytes, address: str | None) -> WorkerGrant | None:
        """The live worker key of a token shaped like one; None for an unknown, revoked or expired
        key. (Tokens of other shapes are never looked up: a wrong one costs no query.) `address`
        is the caller's peer address (WorkerKeyCache.find)."""
        if self.worker_keys is None:
            return None
        grant = await self.worker_keys.find(digest, address)
        if grant is None or grant.expired(datetime.now(UTC)):
            return None
        return grant

    def _is_worker_token(self, digest: bytes) -> bool:
        return self._worker is not None and hmac.compare_digest(digest, self._worker)

    def _tenant_credential(self, token: str, digest: bytes) -> Principal | None:
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
                    audience=self._jwt_audience,
                    issuer=self._jwt_issuer,
                    options={"require": self._jwt_required},
                    leeway=30,
                )
            except jwt.PyJWTError:
                return None
            sub = claims.get("sub")
            read_only = scope_read_only(claims)
            if not isinstance(sub, str) or not sub or read_only is None:
                return None
            role = role_of_claims(claims, read_only)
            if role is None:
                return None
            name = claims.get("name")
            return Principal.for_jwt(sub, role, name if isinstance(name, str) and name else None)
        return None

    async def _provider_tenant(self, token: str) -> Principal | None:
        """The caller of an access token of the OpenID provider; None for a token that does not
        claim to come from it. A token that does but fails its checks is Unauthorized."""
        if self.oidc is None or token.count(".") != 2 or not self.oidc.issued_by_us(token):
            return None
        return principal_of_identity(await self.oidc.identity(token))

    async def tenant(self, header: str | None, address: str | None = "") -> Principal:
        token = bearer_token(header)
        if token is None:
            raise Unauthorized()
        digest = _digest(token)
        if self._is_worker_token(digest):
            raise Forbidden()
        tenant = self._tenant_credential(token, digest) or await self._provider_tenant(token)
        if tenant is not None:
            return tenant
        if may_be_key(token):
            if await self._worker_key(digest, address) is not None:
                raise Forbidden("access denied: a worker key opens the worker routes only")
            raise Unauthorized()
        if self._dev_tenants:
            return Principal.for_dev(token, DEV_TENANT)
        raise Unauthorized()

    async def worker(self, header: str | None, address: str | None = "") -> WorkerGrant | None:
        """None for the worker token (every tenant's jobs); a worker key's grant otherwise.
        `address`: the caller's peer address, for the unknown-key rate limit."""
        token = bearer_token(header)
        if token is None:
            raise Unauthorized()
        digest = _digest(token)
        if self._is_worker_token(digest):
            return None
        tenant = self._tenant_credential(token, digest) or await self._provider_tenant(token)
        if tenant is None and may_be_key(token):
            grant = await self._worker_key(digest, address)
            if grant is None:
                raise Unauthorized()
            return grant
        if tenant is not None or (self._dev_tenants and self._worker is not None):
            # A tenant's credential (in --dev, any token that is not the worker token is one)
            raise Forbidden("access denied: worker routes need the worker token or a worker key")
        if self._dev_workers:
            return None
        raise Unauthorized()
