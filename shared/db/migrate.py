"""Forward-only SQL migrations, applied in file-name order in one transaction, under a
transaction-scoped advisory lock.

Concurrent callers (several processes starting at once) serialise on that lock: the first applies
every file not yet recorded, and the others then find them recorded and apply nothing. The lock
ends with its transaction, so the migrations run through a transaction pooler too (which lends
each transaction whichever server connection is free): a session lock would stay behind on one of
its server connections, held by no one, and the next process to start would wait for it forever.
One transaction for all the files also means a failing file leaves the schema as it was.
"""

from __future__ import annotations

from importlib import resources

import asyncpg

# Any constant works; it only has to be the same in every QueueFlow process.
_LOCK_KEY = 0x5146_4D49_4752  # "QFMIGR"


def migration_files() -> list[tuple[str, str]]:
    """(version, sql) for every file in shared/db/migrations, sorted by name."""
    folder = resources.files("shared.db") / "migrations"
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return [(f.name.removesuffix(".sql"), f.read_text(encoding="utf-8")) for f in files]


async def apply_migrations(dsn_or_conn: str | asyncpg.Connection, through: str | None = None) -> list[str]:
    """Apply every migration not yet recorded (with `through`, only those up to that version);
    returns the versions applied now.

    (`through` is for devkit/schema.py, which reads the schema after each version to say which
    migration last changed each object of shared/db/schema.sql.)
    """
    # No statement cache: a named statement would not outlive its transaction through a pooler.
    conn = (
        await asyncpg.connect(dsn_or_conn, statement_cache_size=0)
        if isinstance(dsn_or_conn, str)
        else dsn_or_conn
    )
    try:
        async with conn.transaction():
            await conn.execute(f"SELECT pg_advisory_xact_lock({_LOCK_KEY})")
            await conn.execute(
                "CREATE SCHEMA IF NOT EXISTS queueflow;"
                " CREATE TABLE IF NOT EXISTS queueflow.schema_migrations ("
                " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM queueflow.schema_migrations")}
            applied = []
            for version, sql in migration_files():
                if through is not None and version > through:
                    break
                if version in done:
                    continue
                await conn.execute(sql)
                await conn.execute("INSERT INTO queueflow.schema_migrations (version) VALUES ($1)", version)
                applied.append(version)
            return applied
    finally:
        if isinstance(dsn_or_conn, str):
            await conn.close()
