"""Requests that are not well-formed HTTP, or whose bytes are not what their headers say, sent raw to
a real api process. Each gets a 4xx with the contract's JSON error body (never text/plain quoting
the request back, never a 500), the log gets one line for it and no traceback, and the process
goes on serving."""

from __future__ import annotations

import asyncio
import gzip
import json

import aiohttp
import pytest

DEV = b"Authorization: Bearer dev\r\n"


async def send(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Write `raw` on a fresh connection; read the whole response (the server closes it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    return int(status_line.split()[1]), headers, body


def request(method: str, path: str, headers: bytes = DEV, body: bytes = b"") -> bytes:
    length = b"Content-Length: %d\r\n" % len(body) if body else b""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
        + headers
        + length
        + b"\r\n"
        + body
    )


JOB = b'{"task_name": "echo"}'

CASES: dict[str, tuple[bytes, int, str | tuple[str, ...]]] = {
    # aiohttp's parser refuses these before any application code runs.
    "unsupported Content-Encoding (br)": (
        request("GET", "/api/v1/whoami", DEV + b"Content-Encoding: br\r\n"),
        400,
        "unsupported or corrupt",
    ),
    "request line over 8190 bytes": (
        request("GET", "/api/v1/jobs?q=" + "q" * 9000),
        400,
        "request line or header",
    ),
    "header over 8190 bytes": (
        request("GET", "/api/v1/jobs", DEV + b"X-Big: " + b"b" * 9000 + b"\r\n"),
        400,
        "request line or header",
    ),
    "unknown method": (request("FOO", "/api/v1/jobs"), 400, "malformed HTTP request"),
    "raw non-ASCII in the path": (
        request("GET", "/api/v1/jobs/").replace(b"/jobs/", b"/jobs/\xff\xfe"),
        400,
        "malformed HTTP request",
    ),
    "negative Content-Length": (
        request("POST", "/api/v1/jobs", DEV + b"Content-Length: -1\r\n"),
        400,
        "malformed HTTP request",
    ),
    "Content-Length overflow": (
        request("POST", "/api/v1/jobs", DEV + b"Content-Length: 99999999999999999999\r\n"),
        400,
        "malformed HTTP request",
    ),
    "bad chunk size": (
        request("POST", "/api/v1/jobs", DEV + b"Transfer-Encoding: chunked\r\n") + b"zz\r\n{}\r\n0\r\n\r\n",
        400,
        "malformed HTTP request",
    ),
    "NUL in a header value": (
        request("GET", "/api/v1/jobs", DEV + b"X-A: a\x00b\r\n"),
        400,
        "malformed HTTP request",
    ),
    # These parse, and the application refuses them.
    "gzip header, plain body": (
        request("POST", "/api/v1/jobs", DEV + b"Content-Encoding: gzip\r\n", JOB),
        400,
        "validation error: the body is not valid gzip data",
    ),
    "truncated gzip body": (  # what decompresses is a truncated JSON document
        request("POST", "/api/v1/jobs", DEV + b"Content-Encoding: gzip\r\n", gzip.compress(JOB)[:-12]),
        400,
        "validation error: malformed JSON",
    ),
    # aiohttp may find this one before the application reads the body, or the application may.
    "deflate header, plain body on lease": (
        request(
            "POST", "/api/v1/queues/q/lease", DEV + b"Content-Encoding: deflate\r\n", b'{"wait_secs": 0}'
        ),
        400,
        ("validation error: the body is not valid deflate data", "unsupported or corrupt Content-Encoding"),
    ),
    "non-UTF-8 bearer token": (
        request("GET", "/api/v1/whoami", b"Authorization: Bearer \xff\xfe\r\n"),
        401,
        "unauthorized",
    ),
    "non-UTF-8 bearer token on a worker route": (
        request("POST", "/api/v1/queues/q/lease", b"Authorization: Bearer \xff\r\n", b"{}"),
        401,
        "unauthorized",
    ),
    "non-UTF-8 Idempotency-Key": (
        request("POST", "/api/v1/jobs", DEV + b"Idempotency-Key: \xff\r\n", JOB),
        400,
        "validation error: Idempotency-Key must be printable UTF-8 text",
    ),
}


@pytest.fixture
async def dev_api(database_url, service):
    return await service(database_url, mode="api")


@pytest.mark.parametrize("case", CASES)
async def test_malformed_request_gets_the_json_error_body(dev_api, case):
    raw, status, prefix = CASES[case]
    got, headers, body = await send(dev_api.api_port, raw)
    assert got == status, body
    assert headers["content-type"].startswith("application/json"), headers
    error = json.loads(body)
    assert set(error) == {"error", "timestamp"} and error["error"].startswith(prefix), error

    # The process is unharmed, and logged no traceback for it.
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{dev_api.base_url}/api/v1/whoami", headers={"Authorization": "Bearer dev"}) as resp,
    ):
        assert resp.status == 200
    assert "Traceback" not in dev_api.log_text()
