"""The console's single sign-on sessions (docs/access.md, "The console's session").

The browser holds a random session token in an HttpOnly cookie; the server keeps the session
(the provider's tokens, who signed in, the CSRF token) under the token's SHA-256, so neither a
copy of the table nor a log line holds a usable cookie. A session ends for good SESSION_HOURS after
sign-in, or sooner when the provider refuses to renew its access token; its access token is renewed
when a quarter of its life (at most RENEW_MARGIN_SECS) is left.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from msgspec import Struct

# The longest a console session lasts, renewals included: then the operator signs in again.
SESSION_HOURS = 12
# Renew the access token when this much of its life (at most RENEW_MARGIN_SECS) is left.
RENEW_MARGIN_SECS = 60.0
RENEW_MARGIN_FRACTION = 0.25


class ConsoleSession(Struct, frozen=True, kw_only=True):
    id_digest: bytes
    csrf_token: str
    subject: str
    name: str
    tenant_id: str
    role: str
    access_token: str
    renew_at: datetime
    refresh_token: str | None
    id_token: str | None
    expires_at: datetime


def renewal_time(issued: datetime, lifetime_secs: float) -> datetime:
    """When an access token issued at `issued` for `lifetime_secs` is to be renewed: when a quarter
    of its life (at most RENEW_MARGIN_SECS) is left."""
    lifetime = max(lifetime_secs, 0.0)
    margin = min(RENEW_MARGIN_SECS, lifetime * RENEW_MARGIN_FRACTION)
    return issued + timedelta(seconds=lifetime - margin)


def new_session_token() -> str:
    return secrets.token_urlsafe(32)


def session_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
