"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` and `tracestate`
a job or workflow is created with, checked as the recommendation says, and kept with it so that the
worker that leases the job can continue the enqueuer's trace.

Nothing here does I/O or knows OpenTelemetry: shared/tracing.py turns these into spans when the
process exports traces. A malformed `traceparent` is not an error (the recommendation: the receiver
starts a new trace), so `trace_context` answers None for one; a malformed `tracestate` is dropped
on its own, and one without a valid `traceparent` is ignored.
"""

from __future__ import annotations

import re
import uuid

from msgspec import Struct

# version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex; a later version may append
# fields after a "-", which this version neither reads nor passes on.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16
# A tracestate list member: a simple or multi-tenant key, "=", and a value of printable ASCII
# without "," and "=" whose last character is not a space.
_KEY = r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
_MEMBER = re.compile(rf"({_KEY})=([\x20-\x2b\x2d-\x3c\x3e-\x7e]{{0,255}}[\x21-\x2b\x2d-\x3c\x3e-\x7e])")
MAX_TRACESTATE_MEMBERS = 32
# What a receiver must pass on at least; beyond it, long members go first, then the last ones.
MAX_TRACESTATE_CHARS = 512
_LONG_MEMBER = 128


class TraceContext(Struct, frozen=True):
    """A valid `traceparent` (version 00 form) and the `tracestate` that came with it, if any."""

    traceparent: str
    tracestate: str | None = None

    @property
    def trace_id(self) -> str:
        return self.traceparent[3:35]

    @property
    def parent_id(self) -> str:
        return self.traceparent[36:52]


def parse_traceparent(header: str | None) -> str | None:
    """The `traceparent` in its version 00 form, or None when it is absent or malformed (version
    ff, an all-zero id, uppercase hex, a version 00 header with trailing data)."""
    if not header:
        return None
    text = header.strip(" \t")
    found = _TRACEPARENT.fullmatch(text)
    if found is None:
        return None
    version, trace_id, parent_id, flags, rest = found.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return None
    if version == "00" and rest is not None:
        return None
    return f"00-{trace_id}-{parent_id}-{flags}"


def parse_tracestate(header: str | None) -> str | None:
    """The `tracestate` list (members comma separated, empty ones dropped), or None when it is
    absent, empty or malformed (a bad member, a key twice, more than 32 members). Past 512
    characters, members longer than 128 go first, then members from the end."""
    if not header:
        return None
    members: list[str] = []
    keys: set[str] = set()
    for raw in header.split(","):
        item = raw.strip(" \t")
        if not item:
            continue
        found = _MEMBER.fullmatch(item)
        if found is None or found.group(1) in keys:
            return None
        keys.add(found.group(1))
        members.append(item)
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    if _joined_length(members) > MAX_TRACESTATE_CHARS:
        members = [m for m in members if len(m) <= _LONG_MEMBER]
        while members and _joined_length(members) > MAX_TRACESTATE_CHARS:
            members.pop()
    return ",".join(members) or None


def _joined_length(members: list[str]) -> int:
    return sum(map(len, members)) + len(members) - 1


def trace_context(traceparent: str | None, tracestate: str | None = None) -> TraceContext | None:
    """The trace context of a request's headers, or None (a `tracestate` alone counts for nothing)."""
    parent = parse_traceparent(traceparent)
    if parent is None:
        return None
    return TraceContext(parent, parse_tracestate(tracestate))


class Settled(Struct, frozen=True, kw_only=True):
    """A job's outcome as written (completed, retrying, failed), with what a span of it names:
    read back by the outcome's own statement when the process exports traces."""

    job_id: uuid.UUID
    queue: str
    task_name: str
    status: str
    attempt: int
    tenant: str | None = None
    workflow_id: str | None = None
    trace: TraceContext | None = None
