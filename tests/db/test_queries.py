"""Every named query (shared/db/queries/*.sql) prepares against the migrated schema: a renamed
column or a typo in a rarely-run statement fails here, not in production."""

from __future__ import annotations

import asyncpg

from shared.db.queries import Q


async def test_every_named_query_prepares_against_the_schema(db):
    assert len(Q) > 50  # the loader found them
    failures = {}
    for name, sql in sorted(Q.items()):
        try:
            await db.prepare(sql)
        except asyncpg.PostgresError as err:
            failures[name] = f"{type(err).__name__}: {err}"
    assert failures == {}
