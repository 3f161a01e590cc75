"""An issuer the test controls: a discovery document and a JWKS served from the test's own event
loop, and tokens minted with the test's own keys. The real provider (tests/oidc/provider.py) signs
only good tokens; this one makes the bad ones that a provider never would (expired, not yet valid,
an unknown kid, an `alg` the key does not have, no signature at all)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from typing import Any

import jwt
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(claims: dict[str, Any], kid: str | None = None) -> str:
    """An `alg: none` token: a header, the claims, and an empty signature."""
    header = {"alg": "none", "typ": "JWT", **({"kid": kid} if kid else {})}
    return f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}."


def hs256_with(secret: bytes, claims: dict[str, Any], kid: str | None = None) -> str:
    """An HS256 token whose HMAC secret is `secret` (made by hand: PyJWT refuses a PEM public key
    as an HMAC secret, which is the confusion this token tries on the server)."""
    header = {"alg": "HS256", "typ": "JWT", **({"kid": kid} if kid else {})}
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def public_pem(jwk: dict[str, Any]) -> bytes:
    key = jwt.PyJWK(jwk).key
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def payload_of(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


class MintingIssuer:
    def __init__(self) -> None:
        self.keys: dict[str, tuple[str, Any]] = {}  # kid -> (alg, private key)
        self.published: set[str] = set()
        self.jwks_fetches = 0
        self._server: TestServer | None = None
        self.issuer = ""

    def add_key(self, alg: str = "RS256", publish: bool = True) -> str:
        kid = uuid.uuid4().hex
        private = (
            ec.generate_private_key(ec.SECP256R1())
            if alg == "ES256"
            else rsa.generate_private_key(public_exponent=65537, key_size=2048)
        )
        self.keys[kid] = (alg, private)
        if publish:
            self.published.add(kid)
        return kid

    def jwks(self) -> dict[str, Any]:
        out = []
        for kid in sorted(self.published):
            alg, private = self.keys[kid]
            algorithm = jwt.algorithms.ECAlgorithm if alg == "ES256" else jwt.algorithms.RSAAlgorithm
            jwk = json.loads(algorithm.to_jwk(private.public_key()))
            out.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": out}

    async def start(self) -> MintingIssuer:
        app = web.Application()

        async def discovery(request: web.Request) -> web.Response:
            return web.json_response(
                {
                    "issuer": self.issuer,
                    "authorization_endpoint": f"{self.issuer}/authorize",
                    "token_endpoint": f"{self.issuer}/token",
                    "jwks_uri": f"{self.issuer}/jwks",
                }
            )

        async def keys(request: web.Request) -> web.Response:
            self.jwks_fetches += 1
            return web.json_response(self.jwks())

        app.router.add_get("/.well-known/openid-configuration", discovery)
        app.router.add_get("/jwks", keys)
        self._server = TestServer(app, host="127.0.0.1")
        await self._server.start_server()
        self.issuer = f"http://127.0.0.1:{self._server.port}"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.close()

    def claims(self, audience: str, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        base = {
            "iss": self.issuer,
            "sub": "minted-user",
            "aud": audience,
            "iat": now,
            "exp": now + 300,
            "tenant": "acme",
            "groups": ["qf-operators"],
        }
        base.update(overrides)
        return {k: v for k, v in base.items() if v is not None}

    def mint(self, claims: dict[str, Any], kid: str, alg: str | None = None) -> str:
        key_alg, private = self.keys[kid]
        return jwt.encode(claims, private, algorithm=alg or key_alg, headers={"kid": kid})
