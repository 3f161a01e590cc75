"""The OpenID provider of --oidc-issuer (docs/access.md): its discovery document and signing keys,
the verification of its tokens, the identity they carry, and the calls of the authorization code
flow with PKCE that the console's sign-in makes (services/api/console/auth.py).

Discovery (`{issuer}/.well-known/openid-configuration`) is read once, when first needed, and its
`issuer` must be --oidc-issuer exactly. The JWKS is fetched with it and kept; a token whose `kid`
is not among the kept keys makes one refetch (the provider rotated its keys), at most one every
JWKS_MIN_REFETCH_SECS: a caller whose unknown `kid` a refetch since its arrival did not find is
refused at once, so made-up `kid`s cost at most one fetch a second and never queue.

A token is taken only when it is a JWS signed with an asymmetric algorithm (RS*, PS*, ES*; `none`
and HS* are refused before any key is looked at, so a token "signed" with the public key as an
HMAC secret is refused too), by a key of the JWKS whose type fits the algorithm, and its `iss` is
the issuer, its `aud` names the expected audience, and `exp` and `nbf` hold with LEEWAY_SECS of
clock skew. An ID token's `nonce` must be the one its sign-in sent.

The identity: `sub`; a display name (`name`, else `preferred_username`, else `email`, else `sub`);
the tenant (--oidc-tenant-claim, else --oidc-default-tenant); and the role, the highest of
viewer < operator < admin that --oidc-role-map gives any value of --oidc-roles-claim (a string or
a list; a dotted name such as `realm_access.roles` reads a nested claim).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import aiohttp
import jwt
import msgspec

from shared.config import ROLES, Settings, parse_role_map
from shared.domain.errors import Forbidden, ProviderUnavailable, Unauthorized

# Clock skew allowed on exp, nbf and iat.
LEEWAY_SECS = 30
# The shortest time between two JWKS fetches that unknown kids trigger.
JWKS_MIN_REFETCH_SECS = 1.0
# How long a call to the provider may take.
PROVIDER_TIMEOUT_SECS = 10.0
# Signature algorithms a provider token may use, by the key type each needs.
ALGORITHMS = {
    **{f"RS{n}": "RSA" for n in (256, 384, 512)},
    **{f"PS{n}": "RSA" for n in (256, 384, 512)},
    **{f"ES{n}": "EC" for n in (256, 384, 512)},
}


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a provider token names, and what it may do: `role` is one of shared.config.ROLES."""

    subject: str
    name: str
    tenant: str
    role: str


@dataclass(frozen=True, slots=True)
class _Key:
    """A JWKS key: the public key, its type (RSA or EC) and the algorithm it names, if any."""

    public: Any
    kty: str
    alg: str | None


@dataclass(frozen=True, slots=True)
class Metadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    end_session_endpoint: str | None
    token_auth_methods: tuple[str, ...]


class TokenSet(msgspec.Struct, frozen=True):
    """A token endpoint's answer (the fields used here)."""

    access_token: str
    token_type: str = "Bearer"
    expires_in: float | None = None
    refresh_token: str | None = None
    id_token: str | None = None


@dataclass(frozen=True, slots=True)
class Login:
    """One sign-in under way: what the callback must find again (state, and the nonce that the ID
    token must carry) and the PKCE verifier that proves it is the same client."""

    state: str
    nonce: str
    verifier: str

    @classmethod
    def new(cls) -> Login:
        return cls(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_urlsafe(48))

    @property
    def challenge(self) -> str:
        digest = hashlib.sha256(self.verifier.encode()).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def claim_at(claims: dict[str, Any], name: str) -> Any:
    """The claim `name`, or the nested one that a dotted name leads to (a claim whose own name has
    the dot wins)."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class OpenIdProvider:
    def __init__(self, settings: Settings) -> None:
        assert settings.oidc_issuer and settings.oidc_client_id
        self.issuer = settings.oidc_issuer
        self.client_id = settings.oidc_client_id
        self.client_secret = settings.oidc_client_secret
        self.audience = settings.oidc_audience or settings.oidc_client_id
        scopes = settings.oidc_scopes.split()
        self.scopes = " ".join(scopes if "openid" in scopes else ["openid", *scopes])
        self._tenant_claim = settings.oidc_tenant_claim
        self._default_tenant = settings.oidc_default_tenant
        self._roles_claim = settings.oidc_roles_claim
        self._role_map = parse_role_map(settings.oidc_role_map)
        self._metadata: Metadata | None = None
        self._keys: dict[str, _Key] = {}
        self._fetched_at = float("-inf")  # monotonic time of the last JWKS fetch's start
        self._lock = asyncio.Lock()
        self._http: aiohttp.ClientSession | None = None

    # --- the provider's documents -----------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROVIDER_TIMEOUT_SECS))
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _get_json(self, url: str) -> Any:
        try:
            async with self._client().get(url, headers={"Accept": "application/json"}) as resp:
                if resp.status != 200:
                    raise ProviderUnavailable(f"GET {url} answered {resp.status}")
                return await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise ProviderUnavailable(f"GET {url}: {str(error) or type(error).__name__}") from None

    async def metadata(self) -> Metadata:
        if self._metadata is None:
            async with self._lock:
                if self._metadata is None:
                    self._metadata = await self._discover()
                    await self._fetch_keys()
        return self._metadata

    async def _discover(self) -> Metadata:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        doc = await self._get_json(url)
        if not isinstance(doc, dict):
            raise ProviderUnavailable(f"{url} is not a JSON object")
        if doc.get("issuer") != self.issuer:
            raise ProviderUnavailable(
                f"{url} names the issuer {doc.get('issuer')!r}, not --oidc-issuer {self.issuer!r}"
            )
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if not doc.get(k)]
        if missing:
            raise ProviderUnavailable(f"{url} lacks {', '.join(missing)}")
        return Metadata(
            issuer=doc["issuer"],
            authorization_endpoint=doc["authorization_endpoint"],
            token_endpoint=doc["token_endpoint"],
            jwks_uri=doc["jwks_uri"],
            end_session_endpoint=doc.get("end_session_endpoint") or None,
            token_auth_methods=tuple(
                doc.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
            ),
        )

    async def _fetch_keys(self) -> None:
        assert self._metadata is not None
        self._fetched_at = time.monotonic()
        doc = await self._get_json(self._metadata.jwks_uri)
        keys: dict[str, _Key] = {}
        for entry in doc.get("keys", []) if isinstance(doc, dict) else []:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            if entry.get("kty") not in ("RSA", "EC"):
                continue
            try:
                jwk = jwt.PyJWK(entry)
            except jwt.PyJWTError:
                continue  # a key this library cannot use: tokens signed with it are refused
            declared = entry.get("alg")
            keys[str(entry.get("kid", ""))] = _Key(
                jwk.key, entry["kty"], declared if isinstance(declared, str) else None
            )
        self._keys = keys

    async def _key(self, kid: str) -> _Key | None:
        await self.metadata()
        found = self._keys.get(kid)
        if found is not None:
            return found
        arrived = time.monotonic()
        async with self._lock:
            found = self._keys.get(kid)
            if found is not None or self._fetched_at >= arrived:
                return found  # (a fetch since this call arrived did not find it: refused)
            wait = self._fetched_at + JWKS_MIN_REFETCH_SECS - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await self._fetch_keys()
            return self._keys.get(kid)

    # --- tokens -------------------------------------------------------------------------------

    def issued_by_us(self, token: str) -> bool:
        """Whether `token` is a JWT whose (unverified) `iss` is this provider: only such tokens are
        worth a signature check."""
        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            return False
        return claims.get("iss") == self.issuer

    async def verify(self, token: str, audience: str, nonce: str | None = None) -> dict[str, Any]:
        """The claims of a token this provider signed for `audience`; Unauthorized otherwise."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized() from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in ALGORITHMS:
            raise Unauthorized()  # none, HS*, or anything else that is not an asymmetric signature
        if not self.issued_by_us(token):
            raise Unauthorized()
        kid = header.get("kid")
        key = await self._key(kid) if isinstance(kid, str) else self._only_key()
        if key is None or key.kty != ALGORITHMS[alg] or key.alg not in (None, alg):
            raise Unauthorized()  # no such key, or one of another type or algorithm than the token's
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.public,
                algorithms=[alg],
                audience=audience,
                issuer=self.issuer,
                leeway=LEEWAY_SECS,
                options={"require": ["exp", "iss", "sub", "aud"]},
            )
        except jwt.PyJWTError:
            raise Unauthorized() from None
        if nonce is not None and claims.get("nonce") != nonce:
            raise Unauthorized()
        return claims

    def _only_key(self) -> _Key | None:
        """A token without a kid is checked against the JWKS's key only when it has one."""
        keys = list(self._keys.values())
        return keys[0] if len(keys) == 1 else None

    async def verify_id_token(self, token: str, nonce: str) -> dict[str, Any]:
        claims = await self.verify(token, self.client_id, nonce)
        aud = claims.get("aud")
        if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != self.client_id:
            raise Unauthorized()
        return claims

    async def identity(self, access_token: str) -> Identity:
        """The identity of an access token issued for the API (--oidc-audience)."""
        return self.identity_of(await self.verify(access_token, self.audience))

    def identity_of(self, claims: dict[str, Any]) -> Identity:
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise Unauthorized()
        name = next(
            (
                v
                for v in (claims.get(k) for k in ("name", "preferred_username", "email"))
                if isinstance(v, str) and v
            ),
            subject,
        )
        tenant = claim_at(claims, self._tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            if not self._default_tenant:
                raise Forbidden(f"access denied: the token has no {self._tenant_claim} claim naming a tenant")
            tenant = self._default_tenant
        raw = claim_at(claims, self._roles_claim)
        values = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        mapped = {self._role_map[v] for v in values if isinstance(v, str) and v in self._role_map}
        if not mapped:
            raise Forbidden(
                f"access denied: no value of the token's {self._roles_claim} claim maps to a role"
            )
        role = max(mapped, key=ROLES.index)
        return Identity(subject=subject, name=name, tenant=tenant, role=role)

    # --- the authorization code flow ------------------------------------------------------------

    async def authorization_url(self, login: Login, redirect_uri: str) -> str:
        meta = await self.metadata()
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": redirect_uri,
            "scope": self.scopes,
            "state": login.state,
            "nonce": login.nonce,
            "code_challenge": login.challenge,
            "code_challenge_method": "S256",
        }
        separator = "&" if "?" in meta.authorization_endpoint else "?"
        return meta.authorization_endpoint + separator + urllib.parse.urlencode(query)

    async def _token_call(self, form: dict[str, str]) -> TokenSet:
        meta = await self.metadata()
        form = {**form, "client_id": self.client_id}
        headers = {"Accept": "application/json"}
        if self.client_secret:
            if "client_secret_basic" in meta.token_auth_methods:
                # RFC 6749 section 2.3.1: each part form-encoded, then joined by ':' and base64'd.
                pair = (
                    f"{urllib.parse.quote_plus(self.client_id)}:{urllib.parse.quote_plus(self.client_secret)}"
                )
                headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
            else:
                form["client_secret"] = self.client_secret
        try:
            async with self._client().post(meta.token_endpoint, data=form, headers=headers) as resp:
                body = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as error:
            raise ProviderUnavailable(
                f"POST {meta.token_endpoint}: {str(error) or type(error).__name__}"
            ) from None
        if status >= 500:
            raise ProviderUnavailable(f"POST {meta.token_endpoint} answered {status}")
        if status != 200:
            raise Unauthorized()  # an invalid or expired code or refresh token: sign in again
        try:
            return msgspec.json.decode(body, type=TokenSet)
        except msgspec.ValidationError:
            raise ProviderUnavailable(f"POST {meta.token_endpoint}: not a token answer") from None

    async def exchange_code(self, code: str, login: Login, redirect_uri: str) -> TokenSet:
        return await self._token_call(
            {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "code_verifier": login.verifier,
            }
        )

    async def refresh(self, refresh_token: str) -> TokenSet:
        return await self._token_call({"grant_type": "refresh_token", "refresh_token": refresh_token})

    async def end_session_url(self, id_token: str | None, post_logout_redirect_uri: str) -> str | None:
        """The provider's RP-initiated logout address for this session, when it offers one."""
        meta = await self.metadata()
        if meta.end_session_endpoint is None:
            return None
        query = {"client_id": self.client_id, "post_logout_redirect_uri": post_logout_redirect_uri}
        if id_token:
            query["id_token_hint"] = id_token
        separator = "&" if "?" in meta.end_session_endpoint else "?"
        return meta.end_session_endpoint + separator + urllib.parse.urlencode(query)
