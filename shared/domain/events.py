"""Events that workflow steps wait for (issue 15): a tenant posts `{key, payload}`; every step of
that tenant waiting for the key completes with the payload as its result, and the event is kept
for the retention so that a step that starts waiting later still receives it."""

from __future__ import annotations

import uuid
from datetime import datetime

from msgspec import Struct

from shared.domain.jobs import Object


class Event(Struct, frozen=True, kw_only=True):
    """A kept event, as `GET /api/v1/events` lists it; `delivered` is how many waiting steps it
    completed when it arrived."""

    event_id: uuid.UUID
    key: str
    payload: Object
    delivered: int
    created_at: datetime
    expires_at: datetime
