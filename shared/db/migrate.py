"""Forward-only SQL migrations, applied in file-name order under an advisory lock."""

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

    Concurrent callers serialise on a session advisory lock, so several processes starting at once
    apply each file exactly once. (`through` is for devkit/schema.py, which reads the schema after
    each version to say which migration last changed each object of shared/db/schema.sql.)
    """
    conn = await asyncpg.connect(dsn_or_conn) if isinstance(dsn_or_conn, str) else dsn_or_conn
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        try:
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
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO queueflow.schema_migrations (version) VALUES ($1)", version
                    )
                applied.append(version)
            return applied
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    finally:
        if isinstance(dsn_or_conn, str):
            await conn.close()
