"""A `queueflow serve` started before its database, run for real: it waits, warning without a
traceback, and serves once the database answers; a database that answers and refuses (here, an
unknown database) stops it at once with exit 2 and one line that says so, without the password."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import pytest

from devkit.ports import free_port
from devkit.procs import ServiceProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": "Bearer dev"}
WAITING = '"database_unreachable_at_start"'


def with_netloc(url: str, netloc: str, path: str | None = None) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=netloc, path=parts.path if path is None else path))


@contextlib.asynccontextmanager
async def forwarder(port: int, to_host: str, to_port: int) -> AsyncIterator[None]:
    """A TCP listener on 127.0.0.1:`port` that pipes each connection to `to_host`:`to_port`: the
    database "coming up" on the address the server was given."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(to_host, to_port)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()


async def test_a_server_started_before_its_database_waits_for_it_and_then_serves(database_url, tmp_path):
    real = urlsplit(database_url)
    port = free_port()
    user = real.netloc.rpartition("@")[0]
    proc = ServiceProcess(
        with_netloc(database_url, f"{user}@127.0.0.1:{port}"), mode="api", log_dir=tmp_path
    ).launch()
    try:
        await eventually(
            lambda: proc.log_text().count(WAITING) >= 2, timeout=30, message="two warnings while it waits"
        )
        assert proc.returncode is None, proc.describe()
        waited = proc.log_text()
        assert f'"database": "127.0.0.1:{port}{real.path}"' in waited
        assert "Connection refused" in waited and "Traceback" not in waited

        async with (
            forwarder(port, real.hostname or "127.0.0.1", real.port or 5432),
            aiohttp.ClientSession() as http,
        ):

            async def ready() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(proc.ready_url) as resp:
                        return resp.status == 200
                return False

            await eventually(ready, timeout=60, message="ready once the database answers")
            async with http.post(
                f"{proc.base_url}/api/v1/jobs", json={"task_name": "t", "payload": {}}, headers=AUTH
            ) as resp:
                assert resp.status == 201, await resp.text()
        assert "Traceback" not in proc.log_text()
    finally:
        await proc.terminate(grace=10)


async def test_a_database_that_refuses_the_server_stops_it_with_one_line(database_url, tmp_path):
    real = urlsplit(database_url)
    user = real.netloc.rpartition("@")[0].partition(":")[0]
    url = with_netloc(
        database_url, f"{user}:a-password-to-keep@{real.hostname}:{real.port}", "/no_such_database"
    )
    proc = ServiceProcess(url, mode="api", log_dir=tmp_path).launch()
    assert await proc.wait(within=60) == 2
    out = proc.log_text()
    assert "Traceback" not in out and WAITING not in out
    assert f"cannot start: the database at {real.hostname}:{real.port}/no_such_database refused" in out
    assert 'database "no_such_database" does not exist' in out
    assert "a-password-to-keep" not in out
