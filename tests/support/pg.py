"""The PostgreSQL server the tests use, and the admin statements that manage their databases."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from shared.pgembed import EmbeddedPostgres


def with_database(dsn: str, dbname: str) -> str:
    """`dsn` pointing at database `dbname` instead (user, host, port and query kept)."""
    return urlunsplit(urlsplit(dsn)._replace(path=f"/{dbname}"))


@dataclass(frozen=True)
class PgServer:
    """A server the tests may create and drop databases on.

    `dsn` is an admin connection (a superuser, or a role with CREATEDB); `embedded` is the cluster
    the session started, or None for a server named by QUEUEFLOW_TEST_DATABASE_URL.
    """

    dsn: str
    embedded: EmbeddedPostgres | None = None

    def dsn_for(self, dbname: str) -> str:
        return with_database(self.dsn, dbname)

    async def execute(self, sql: str) -> None:
        """Run one admin statement (CREATE/DROP DATABASE cannot run inside a transaction)."""
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    async def create_database(self, name: str, template: str | None = None) -> str:
        clause = f' TEMPLATE "{template}"' if template else ""
        await self.execute(f'CREATE DATABASE "{name}"{clause}')
        return self.dsn_for(name)

    async def drop_database(self, name: str) -> None:
        # FORCE ends sessions a test (or a process it started) left open.
        await self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
