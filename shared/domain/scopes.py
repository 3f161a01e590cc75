"""What a tenant JWT's `scope` claim grants.

The vocabulary has two scopes: `read` (the tenant's resources, to see) and `write` (to change them
too; it includes read). A claim is a string of space-separated scopes (RFC 8693, RFC 9068) or a
list of strings. A token without the claim is read-write, as upstream's tokens are. A claim that
is neither, that grants nothing, or that names any scope outside the vocabulary (`read:jobs`,
`openid`, `admin`) is refused: a scope the server does not know never falls back to write.
"""

from __future__ import annotations

from collections.abc import Mapping

READ = "read"
WRITE = "write"
SCOPES = frozenset({READ, WRITE})


def scope_read_only(claims: Mapping[str, object]) -> bool | None:
    """True for a read-only token, False for a read-write one, None for one to refuse (401)."""
    if "scope" not in claims:
        return False
    claim = claims["scope"]
    if isinstance(claim, str):
        scopes = set(claim.split())
    elif isinstance(claim, list) and all(isinstance(s, str) for s in claim):
        scopes = set(claim)
    else:
        return None
    if not scopes or not scopes <= SCOPES:
        return None
    return WRITE not in scopes
