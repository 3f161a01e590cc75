"""The OpenID provider the sign-in tests use: tests/oidc/provider (zitadel/oidc's OpenID provider
with its example login page, configured from a JSON file), built by
deploy/tools/install-oidc-provider.sh into deploy/tools/bin/qf-oidc-provider.

`OidcProvider` runs one such process on a free port, with two clients (the console's public one
and a confidential one) and a few users whose claims carry a tenant and group names; it can rotate
its signing keys and shorten its access tokens' lifetime, and `tokens(user)` goes through the
authorization code flow with PKCE over plain HTTP (the login form posted as a browser would) for
the tests that need a provider token without a browser.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import secrets
import shutil
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devkit.ports import free_port
from devkit.procs import ChildProcess

REPO = Path(__file__).resolve().parents[2]
PUBLIC_CLIENT = "queueflow-console"
CONFIDENTIAL_CLIENT = "queueflow-confidential"
CONFIDENTIAL_SECRET = "confidential-secret-of-the-tests"
CALLBACK_GLOB = "http://127.0.0.1:*/ui/auth/callback"
# What --oidc-role-map says in these tests: the provider's group names to QueueFlow roles.
ROLE_MAP = "qf-viewers=viewer,qf-operators=operator,qf-admins=admin"


@dataclass(frozen=True)
class User:
    id: str
    username: str
    password: str
    first_name: str
    last_name: str
    claims: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"


USERS = {
    "operator": User(
        "u-olga", "olga", "olga-pw", "Olga", "Operator", {"tenant": "acme", "groups": ["qf-operators"]}
    ),
    "viewer": User(
        "u-victor", "victor", "victor-pw", "Victor", "Viewer", {"tenant": "acme", "groups": ["qf-viewers"]}
    ),
    "admin": User(
        "u-ada", "ada", "ada-pw", "Ada", "Admin", {"tenant": "acme", "groups": ["staff", "qf-admins"]}
    ),
    "nobody": User("u-nina", "nina", "nina-pw", "Nina", "Norole", {"tenant": "acme", "groups": ["staff"]}),
    "untenanted": User("u-una", "una", "una-pw", "Una", "Untenanted", {"groups": ["qf-operators"]}),
}


def provider_binary() -> str:
    """$QF_OIDC_PROVIDER, then the repo-local build; skipped (failed in CI) when neither exists."""
    explicit = os.environ.get("QF_OIDC_PROVIDER")
    if explicit:
        return explicit
    local = REPO / "deploy" / "tools" / "bin" / "qf-oidc-provider"
    if local.exists():
        return str(local)
    found = shutil.which("qf-oidc-provider")
    if found:
        return found
    message = (
        "qf-oidc-provider is not built: run `bash deploy/tools/install-oidc-provider.sh`"
        " (go build of tests/oidc/provider, modules from the Go module proxy)"
    )
    if os.environ.get("CI"):
        pytest.fail(message + "; `make tools` must build it before the tests", pytrace=False)
    pytest.skip(message)


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


class OidcProvider:
    def __init__(self, binary: str, log_dir: Path, algorithm: str = "RS256") -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        config = {
            "port": self.port,
            "algorithm": algorithm,
            "access_token_seconds": 300,
            "id_token_seconds": 300,
            "clients": [
                {
                    "id": PUBLIC_CLIENT,
                    "redirect_uris": [CALLBACK_GLOB],
                    "post_logout_redirect_uris": ["http://127.0.0.1:*/ui/**"],
                },
                {
                    "id": CONFIDENTIAL_CLIENT,
                    "secret": CONFIDENTIAL_SECRET,
                    "redirect_uris": [CALLBACK_GLOB],
                    "post_logout_redirect_uris": ["http://127.0.0.1:*/ui/**"],
                },
            ],
            "users": [
                {
                    "id": u.id,
                    "username": u.username,
                    "password": u.password,
                    "first_name": u.first_name,
                    "last_name": u.last_name,
                    "email": f"{u.username}@example.com",
                    "claims": u.claims,
                }
                for u in USERS.values()
            ],
        }
        self.config_path = log_dir / f"oidc-provider-{self.port}.json"
        self.config_path.write_text(json.dumps(config))
        self.process = ChildProcess(
            [binary, str(self.config_path)],
            log_dir / f"oidc-provider-{self.port}.log",
            name="qf-oidc-provider",
        )
        self._http: aiohttp.ClientSession | None = None

    @property
    def http(self) -> aiohttp.ClientSession:
        assert self._http is not None
        return self._http

    async def start(self, within: float = 20.0) -> OidcProvider:
        self.process.launch()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        deadline = time.monotonic() + within
        url = f"{self.issuer}/.well-known/openid-configuration"
        while True:
            if self.process.returncode is not None:
                raise RuntimeError("qf-oidc-provider exited at start\n" + self.process.describe())
            try:
                async with self.http.get(url) as resp:
                    if resp.status == 200:
                        return self
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"qf-oidc-provider did not answer within {within}s\n" + self.process.describe()
                )
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        await self.process.terminate(grace=5.0)

    def server_args(self, client_id: str = PUBLIC_CLIENT, *extra: str) -> list[str]:
        """The serve flags for this provider (the caller adds --public-url)."""
        return [
            "--oidc-issuer",
            self.issuer,
            "--oidc-client-id",
            client_id,
            "--oidc-roles-claim",
            "groups",
            "--oidc-role-map",
            ROLE_MAP,
            # (this provider, like Okta, Entra ID and Dex, gives a refresh token for offline_access only)
            "--oidc-scopes",
            "openid profile email offline_access",
            *extra,
        ]

    async def discovery(self) -> dict[str, Any]:
        async with self.http.get(f"{self.issuer}/.well-known/openid-configuration") as resp:
            return await resp.json()

    async def jwks(self) -> dict[str, Any]:
        async with self.http.get((await self.discovery())["jwks_uri"]) as resp:
            return await resp.json()

    async def rotate(self, algorithm: str = "RS256", retire: bool = False) -> str:
        """A new signing key (retire: the old ones leave the JWKS); its kid."""
        query = {"alg": algorithm, **({"retire": "1"} if retire else {})}
        async with self.http.post(f"{self.issuer}/test/rotate", params=query) as resp:
            assert resp.status == 200, await resp.text()
            return (await resp.json())["kid"]

    async def set_access_token_lifetime(self, seconds: int) -> None:
        async with self.http.post(
            f"{self.issuer}/test/access-token-lifetime", params={"seconds": seconds}
        ) as resp:
            assert resp.status == 204, await resp.text()

    async def tokens(
        self,
        user: User,
        client_id: str = PUBLIC_CLIENT,
        redirect_uri: str = "http://127.0.0.1:1/ui/auth/callback",
        scope: str = "openid profile email",
    ) -> dict[str, Any]:
        """The token endpoint's answer after `user` signs in through the login form."""
        verifier, challenge = pkce()
        meta = await self.discovery()
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect_uri,
            "scope": scope,
            "state": secrets.token_urlsafe(8),
            "nonce": secrets.token_urlsafe(8),
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as browser:
            async with browser.get(
                meta["authorization_endpoint"], params=query, allow_redirects=True
            ) as resp:
                assert resp.status == 200, await resp.text()
                request_id = urllib.parse.parse_qs(resp.url.query_string)["authRequestID"][0]
            form = {"username": user.username, "password": user.password, "id": request_id}
            async with browser.post(
                f"{self.issuer}/login/username", data=form, allow_redirects=False
            ) as resp:
                assert resp.status == 302, await resp.text()
                location = resp.headers["Location"]
            # The provider's own callback step, which then redirects to ours with the code.
            while not location.startswith(redirect_uri):
                async with browser.get(
                    urllib.parse.urljoin(self.issuer, location), allow_redirects=False
                ) as resp:
                    assert resp.status in (302, 303), await resp.text()
                    location = resp.headers["Location"]
            code = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)["code"][0]
            form = {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "client_id": client_id,
                "code_verifier": verifier,
            }
            headers = {}
            if client_id == CONFIDENTIAL_CLIENT:
                pair = base64.b64encode(f"{client_id}:{CONFIDENTIAL_SECRET}".encode()).decode()
                headers["Authorization"] = f"Basic {pair}"
            async with browser.post(meta["token_endpoint"], data=form, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                return await resp.json()
