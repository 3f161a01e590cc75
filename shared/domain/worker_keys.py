"""Worker keys: credentials a tenant mints for its own workers, instead of handing them the one
global worker token that leases every tenant's jobs.

A key opens the worker routes for its tenant's jobs only, and only on its queues when it names some.
Its token is random, shown once (in the answer that minted it) and stored only as a SHA-256 digest.
Tokens carry the `qfwk_` prefix, so that a server asks the database only about tokens that can be
keys: an ordinary wrong token never costs a query.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from msgspec import Struct

from shared.domain.errors import Forbidden, ValidationFailed
from shared.domain.jobs import check_queue_name, instant

TOKEN_PREFIX = "qfwk_"
MAX_KEY_QUEUES = 100


class WorkerKey(Struct, frozen=True, kw_only=True):
    """A key as a tenant sees it (never its token): `queues` None is every queue, `expires_at`
    None never expires. Both are always present in its JSON, as null when absent."""

    id: uuid.UUID
    name: str
    queues: list[str] | None
    created_at: datetime
    expires_at: datetime | None


class NewWorkerKey(Struct, frozen=True, kw_only=True):
    """A key to mint, its rules checked (`new_worker_key`)."""

    name: str
    queues: list[str] | None
    expires_at: datetime | None


def new_worker_key(
    name: str, queues: list[str] | None, expires_at: datetime | None, now: datetime
) -> NewWorkerKey:
    """A key's name says something, its queues are queue names (duplicates dropped, order kept; an
    empty list would open nothing, so it is refused), and it expires in the future if at all."""
    if not name.strip():
        raise ValidationFailed("name is required")
    if queues is not None:
        if not queues:
            raise ValidationFailed("queues must name at least one queue, or be null for every queue")
        queues = list(dict.fromkeys(check_queue_name(q) for q in queues))
    expires_at = instant("expires_at", expires_at)
    if expires_at is not None and expires_at <= now:
        raise ValidationFailed("expires_at must be in the future")
    return NewWorkerKey(name=name, queues=queues, expires_at=expires_at)


def new_token() -> str:
    """A fresh token: the prefix and 256 random bits."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def may_be_key(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX)


def token_digest(token: str) -> bytes:
    """What is stored and looked up: a high-entropy token needs no salt or slow hash."""
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True, slots=True)
class WorkerGrant:
    """What a presented worker key allows: its tenant's jobs, on `queues` (None: every queue),
    until `expires_at`."""

    key_id: uuid.UUID
    tenant: str
    queues: frozenset[str] | None
    expires_at: datetime | None

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def check_queue(self, queue: str) -> None:
        if self.queues is not None and queue not in self.queues:
            raise Forbidden(f"access denied: this worker key does not cover queue {queue!r}")
