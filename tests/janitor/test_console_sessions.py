"""The janitor's housekeeping prunes the console's single sign-on sessions past their end
(docs/access.md, "The console's session"): in rounds of 10 x --janitor-batch, oldest end first,
never a live session."""

from __future__ import annotations

import hashlib

from tests.support.api import janitor_of
from tests.support.waiting import eventually

INSERT_SESSION = """
INSERT INTO queueflow.console_sessions
    (id_digest, csrf_token, subject, name, tenant_id, role, access_token, renew_at, expires_at)
VALUES ($1, 'csrf', $2, 'Olga Operator', 'acme', 'operator', 'at', now(),
        now() + $3::text::interval)
"""


async def add_session(db, subject: str, ends_in: str) -> None:
    await db.execute(INSERT_SESSION, hashlib.sha256(subject.encode()).digest(), subject, ends_in)


async def subjects(db) -> set[str]:
    return {r["subject"] for r in await db.fetch("SELECT subject FROM queueflow.console_sessions")}


async def test_the_housekeeping_pass_deletes_ended_sessions_and_keeps_live_ones(api, db):
    await add_session(db, "ended-an-hour-ago", "-1 hour")
    await add_session(db, "ended-a-second-ago", "-1 second")
    await add_session(db, "live", "11 hours")
    # The janitor's loop runs its first housekeeping pass as it starts.
    await api(mode="janitor", janitor_interval_secs=0.1)

    async def pruned() -> bool:
        return await subjects(db) == {"live"}

    await eventually(pruned, timeout=15, message="the ended sessions to be pruned")


async def test_a_backlog_of_ended_sessions_goes_in_full_rounds_in_one_pass(api, db):
    for n in range(25):
        await add_session(db, f"ended-{n}", f"-{n + 1} minutes")
    await add_session(db, "live", "1 minute")
    client = await api(mode="api", janitor_batch=1)  # rounds of 10: 10, 10, then 5
    assert await janitor_of(client).prune_console_sessions() == 25
    assert await subjects(db) == {"live"}
    assert await janitor_of(client).prune_console_sessions() == 0
