"""Paging of tenant listings: what a caller asks for, what a page holds, and the keyset cursor.

Pages are ordered by (created_at, id), newest first unless asked otherwise, and continued by an
opaque cursor "<created_at as unix microseconds>:<id>" (API-NOTES section 1.1).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Generic, Literal, TypeVar

from msgspec import Struct

from shared.domain.errors import ValidationFailed

T = TypeVar("T")
IdKind = Literal["uuid", "bigint", "text"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
# The deepest offset taken: the database reads and drops every row before it, so deep pages cost
# more the deeper they go. The keyset cursor costs the same on every page.
MAX_OFFSET = 10_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# `id_contains` of the job listing: a piece of a job id, whose canonical text is 36 characters.
ID_FRAGMENT_PATTERN = "^[0-9a-fA-F-]{0,36}$"
ID_DIGITS = 32


class Cursor(Struct, frozen=True):
    created_at: datetime
    id: str

    def encode(self) -> str:
        micros = (self.created_at - _EPOCH) // timedelta(microseconds=1)
        return f"{micros}:{self.id}"

    @classmethod
    def decode(cls, raw: str) -> Cursor:
        micros, sep, row_id = raw.partition(":")
        try:
            if not sep or not row_id:
                raise ValueError
            at = _EPOCH + timedelta(microseconds=int(micros))
            if not 1 < at.year < 9999:
                raise ValueError
        except (ValueError, OverflowError):
            raise ValidationFailed("invalid cursor") from None
        return cls(at, row_id)

    def check_id(self, kind: IdKind) -> None:
        """A cursor whose id cannot be of the listed table's id type is invalid (400)."""
        try:
            if kind == "uuid":
                uuid.UUID(self.id)
            elif kind == "bigint" and not -(2**63) <= int(self.id) < 2**63:
                raise ValueError
        except ValueError:
            raise ValidationFailed("invalid cursor") from None


def checked_offset(offset: int) -> int:
    """An offset as asked (negative is 0, as upstream clamps it); past MAX_OFFSET a ValidationFailed
    that points to the cursor."""
    if offset > MAX_OFFSET:
        raise ValidationFailed(
            f"offset cannot exceed {MAX_OFFSET}: page on with the cursor parameter instead"
            " (each page's next_cursor), which costs the same at any depth"
        )
    return max(0, offset)


class PageRequest(Struct, frozen=True, kw_only=True):
    limit: int = DEFAULT_LIMIT
    offset: int = 0  # ignored with a cursor
    ascending: bool = False
    include_total: bool = False
    cursor: Cursor | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


def id_fragment(raw: str) -> str | None:
    """The hex digits, lowercased, of an `id_contains` (a piece of a job id as written, dashes
    and case ignored), or None when it has none (no filter). Anything else is a 400."""
    if re.fullmatch(ID_FRAGMENT_PATTERN, raw) is None:
        raise ValidationFailed("id_contains must be a piece of a job id: up to 36 hex digits and dashes")
    return raw.replace("-", "").lower() or None


class ListQuery(Struct, frozen=True, kw_only=True):
    """A page of one of a tenant's listings, and its filters (None matches all; a listing uses the
    filters that apply to it): exact values, and `id_digits`, hex digits the id must contain."""

    page: PageRequest = PageRequest()
    status: str | None = None
    queue: str | None = None
    task_name: str | None = None
    replayed: bool | None = None
    id_digits: str | None = None


class Page(Struct, Generic[T], frozen=True, kw_only=True):
    items: Sequence[T]
    has_more: bool
    total: int | None = None
    next_cursor: str | None = None
