"""The SSRF defence's network half (docs/push.md, "What a delivery may reach"): resolve an
endpoint's host and judge every address it resolved to (shared/domain/push.py's rules), when the
endpoint is created and again at every connection a pusher opens. The pusher's connections resolve
through `GuardedResolver`, so the addresses judged are the very addresses connected to: a name
that resolved to a public address when it was checked and to a private one a moment later (DNS
rebinding) is refused at the connection."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from shared.domain.errors import ValidationFailed
from shared.domain.push import Address, Network, check_resolved, ip_literal, refusal

# How long the api waits for a name to resolve when an endpoint is created: past it, the URL is
# judged at its deliveries only.
CREATE_RESOLVE_SECS = 2.0


class RefusedAddress(OSError):
    """A delivery's host is, or resolves to, an address deliveries may not reach."""


async def judge_at_creation(url: str, allowed: Sequence[Network]) -> None:
    """Refuse (400) an endpoint URL whose host resolves now to a refused address; a name that does
    not resolve now is left to the deliveries (which refuse it, not retryably, should it resolve to
    such an address then). An IP literal was judged with the URL's other rules."""
    host = urlsplit(url).hostname or ""
    if ip_literal(host) is not None:
        return
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(CREATE_RESOLVE_SECS):
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError):
        return
    check_resolved(host, [_address(str(info[4][0])) for info in infos], allowed)


def _address(text: str) -> Address:
    found = ip_literal(text)
    assert found is not None, text
    return found


def check_literal(host: str, allowed: Sequence[Network]) -> None:
    """aiohttp connects to an IP literal without resolving it: such a host is judged here, before
    each delivery (an endpoint created while the allow list was wider may name one)."""
    literal = ip_literal(host)
    if literal is not None:
        why = refusal(literal, allowed)
        if why is not None:
            raise RefusedAddress(f"{host} is {why}")


class GuardedResolver(AbstractResolver):
    """The system resolver, with every answer judged: one refused address refuses the host."""

    def __init__(self, allowed: Sequence[Network]) -> None:
        self._allowed = tuple(allowed)
        self._inner = ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        try:
            check_resolved(host, [_address(item["host"]) for item in found], self._allowed)
        except ValidationFailed as refused:
            raise RefusedAddress(refused.message.removeprefix("validation error: ")) from None
        return found

    async def close(self) -> None:
        await self._inner.close()
