"""The CLI's HTTP client: one small wrapper over aiohttp that sends the bearer token, encodes JSON,
and turns an error answer into a ClientError carrying the server's error body."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp


class ClientError(Exception):
    """The server answered with an error, or could not be reached; the message says which."""


class Client:
    def __init__(self, server_url: str, token: str, timeout_secs: float = 60.0) -> None:
        self.base = server_url.rstrip("/")
        self.token = token
        self.timeout = aiohttp.ClientTimeout(total=timeout_secs)

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """The decoded JSON answer (None for an empty one)."""
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        sent = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        try:
            async with (
                aiohttp.ClientSession(timeout=self.timeout) as session,
                session.request(method, self.base + path, json=body, params=params, headers=sent) as resp,
            ):
                raw = await resp.read()
                if resp.status >= 400:
                    raise ClientError(f"HTTP {resp.status}: {raw.decode(errors='replace')}")
        except (aiohttp.ClientError, TimeoutError) as err:
            raise ClientError(f"cannot reach {self.base}: {str(err) or type(err).__name__}") from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise ClientError(f"HTTP {resp.status} from {self.base} is not JSON: {raw[:200]!r}") from None
