"""The console's single sign-on (docs/access.md): /ui/auth/* and the session cookie."""

from __future__ import annotations

from aiohttp import web

from services.api.context import AUTH


def add_sign_in(app: web.Application) -> None:
    """The sign-in routes and the session middleware, when --oidc-issuer is set."""
    if app[AUTH].oidc is None:
        return

    async def close_provider(app: web.Application) -> None:
        provider = app[AUTH].oidc
        if provider is not None:
            await provider.close()

    app.on_cleanup.append(close_provider)
