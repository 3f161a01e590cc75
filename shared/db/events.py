"""Events (POST /api/v1/events) and the steps that wait for them: one tenant's key is serialised
by a transaction-scoped advisory lock, which both an event and a step that starts waiting take
first, so whichever commits second sees the other and no signal is lost between it and its wait."""

from __future__ import annotations

import uuid

from shared.db import audit
from shared.db.pool import Connection, Executor, Pool, record
from shared.db.queries import Q
from shared.domain.events import Event
from shared.domain.jobs import Object


async def post_event(
    pool: Pool, tenant: str, key: str, payload: Object, retention_secs: float
) -> tuple[uuid.UUID, int]:
    """Keep the event and hand it to every step of the tenant waiting for its key (each step stops
    waiting here; the advancer completes it with the payload). Returns its id and that number."""
    event_id = uuid.uuid4()
    async with audit.change(pool, atomic=True) as conn:
        audit.made(event_id)
        await conn.execute(Q.lock_event_key, tenant, key)
        await conn.fetchrow(Q.insert_event, event_id, tenant, key, payload, retention_secs)
        delivered = await conn.fetchval(Q.deliver_event, tenant, key, payload, event_id)
    return event_id, int(delivered or 0)


async def latest_kept_event(conn: Connection, tenant: str, key: str) -> Object | None:
    """For a step that starts waiting (under its workflow's lock, in the advancer's transaction):
    the payload of the key's newest kept event, or None (the step then waits). Takes the key's
    lock, so an event committed concurrently is seen either here or by its own delivery."""
    await conn.execute(Q.lock_event_key, tenant, key)
    row = await conn.fetchrow(Q.kept_event, tenant, key)
    return None if row is None else dict(row["payload"])


async def list_events(db: Executor, tenant: str, key: str | None, limit: int) -> list[Event]:
    rows = await db.fetch(Q.list_events, tenant, key, limit)
    return [record(Event, r) for r in rows]


async def prune_expired(db: Executor, batch: int) -> int:
    status = await db.execute(Q.prune_expired_events, batch)
    return int(status.split()[-1])
