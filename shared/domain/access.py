"""Who is calling, and what their role lets them do (docs/access.md).

Three roles, each including the one before: `viewer` reads the tenant's resources; `operator` also
acts on its work (enqueues, cancels, retries, replays, pauses and resumes); `admin` also manages
its configuration (worker keys, limits, cron schedules, queue settings, push endpoints) and reads
the audit log. Every tenant route names the least role it needs in the route table
(services/api/routes.py); a caller below it is refused with RoleRequired (403).

A `Principal` is what authentication produces for a tenant route: the tenant, the role, and the
actor the audit log records (a stable, non-secret id; never a credential). Every credential kind
makes one through its own constructor: `for_api_key`, `for_jwt`, `for_dev`, and `from_claims` for
an identity provider's verified claims.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from shared.domain.errors import Forbidden

# Hex digits of a key's SHA-256 that name it in the audit log: enough to tell keys apart, and a
# digest cannot be turned back into the key.
KEY_ID_HEX = 12


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def allows(self, needed: Role) -> bool:
        """Whether this role may do what `needed` may (roles include the ones below them)."""
        return self.rank >= needed.rank

    @classmethod
    def parse(cls, text: str) -> Role | None:
        """The role named `text` (case-insensitive, trimmed); None for any other text."""
        try:
            return cls(text.strip().lower())
        except ValueError:
            return None


_RANK = {Role.VIEWER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}
ROLES = tuple(Role)


class RoleRequired(Forbidden):
    """A valid credential whose role is below the route's (403); the message names both."""

    def __init__(self, needed: Role, held: Role) -> None:
        super().__init__(f"access denied: this needs the {needed} role (the credential's role is {held})")
        self.needed = needed
        self.held = held


def key_id(token: str) -> str:
    """The non-secret id of an API key: the first KEY_ID_HEX hex digits of its SHA-256."""
    return hashlib.sha256(token.encode()).hexdigest()[:KEY_ID_HEX]


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller of a tenant route. `actor` is what the audit log records as who
    (`key:<id>`, `jwt:<sub>`, `oidc:<sub>`, `dev:<id>`), `name` a display name when the credential
    carries one."""

    tenant: str
    role: Role
    actor: str
    name: str | None = None

    @property
    def id(self) -> str:
        """The tenant's id (what every repository call takes)."""
        return self.tenant

    @property
    def read_only(self) -> bool:
        return self.role is Role.VIEWER

    @property
    def access(self) -> Literal["read_write", "read_only"]:
        """Upstream's two levels, for whoami's `access`: a viewer is read-only, the others are not."""
        return "read_only" if self.read_only else "read_write"

    def may(self, needed: Role) -> bool:
        return self.role.allows(needed)

    def require(self, needed: Role) -> None:
        """Raise RoleRequired unless this caller's role is at least `needed`."""
        if not self.role.allows(needed):
            raise RoleRequired(needed, self.role)

    @classmethod
    def for_api_key(cls, token: str, tenant: str, role: Role) -> Principal:
        return cls(tenant, role, f"key:{key_id(token)}")

    @classmethod
    def for_jwt(cls, subject: str, role: Role, name: str | None = None) -> Principal:
        """An HS256 tenant JWT: its `sub` is the tenant (upstream's tokens) and the actor."""
        return cls(subject, role, f"jwt:{subject}", name)

    @classmethod
    def for_dev(cls, token: str, tenant: str) -> Principal:
        """--dev's placeholder tenant: any token is an admin; tokens stay apart in the log."""
        return cls(tenant, Role.ADMIN, f"dev:{key_id(token)}")

    @classmethod
    def from_claims(
        cls, *, subject: str, tenant: str, role: Role, name: str | None = None, kind: str = "oidc"
    ) -> Principal:
        """A caller vouched for by verified claims (an OpenID Connect ID or access token): the
        identity provider's `subject` (its `sub`) becomes the actor `<kind>:<subject>`, `name` the
        display name (e.g. the `name` or `preferred_username` claim), `tenant` and `role` what the
        claim mapping made of the token. The caller verifies the token and maps its claims first;
        this only shapes the result."""
        return cls(tenant, role, f"{kind}:{subject}", name or None)


def role_of_claims(claims: Mapping[str, object], scope_read_only: bool) -> Role | None:
    """The role of an HS256 tenant JWT: its `role` claim when it has one (a string naming a role;
    anything else refuses the token: None), else admin, as upstream's read-write tokens were. A
    `scope` of `read` alone (`scope_read_only`) caps the role at viewer."""
    if "role" in claims:
        claim = claims["role"]
        role = Role.parse(claim) if isinstance(claim, str) else None
        if role is None:
            return None
    else:
        role = Role.ADMIN
    return Role.VIEWER if scope_read_only else role
