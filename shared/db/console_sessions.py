"""The console's sign-in sessions (migration 0043; shared/domain/console_sessions.py)."""

from __future__ import annotations

from shared.db.pool import Executor, record
from shared.db.queries import Q
from shared.domain.console_sessions import ConsoleSession


async def create(db: Executor, session: ConsoleSession) -> None:
    """Store a new session (the janitor prunes the ended ones: `prune_expired`)."""
    await db.execute(
        Q.insert_console_session,
        session.id_digest,
        session.csrf_token,
        session.subject,
        session.name,
        session.tenant_id,
        session.role,
        session.access_token,
        session.renew_at,
        session.refresh_token,
        session.id_token,
        session.expires_at,
    )


async def find(db: Executor, digest: bytes) -> ConsoleSession | None:
    """The live session with this digest; None when there is none or it has ended."""
    row = await db.fetchrow(Q.find_console_session, digest)
    return None if row is None else record(ConsoleSession, row)


async def lock(db: Executor, digest: bytes) -> ConsoleSession | None:
    """`find`, with the row locked until the caller's transaction ends (a renewal)."""
    row = await db.fetchrow(Q.lock_console_session, digest)
    return None if row is None else record(ConsoleSession, row)


async def renew(db: Executor, session: ConsoleSession) -> None:
    """Store a session's renewed tokens (and the tenant and role they now carry)."""
    await db.execute(
        Q.renew_console_session,
        session.id_digest,
        session.access_token,
        session.renew_at,
        session.refresh_token,
        session.id_token,
        session.name,
        session.tenant_id,
        session.role,
    )


async def delete(db: Executor, digest: bytes) -> str | None:
    """End the session; its ID token (for the provider's logout), or None when there was none."""
    row = await db.fetchrow(Q.delete_console_session, digest)
    return None if row is None else row["id_token"]


async def prune_expired(db: Executor, batch: int) -> int:
    """Delete up to `batch` sessions past their end; how many went."""
    status = await db.execute(Q.prune_console_sessions, batch)
    return int(status.split()[-1])
