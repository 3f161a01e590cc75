"""Flow control: a tenant's policies for limit keys (docs/limits.md). Nothing here does I/O.

A job names up to four keys in its config (`limits`); a policy caps how many jobs of a key run at
once and how many may start per window. A policy key ending in `*` applies to every key with that
prefix that has no policy of its own (the longest such prefix wins). Keys without any policy are
unlimited. The claim enforces the policies, in the statement that leases (the db layer).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import Meta, Struct

from shared.domain.errors import ValidationFailed
from shared.domain.jobs import check_limit_keys

MAX_CONCURRENCY = 100_000
MAX_RATE_COUNT = 1_000_000
MIN_RATE_SECS, MAX_RATE_SECS = 0.001, 86_400.0

Concurrency = Annotated[int, Meta(ge=1, le=MAX_CONCURRENCY)]
RateCount = Annotated[int, Meta(ge=1, le=MAX_RATE_COUNT)]
RateSecs = Annotated[float, Meta(ge=MIN_RATE_SECS, le=MAX_RATE_SECS)]

WILDCARD = "*"


class Rate(Struct, frozen=True, forbid_unknown_fields=True):
    """At most `count` starts in any `per_secs` seconds."""

    count: RateCount
    per_secs: RateSecs


class LimitPolicy(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A stored policy with its live figures: `running`, the jobs of the key (for a wildcard, of
    every key it governs) holding a slot now; `rate_available`, how many more may start now (an
    exact key with a rate only)."""

    key: str
    concurrency: int | None
    rate: Rate | None
    running: int
    created_at: datetime
    updated_at: datetime
    rate_available: int | None = None


def check_policy_key(key: str) -> str:
    """A policy's key follows the job keys' rule; a trailing `*` makes it a wildcard."""
    try:
        check_limit_keys((key,))
    except ValueError as err:
        raise ValidationFailed(str(err)) from None
    if key == WILDCARD:
        raise ValidationFailed("a wildcard needs a prefix: `customer:*`, not `*`")
    return key


def check_policy(concurrency: int | None, rate: Rate | None) -> None:
    if concurrency is None and rate is None:
        raise ValidationFailed("a limit needs a concurrency, a rate, or both")


class RepairedKey(Struct, frozen=True):
    """A key whose recorded running count the janitor set right: what was recorded (less its
    releases not yet folded) and how many of its jobs were running."""

    tenant: str
    key: str
    recorded: int
    actual: int


class KeyFigures(Struct, frozen=True):
    """One key's fleet-wide figures for /metrics; `key` None sums the keys past the label bound."""

    tenant: str | None
    key: str | None
    running: int
    throttled: int
