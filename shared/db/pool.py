"""The asyncpg pool every service uses: jsonb as Python objects via msgspec, UTC sessions."""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec

_encode = msgspec.json.encode
_decode = msgspec.json.decode


def _jsonb_encode(value: Any) -> bytes:
    return b"\x01" + _encode(value)


def _jsonb_decode(data: bytes) -> Any:
    return _decode(data[1:])


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=_jsonb_encode, decoder=_jsonb_decode, format="binary"
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing to reset on release: pool connections never LISTEN, take session advisory locks or
    change settings (the listener and the migrator use connections of their own). asyncpg still
    rolls back a transaction left open; this only skips the reset query's extra round trip."""


async def create_pool(dsn: str, min_size: int = 2, max_size: int = 50) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min(min_size, max_size),
        max_size=max_size,
        init=init_connection,
        server_settings={"application_name": "queueflow", "timezone": "UTC"},
        max_inactive_connection_lifetime=60,  # a burst's extra connections do not linger
        reset=_keep_session,
    )
    assert pool is not None
    return pool
