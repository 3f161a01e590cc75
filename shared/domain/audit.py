"""The audit log's entries (docs/access.md, "The audit log").

An entry says who (the actor, its display name and its role), what (the action: the route's
operation id; the targets it named; for a bulk action the filter that selected the rows and how
many it changed), and how it went (success, denied, failed, with the HTTP status), with the
request's id and the caller's address. It never holds a request body or a secret: targets are ids
from the path or of what the change made, a filter is the bulk action's selector.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from msgspec import Struct

from shared.domain.access import Principal, Role
from shared.domain.paging import PageRequest

DEFAULT_AUDIT_RETENTION_DAYS = 90.0
# The filter of a bulk action keeps only these kinds of value (what selectors are made of).
_PLAIN = (str, int, float, bool)


class Outcome(StrEnum):
    SUCCESS = "success"
    DENIED = "denied"  # the caller's role is below the route's (403)
    FAILED = "failed"  # any other error answer


class AuditRecord(Struct, kw_only=True):
    """What one mutating request writes. Mutable while the request runs: the change adds the ids
    it made (`targets`) and, for a bulk action, `filter` and `affected`."""

    tenant: str
    actor: str
    role: Role
    action: str
    status: int
    outcome: Outcome = Outcome.SUCCESS
    actor_name: str | None = None
    targets: list[str] = []
    filter: dict[str, Any] | None = None
    affected: int | None = None
    request_id: str | None = None
    source: str | None = None

    @classmethod
    def of(
        cls,
        caller: Principal,
        action: str,
        status: int,
        targets: list[str],
        request_id: str | None,
        source: str | None,
    ) -> AuditRecord:
        return cls(
            tenant=caller.tenant,
            actor=caller.actor,
            actor_name=caller.name,
            role=caller.role,
            action=action,
            status=status,
            targets=targets,
            request_id=request_id,
            source=source,
        )


class AuditEntry(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A stored entry, as GET /api/v1/audit lists it."""

    id: int
    created_at: datetime
    tenant_id: str
    actor: str
    role: str
    action: str
    outcome: str
    status: int
    actor_name: str | None = None
    targets: list[str] = []
    filter: dict[str, Any] | None = None
    affected: int | None = None
    request_id: str | None = None
    source: str | None = None


class AuditQuery(Struct, frozen=True, kw_only=True):
    """GET /api/v1/audit's page and filters (None: no filter); the time range is the page's."""

    page: PageRequest
    actor: str | None = None
    action: str | None = None
    target: str | None = None


def selector(filter_fields: dict[str, Any]) -> dict[str, Any]:
    """A bulk action's filter as the log keeps it: its set fields, each a plain value (instants as
    text, lists of plain values), nothing else."""
    kept: dict[str, Any] = {}
    for name, value in filter_fields.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            kept[name] = value.isoformat()
        elif isinstance(value, _PLAIN):
            kept[name] = value
        elif isinstance(value, list | tuple | set | frozenset) and all(isinstance(v, _PLAIN) for v in value):
            kept[name] = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
    return kept
