"""The console's single sign-on (docs/access.md, "Single sign-on"): the authorization code flow
with PKCE against --oidc-issuer, and a server-side session that rides an HttpOnly cookie.

Routes (public: each checks what it needs itself):
- GET /ui/auth/session: what the console's sign-in offers (`sso`, `token_login`) and, with a live
  session cookie, who is signed in and the session's CSRF token (`session`; null otherwise).
- GET /ui/auth/login?next=#/view: a new sign-in: state, nonce and PKCE verifier in a short-lived
  HttpOnly cookie, then a redirect to the provider's authorization endpoint.
- GET /ui/auth/callback: the provider's redirect back: the state checked against the cookie, the
  code exchanged (with the verifier), the ID token (iss, aud, exp, nbf, nonce) and the access token
  verified, the session stored (migration 0043) and its cookie set, then back to `next`. A
  failure goes back to the sign-in with the reason (`/ui/?signin_error=...`).
- POST /ui/auth/logout (with the CSRF token): the session ends here, and the answer names where
  the browser goes next: the provider's end_session_endpoint (RP-initiated logout, with the ID
  token as hint) when it has one, else the console.

The session middleware: an /api/ request without an Authorization header but with the session
cookie is authorized by the session's access token, as if the console had sent it as a bearer
token (so one path verifies every provider token). A mutating call must carry the session's CSRF
token in X-CSRF-Token (403 otherwise). When the access token nears its end it is renewed with the
refresh token first, under a lock on the session's row (no two replicas spend one refresh token);
a refused renewal ends the session, and the call is 401: the console signs in again.
"""

from __future__ import annotations

import hmac
import urllib.parse
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import msgspec
from aiohttp import web

from services.api.context import AUTH, Handler
from shared.db import console_sessions as sessions
from shared.db.pool import transaction
from shared.domain.console_sessions import (
    SESSION_HOURS,
    ConsoleSession,
    new_session_token,
    renewal_time,
    session_digest,
)
from shared.domain.errors import DomainError, Forbidden, Unauthorized
from shared.runtime.keys import DATABASE, SETTINGS
from shared.web.oidc import Login, OpenIdProvider, TokenSet

CALLBACK_PATH = "/ui/auth/callback"
LOGIN_COOKIE = "qf_login"
LOGIN_COOKIE_SECS = 600
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _now() -> datetime:
    return datetime.now(UTC)


class SignIn:
    """The console's sign-in for one app: the provider, the cookies' names and flags."""

    def __init__(self, app: web.Application, provider: OpenIdProvider) -> None:
        settings = app[SETTINGS]
        assert settings.public_url
        self.app = app
        self.provider = provider
        self.public_url = settings.public_url.rstrip("/")
        self.redirect_uri = self.public_url + CALLBACK_PATH
        self.secure = self.public_url.startswith("https://")
        # __Host-: the browser takes it only with Secure, Path=/ and no Domain (no subdomain can set it).
        self.cookie = "__Host-qf_session" if self.secure else "qf_session"

    @property
    def pool(self) -> Any:
        return self.app[DATABASE].pool

    def _set_cookie(
        self, response: web.StreamResponse, name: str, value: str, max_age: int, path: str
    ) -> None:
        response.set_cookie(
            name, value, max_age=max_age, path=path, secure=self.secure, httponly=True, samesite="Lax"
        )

    def session_token(self, request: web.Request) -> str | None:
        return request.cookies.get(self.cookie) or None

    async def current(self, request: web.Request) -> ConsoleSession | None:
        token = self.session_token(request)
        return None if token is None else await sessions.find(self.pool, session_digest(token))

    # --- sign-in -------------------------------------------------------------------------------

    async def login(self, request: web.Request) -> web.StreamResponse:
        login = Login.new()
        target = await self.provider.authorization_url(login, self.redirect_uri)
        response = _redirect(target)
        value = ".".join(
            (login.state, login.nonce, login.verifier, urllib.parse.quote(_next_of(request), safe=""))
        )
        self._set_cookie(response, LOGIN_COOKIE, value, LOGIN_COOKIE_SECS, "/ui/auth/")
        return response

    def _back_to_sign_in(self, message: str) -> web.StreamResponse:
        response = _redirect("/ui/?" + urllib.parse.urlencode({"signin_error": message}))
        response.del_cookie(LOGIN_COOKIE, path="/ui/auth/")
        return response

    async def callback(self, request: web.Request) -> web.StreamResponse:
        parts = (request.cookies.get(LOGIN_COOKIE) or "").split(".")
        query = request.query
        if len(parts) != 4 or not hmac.compare_digest(parts[0], query.get("state", "")):
            return self._back_to_sign_in("the sign-in expired or was started elsewhere; sign in again")
        if "error" in query:
            detail = query.get("error_description") or query["error"]
            return self._back_to_sign_in(f"the identity provider refused the sign-in: {detail}")
        login = Login(state=parts[0], nonce=parts[1], verifier=parts[2])
        try:
            token = await self._open_session(query.get("code", ""), login)
        except DomainError as error:
            return self._back_to_sign_in(_reason(error))
        response = _redirect("/ui/" + _safe_next(urllib.parse.unquote(parts[3])))
        response.del_cookie(LOGIN_COOKIE, path="/ui/auth/")
        self._set_cookie(response, self.cookie, token, SESSION_HOURS * 3600, "/")
        return response

    async def _open_session(self, code: str, login: Login) -> str:
        """A new session for the code's sign-in; the token of its cookie."""
        if not code:
            raise Unauthorized()
        tokens = await self.provider.exchange_code(code, login, self.redirect_uri)
        if not tokens.id_token:
            raise Unauthorized()
        id_claims = await self.provider.verify_id_token(tokens.id_token, login.nonce)
        identity = await self.provider.identity(tokens.access_token)
        if identity.subject != id_claims.get("sub"):
            raise Unauthorized()
        name = id_claims.get("name") if isinstance(id_claims.get("name"), str) else identity.name
        token = new_session_token()
        now = _now()
        session = ConsoleSession(
            id_digest=session_digest(token),
            csrf_token=new_session_token(),
            subject=identity.subject,
            name=name or identity.name,
            tenant_id=identity.tenant,
            role=identity.role,
            access_token=tokens.access_token,
            renew_at=_renew_at(tokens, now),
            refresh_token=tokens.refresh_token,
            id_token=tokens.id_token,
            expires_at=now + timedelta(hours=SESSION_HOURS),
        )
        await sessions.create(self.pool, session)
        return token

    # --- the session ---------------------------------------------------------------------------

    async def describe(self, request: web.Request) -> web.StreamResponse:
        settings = request.app[SETTINGS]
        session = await self.current(request)
        body: dict[str, Any] = {"sso": True, "token_login": settings.console_token_login, "session": None}
        if session is not None:
            body["session"] = {
                "subject": session.subject,
                "name": session.name,
                "tenant": session.tenant_id,
                "role": session.role,
                "csrf_token": session.csrf_token,
            }
        return web.json_response(body, headers={"Cache-Control": "no-store"})

    async def logout(self, request: web.Request) -> web.StreamResponse:
        token = self.session_token(request)
        session = await self.current(request)
        if session is None or token is None:
            target = "/ui/?signed_out=1"
        else:
            if not hmac.compare_digest(request.headers.get(CSRF_HEADER, ""), session.csrf_token):
                raise Forbidden("access denied: the console's CSRF token is missing or wrong")
            id_token = await sessions.delete(self.pool, session.id_digest)
            back = self.public_url + "/ui/?signed_out=1"
            target = await self.provider.end_session_url(id_token, back) or "/ui/?signed_out=1"
        response = web.json_response({"location": target}, headers={"Cache-Control": "no-store"})
        response.del_cookie(self.cookie, path="/")
        return response

    async def authorize(self, request: web.Request, session: ConsoleSession) -> ConsoleSession:
        """The session, its access token renewed first when it is due; Unauthorized (the session
        ended) when the provider refuses the renewal or there is no refresh token."""
        if request.method not in SAFE_METHODS and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, ""), session.csrf_token
        ):
            raise Forbidden("access denied: the console's CSRF token is missing or wrong")
        if _now() < session.renew_at:
            return session
        refused: DomainError | None = None
        async with transaction(self.pool) as conn:
            current = await sessions.lock(conn, session.id_digest)
            if current is None:
                raise Unauthorized()
            if _now() < current.renew_at:
                return current  # renewed meanwhile, by another call
            try:
                if not current.refresh_token:
                    raise Unauthorized()
                tokens = await self.provider.refresh(current.refresh_token)
                identity = await self.provider.identity(tokens.access_token)
                if identity.subject != current.subject:
                    raise Unauthorized()
            except (Unauthorized, Forbidden):
                # (a user who lost every role is signed out too: the console then says so)
                await sessions.delete(conn, current.id_digest)
                refused = Unauthorized()
            else:
                renewed = msgspec.structs.replace(
                    current,
                    access_token=tokens.access_token,
                    renew_at=_renew_at(tokens, _now()),
                    refresh_token=tokens.refresh_token or current.refresh_token,
                    id_token=tokens.id_token or current.id_token,
                    tenant_id=identity.tenant,
                    role=identity.role,
                )
                await sessions.renew(conn, renewed)
                return renewed
        assert refused is not None
        raise refused

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not request.path.startswith("/api/") or "Authorization" in request.headers:
            return await handler(request)
        token = self.session_token(request)
        if token is None:
            return await handler(request)
        session = await sessions.find(self.pool, session_digest(token))
        if session is None:
            return await handler(request)  # (the guard answers 401: the console signs in again)
        session = await self.authorize(request, session)
        headers = request.headers.copy()
        headers["Authorization"] = f"Bearer {session.access_token}"
        return await handler(request.clone(headers=headers))


def _redirect(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location, "Cache-Control": "no-store"})


def _renew_at(tokens: TokenSet, now: datetime) -> datetime:
    """When to renew these tokens' access token: from `expires_in`, else from its exp and iat."""
    lifetime = tokens.expires_in
    if lifetime is None:
        claims = jwt.decode(tokens.access_token, options={"verify_signature": False})
        lifetime = float(claims.get("exp", 0)) - float(claims.get("iat", now.timestamp()))
    return renewal_time(now, float(lifetime))


def _next_of(request: web.Request) -> str:
    return _safe_next(request.query.get("next", ""))


def _safe_next(raw: str) -> str:
    """Only a console deep link (`#/...`) is a place to go back to: never another page or host."""
    return raw if raw.startswith("#/") and "\n" not in raw and "\r" not in raw else ""


def _reason(error: DomainError) -> str:
    if isinstance(error, Unauthorized):
        return "the identity provider's answer did not pass its checks"
    return error.message


def add_sign_in(app: web.Application) -> None:
    """GET /ui/auth/session always (the console asks it what to offer); with --oidc-issuer, the
    sign-in routes and the session middleware too."""
    provider = app[AUTH].oidc
    if provider is None:

        async def no_sso(request: web.Request) -> web.StreamResponse:
            body = {"sso": False, "token_login": True, "session": None}
            return web.json_response(body, headers={"Cache-Control": "no-store"})

        app.router.add_get("/ui/auth/session", no_sso)
        return
    sign_in = SignIn(app, provider)
    app.router.add_get("/ui/auth/session", sign_in.describe)
    app.router.add_get("/ui/auth/login", sign_in.login)
    app.router.add_get(CALLBACK_PATH, sign_in.callback)
    app.router.add_post("/ui/auth/logout", sign_in.logout)
    app.middlewares.append(sign_in.middleware)

    async def close_provider(app: web.Application) -> None:
        await provider.close()

    app.on_cleanup.append(close_provider)
