"""A small transaction pooler that carries named prepared statements, standing in for PgBouncer
1.21+ with `max_prepared_statements` (Debian 12 ships 1.18, and no registry the project may use
ships a newer build).

What it emulates, and nothing more: each client is lent a server connection from its first message
until the server reports ReadyForQuery outside a transaction, then the connection goes back to the
pool (the most recently released is lent first, as PgBouncer does); and a statement a client
prepares under a name is prepared on each server connection under a name of the pooler's (one per
statement text), on the first connection that lacks it when the client binds or describes it, so
the client's names work on every server connection, as 1.21's tracking does. The pooler answers
the start-up itself (trust: no password), and opens its server connections with the start-up
parameters of the client that needed one. Cancel requests, TLS and LISTEN (notifications go to
whichever client holds the server at the time) are not emulated; nor is anything PgBouncer does
beyond the above.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import struct
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from devkit.ports import free_port

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104
_CANCEL_REQUEST = 80877102


def _message(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _cstring(data: bytes, at: int) -> tuple[bytes, int]:
    end = data.index(b"\0", at)
    return data[at:end], end + 1


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readexactly(5)
    (length,) = struct.unpack("!i", head[1:])
    return head[:1], await reader.readexactly(length - 4)


@dataclass(eq=False)
class _Server:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    parameters: list[bytes]  # its ParameterStatus messages, as the client's start-up answer
    prepared: set[bytes] = field(default_factory=set)  # the pooler's statement names it holds
    # Per Parse sent and not yet answered: whether its ParseComplete goes to the client (False for
    # the pooler's own, injected before a Bind or Describe).
    parses: deque[bool] = field(default_factory=deque)
    broken: bool = False


class TrackingPooler:
    def __init__(self, target_host: str, target_port: int, pool_size: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.pool_size = pool_size
        self.port = free_port()
        self.idle: list[_Server] = []  # LIFO
        self.opened = 0
        self.lent = 0  # how many times a server connection was lent
        # Statements prepared again on a server connection that lacked one a client had prepared
        # elsewhere: what PgBouncer 1.18 would have answered with "does not exist".
        self.carried = 0
        self.clients = 0
        self._waiting: deque[asyncio.Future[_Server]] = deque()  # clients waiting for a connection
        self._server: asyncio.Server | None = None

    def url_for(self, database_url: str) -> str:
        parts = urlsplit(database_url)
        user = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else ""
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for server in self.idle:
            server.writer.close()

    # -- server connections -----------------------------------------------------------------------

    async def _open(self, startup: bytes) -> _Server:
        reader, writer = await asyncio.open_connection(self.target_host, self.target_port)
        writer.write(struct.pack("!i", len(startup) + 4) + startup)
        parameters = []
        while True:
            kind, body = await _read_message(reader)
            if kind == b"E":
                raise ConnectionError(f"the server refused the pooler: {body!r}")
            if kind == b"R" and body[:4] != b"\0\0\0\0":
                raise ConnectionError("the emulated pooler supports trust authentication only")
            if kind == b"S":
                parameters.append(_message(kind, body))
            if kind == b"Z":
                return _Server(reader, writer, parameters)

    async def _lend(self, startup: bytes) -> _Server:
        while self.idle:
            server = self.idle.pop()
            if not server.broken:
                self.lent += 1
                return server
        if self.opened >= self.pool_size:
            waiting: asyncio.Future[_Server] = asyncio.get_running_loop().create_future()
            self._waiting.append(waiting)
            server = await waiting
            self.lent += 1
            return server
        self.opened += 1
        try:
            server = await self._open(startup)
        except BaseException:
            self.opened -= 1
            raise
        self.lent += 1
        return server

    def _give_back(self, server: _Server) -> None:
        """Synchronous, so that nothing the client sends next can reach a connection given back."""
        if server.broken:
            self.opened -= 1
            server.writer.close()
            return
        while self._waiting:
            waiting = self._waiting.popleft()
            if not waiting.done():
                waiting.set_result(server)
                return
        self.idle.append(server)

    # -- clients ----------------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.clients += 1
        try:
            startup = await self._startup(reader, writer)
            if startup is not None:
                await _Session(self, startup, reader, writer).run()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _startup(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
        while True:
            (length,) = struct.unpack("!i", await reader.readexactly(4))
            body = await reader.readexactly(length - 4)
            (code,) = struct.unpack("!i", body[:4])
            if code in (_SSL_REQUEST, _GSS_REQUEST):
                writer.write(b"N")
                continue
            if code == _CANCEL_REQUEST:
                return None
            break
        # The start-up answer takes a server connection's parameters (server_version, encoding...).
        server = await self._lend(body)
        answer = [_message(b"R", struct.pack("!i", 0)), *server.parameters]
        self._give_back(server)
        answer += [_message(b"K", struct.pack("!ii", 0, 0)), _message(b"Z", b"I")]
        writer.write(b"".join(answer))
        await writer.drain()
        return body


class _Session:
    """One client: its statements by its own names, and the server connection it holds, if any."""

    def __init__(
        self,
        pooler: TrackingPooler,
        startup: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.pooler = pooler
        self.startup = startup
        self.reader = reader
        self.writer = writer
        self.statements: dict[bytes, bytes] = {}  # client's name -> the Parse body (after the name)
        self.server: _Server | None = None
        self.relay: asyncio.Task[None] | None = None

    async def run(self) -> None:
        try:
            while True:
                kind, body = await _read_message(self.reader)
                if kind == b"X":
                    return
                server = await self._held()
                server.writer.write(self._translate(server, kind, body))
                await server.writer.drain()
        finally:
            if self.relay is not None:
                self.relay.cancel()
            if self.server is not None:  # gone mid-transaction: that server connection is not reused
                self.server.broken = True
                self._release()

    async def _held(self) -> _Server:
        if self.server is None:
            self.server = await self.pooler._lend(self.startup)
            self.relay = asyncio.create_task(self._relay(self.server))
        return self.server

    def _release(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            self.pooler._give_back(server)

    def _translate(self, server: _Server, kind: bytes, body: bytes) -> bytes:
        if kind == b"P":
            name, rest = _cstring(body, 0)
            if not name:
                server.parses.append(True)
                return _message(kind, body)
            self.statements[name] = body[rest:]
            ours = self._ours(name)
            if ours in server.prepared:  # already there: an unnamed Parse answers ParseComplete
                server.parses.append(True)
                return _message(b"P", b"\0" + body[rest:])
            server.prepared.add(ours)
            server.parses.append(True)
            return _message(b"P", ours + b"\0" + body[rest:])
        if kind == b"B":
            portal, at = _cstring(body, 0)
            name, rest = _cstring(body, at)
            if not name:
                return _message(kind, body)
            before, ours = self._ensure(server, name)
            return before + _message(b"B", portal + b"\0" + ours + b"\0" + body[rest:])
        if kind in (b"D", b"C") and body[:1] == b"S":
            name, _ = _cstring(body, 1)
            if not name:
                return _message(kind, body)
            if kind == b"C":  # the client forgets it; the server connections keep theirs
                self.statements.pop(name, None)
                return _message(b"C", b"S\0")
            before, ours = self._ensure(server, name)
            return before + _message(b"D", b"S" + ours + b"\0")
        return _message(kind, body)

    def _ours(self, name: bytes) -> bytes:
        return b"qfpool_" + hashlib.sha1(self.statements[name]).hexdigest()[:24].encode()

    def _ensure(self, server: _Server, name: bytes) -> tuple[bytes, bytes]:
        """A Parse to send first when `server` lacks the client's statement `name` (its answer is
        swallowed), and the pooler's name for it."""
        if name not in self.statements:  # unknown to the client: let the server say so
            return b"", name
        ours = self._ours(name)
        if ours in server.prepared:
            return b"", ours
        server.prepared.add(ours)
        server.parses.append(False)
        self.pooler.carried += 1
        return _message(b"P", ours + b"\0" + self.statements[name]), ours

    async def _relay(self, server: _Server) -> None:
        """The server's answers to the client, until ReadyForQuery outside a transaction."""
        try:
            while True:
                kind, body = await _read_message(server.reader)
                if kind == b"1" and server.parses and not server.parses.popleft():
                    continue
                if kind == b"Z":
                    server.parses.clear()
                    if body == b"I":  # given back before the client hears it may go on
                        self._release()
                        self.writer.write(_message(kind, body))
                        return
                self.writer.write(_message(kind, body))
        except (asyncio.IncompleteReadError, ConnectionError):
            server.broken = True
            self.writer.close()


@contextlib.asynccontextmanager
async def tracking_pooler(database_url: str, pool_size: int = 10) -> AsyncIterator[TrackingPooler]:
    target = urlsplit(database_url)
    assert target.hostname and target.port
    pooler = TrackingPooler(target.hostname, target.port, pool_size)
    await pooler.start()
    try:
        yield pooler
    finally:
        await pooler.stop()
