"""Cron schedules: the expressions (parsed by croniter, always evaluated in UTC) and the record.

The 5-field crontab (`minute hour day-of-month month day-of-week`) and the 6- and 7-field forms
with a leading seconds field (and a trailing year) are accepted. The next occurrence is always
strictly later than the reference instant.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from croniter import croniter
from msgspec import Struct

from shared.domain.errors import ValidationFailed
from shared.domain.jobs import Object, PartialJobConfig


def _field(number: str) -> str:
    atom = rf"(\*|{number}(-{number})?)(/[1-9][0-9]?)?"
    return rf"{atom}(,{atom})*"


_MONTHS = "JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC"
_DAYS = "SUN|MON|TUE|WED|THU|FRI|SAT"
_SECOND = _field(r"[1-5]?[0-9]")
# The forms the OpenAPI document promises: 5 fields (or 6 with a leading seconds field) of `*`,
# numbers, ranges, lists and steps, month and weekday names, days of the month up to 28. Every
# expression it matches fires again (tests/unit/test_cron_pattern.py); the server accepts more
# (every expression croniter parses that fires again: `L`, `#`, `?`, days 29-31, a year field).
CRON_PATTERN = (
    rf"^({_SECOND} )?{_SECOND} {_field(r'(1?[0-9]|2[0-3])')} {_field(r'([1-9]|1[0-9]|2[0-8])')}"
    rf" {_field(rf'([1-9]|1[0-2]|{_MONTHS})')} {_field(rf'([0-6]|{_DAYS})')}$"
)


def next_after(expr: str, after: datetime) -> datetime | None:
    """The first occurrence strictly after `after`, or None when the expression has no future."""
    fields = expr.split()
    try:
        it = croniter(" ".join(fields), after.astimezone(UTC), second_at_beginning=len(fields) > 5)
        value = it.get_next(datetime)
    except (ValueError, KeyError, TypeError) as err:  # croniter's errors derive from ValueError
        raise ValidationFailed(f"invalid cron expression '{expr}': {err}") from None
    except StopIteration:
        return None
    return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)


def validate(expr: str) -> None:
    fields = expr.split()
    if len(fields) not in (5, 6, 7):
        raise ValidationFailed(
            f"invalid cron expression '{expr}': expected 5, 6 or 7 fields, got {len(fields)}"
        )
    if next_after(expr, datetime.now(UTC)) is None:
        raise ValidationFailed(f"invalid cron expression '{expr}': it never fires again")


def new_cron_id() -> str:
    return "c_" + uuid.uuid4().hex


class CronSchedule(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A schedule as stored; its JSON is the API's `CronSchedule` (config as given)."""

    id: str
    name: str
    cron_expr: str
    task_name: str
    enabled: bool
    next_run_at: datetime
    created_at: datetime
    payload: Object | None = None
    queue_name: str | None = None
    config: PartialJobConfig | None = None
    last_enqueued_at: datetime | None = None
    tenant_id: str | None = None
