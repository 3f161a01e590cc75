"""Cron schedules: the expressions (parsed by croniter) and the record.

The 5-field crontab (`minute hour day-of-month month day-of-week`) and the 6- and 7-field forms
with a leading seconds field (and a trailing year) are accepted. The next occurrence is always
strictly later than the reference instant.

An expression is read in the schedule's time zone (an IANA name; UTC when none is given). croniter
only walks the zone's wall clock, naive, and this module maps each wall-clock match to an instant
itself, so that daylight-saving changes behave as docs/cron.md says whatever croniter's own zone
handling does: a local time that does not exist (clocks jump forward over it) fires once, at the
first instant after the jump; a local time that occurs twice (clocks fall back) fires once, at its
first occurrence.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from croniter import croniter
from msgspec import Struct

from shared.domain.caps import QUOTED_CHARS, clipped
from shared.domain.errors import ValidationFailed
from shared.domain.jobs import Object, PartialJobConfig, utc_text
from shared.domain.workflows import WorkflowDefinition


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


MAX_ZONE_NAME = 64
# The longest expression taken: no crontab needs more. It bounds what is stored and quoted, not
# croniter's search, which is why the API checks a new one in a worker thread (docs/cron.md, "Limits").
MAX_CRON_EXPR = 256
# Wall-clock matches looked at before giving up on finding one later than the reference instant:
# only the second pass of a repeated hour is skipped this way (3,600 for a per-second schedule).
_MAX_SKIPPED = 4000


def zone(name: str | None) -> tzinfo:
    """The time zone named `name` (IANA, e.g. `Europe/Berlin`); UTC for None. An unknown name is a
    ValidationFailed."""
    if name is None:
        return UTC
    if not name or len(name) > MAX_ZONE_NAME:
        raise ValidationFailed(
            f"timezone must be an IANA time zone name such as 'Europe/Berlin', not {name!r}"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationFailed(
            f"unknown timezone {name!r}: expected an IANA time zone name such as 'Europe/Berlin'"
        ) from None


def _first_instant(wall: datetime, tz: tzinfo) -> datetime:
    """The instant a naive wall-clock time of `tz` names: its first occurrence when the clocks fell
    back over it; the moment the clocks jumped when they jumped over it."""
    early = wall.replace(tzinfo=tz, fold=0)
    if early.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall:
        return early.astimezone(UTC)
    # In a gap: fold=1 reads it with the offset after the jump (an instant before it), fold=0 with
    # the offset before (an instant after it). The jump lies between; offsets change on whole seconds.
    lo = int(wall.replace(tzinfo=tz, fold=1).timestamp())
    hi = int(early.timestamp())
    after = datetime.fromtimestamp(hi, tz).utcoffset()  # the offset once the clocks have jumped
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return datetime.fromtimestamp(hi, UTC)


def next_after(expr: str, after: datetime, timezone: str | None = None) -> datetime | None:
    """The first occurrence strictly after `after` (in UTC), reading `expr` in `timezone`, or None
    when the expression has no future."""
    fields = expr.split()
    tz = zone(timezone)
    start = after.astimezone(tz).replace(tzinfo=None)  # the zone's wall clock, naive
    try:
        it = croniter(" ".join(fields), start, second_at_beginning=len(fields) > 5)
        for _ in range(_MAX_SKIPPED):
            wall = it.get_next(datetime)
            instant = _first_instant(wall, tz)
            if instant > after:
                return instant
            # The wall clock repeats (the second pass of an hour the clocks fell back over): its
            # matches were fired on the first pass, so walk on to the first one after `after`.
    except (ValueError, KeyError, TypeError) as err:  # croniter's errors derive from ValueError
        raise ValidationFailed(f"invalid cron expression {_shown(expr)}: {clipped(str(err))}") from None
    except StopIteration:
        return None
    return None


def local_time(instant: datetime, timezone: str) -> str:
    """`instant` as RFC 3339 in `timezone`, with its offset (what the CLI and console show)."""
    return instant.astimezone(zone(timezone)).isoformat()


def _shown(expr: str) -> str:
    """The expression as an error quotes it: whole when short, else its beginning."""
    if len(expr) <= QUOTED_CHARS:
        return f"'{expr}'"
    return f"'{expr[:QUOTED_CHARS]}...' ({len(expr)} characters)"


def validate(expr: str) -> None:
    """A ValidationFailed unless `expr` is at most MAX_CRON_EXPR characters of 5, 6 or 7 fields
    that fire again. The search for the next occurrence can take tens of milliseconds (croniter
    gives up on an expression that never fires only after searching years of candidates), so the
    API runs this in a worker thread, off the event loop."""
    if len(expr) > MAX_CRON_EXPR:
        raise ValidationFailed(
            f"invalid cron expression {_shown(expr)}: longer than {MAX_CRON_EXPR} characters"
        )
    fields = expr.split()
    if len(fields) not in (5, 6, 7):
        raise ValidationFailed(
            f"invalid cron expression {_shown(expr)}: expected 5, 6 or 7 fields, got {len(fields)}"
        )
    if next_after(expr, datetime.now(UTC)) is None:
        raise ValidationFailed(f"invalid cron expression {_shown(expr)}: it never fires again")


def new_cron_id() -> str:
    return "c_" + uuid.uuid4().hex


class CronSchedule(Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A schedule as stored; its JSON is the API's `CronSchedule` (config as given)."""

    id: str
    name: str
    cron_expr: str
    enabled: bool
    next_run_at: datetime
    created_at: datetime
    payload: Object | None = None
    queue_name: str | None = None
    config: PartialJobConfig | None = None
    last_enqueued_at: datetime | None = None
    tenant_id: str | None = None
    # Extensions, left out when unused: the zone the expression is read in, and the next firing
    # as that zone's wall clock (RFC 3339 with its offset), which the CLI and the console show.
    timezone: str | None = None
    next_run_local: str | None = None
    # A schedule has a task (as upstream) or, an extension, a workflow each occurrence starts.
    task_name: str | None = None
    workflow: WorkflowDefinition | None = None

    def localized(self) -> CronSchedule:
        """This record with `next_run_local` filled in when it has a time zone."""
        if self.timezone is None:
            return self
        return msgspec.structs.replace(self, next_run_local=local_time(self.next_run_at, self.timezone))


def occurrence_name(schedule_name: str, due: datetime) -> str:
    """The name of the workflow a schedule's occurrence starts: `<schedule name>@<occurrence>`."""
    return f"{schedule_name}@{utc_text(due)}"
