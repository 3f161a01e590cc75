"""A real Toxiproxy server (deploy/tools/install-toxiproxy.sh builds it) and a small client of its
HTTP API: proxies that forward a local port to an upstream, and toxics that hurt the traffic.

The API (https://github.com/Shopify/toxiproxy#http-api): `POST /proxies` creates a proxy,
`POST /proxies/{name}` updates it (`enabled: false` closes its listener and every connection through
it: a partition), `POST /proxies/{name}/toxics` adds a toxic to one direction (`stream`:
`downstream` is what the upstream answers, `upstream` what the client sends), and
`DELETE /proxies/{name}/toxics/{toxic}` removes it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devkit.ports import free_port
from devkit.procs import ChildProcess

REPO = Path(__file__).resolve().parents[2]
TOXIPROXY_VERSION = "2.12.0"  # keep in step with deploy/tools/install-toxiproxy.sh


def find_toxiproxy() -> str | None:
    """$TOXIPROXY_SERVER, then the repo-local install, then PATH."""
    explicit = os.environ.get("TOXIPROXY_SERVER")
    if explicit:
        return explicit
    local = REPO / "deploy" / "tools" / "bin" / "toxiproxy-server"
    if local.exists():
        return str(local)
    return shutil.which("toxiproxy-server")


def toxiproxy_or_skip() -> str:
    found = find_toxiproxy()
    if found is None:
        message = (
            "toxiproxy-server is not installed: run `bash deploy/tools/install-toxiproxy.sh` "
            "(go install of github.com/Shopify/toxiproxy/v2, under a minute cold)"
        )
        if os.environ.get("CI"):
            pytest.fail(message + "; `make tools` must install it before the tests", pytrace=False)
        pytest.skip(message)
    return found


class Toxiproxy:
    """One toxiproxy-server child on a free port, and its HTTP API."""

    def __init__(self, binary: str, log_dir: Path) -> None:
        self.port = free_port()
        self.process = ChildProcess(
            [binary, "-host", "127.0.0.1", "-port", str(self.port)],
            log_dir / f"toxiproxy-{self.port}.log",
            name="toxiproxy-server",
        )
        self._http: aiohttp.ClientSession | None = None

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, within: float = 20.0) -> Toxiproxy:
        self.process.launch()
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        deadline = time.monotonic() + within
        while True:
            if self.process.returncode is not None:
                raise RuntimeError("toxiproxy-server exited at start\n" + self.process.describe())
            try:
                async with self._http.get(f"{self.api}/version") as resp:
                    if resp.status == 200:
                        version = (await resp.text()).strip()
                        assert TOXIPROXY_VERSION in version, (
                            f"toxiproxy-server {version}, want {TOXIPROXY_VERSION}"
                        )
                        return self
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("toxiproxy-server did not answer\n" + self.process.describe())
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self.process.started:
            await self.process.terminate(grace=5.0)

    async def _call(self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200,)) -> Any:
        assert self._http is not None
        async with self._http.request(method, f"{self.api}{path}", json=body) as resp:
            text = await resp.text()
            assert resp.status in expect, f"toxiproxy {method} {path} -> {resp.status}: {text}"
            return await resp.json() if text and resp.content_type == "application/json" else None

    async def create_proxy(self, name: str, upstream: str) -> Proxy:
        """A proxy from a free local port to `upstream` (host:port)."""
        listen = f"127.0.0.1:{free_port()}"
        await self._call(
            "POST",
            "/proxies",
            {"name": name, "listen": listen, "upstream": upstream, "enabled": True},
            (201,),
        )
        return Proxy(self, name, listen)


class Proxy:
    """One proxy of a Toxiproxy server: where clients connect, and its faults."""

    def __init__(self, server: Toxiproxy, name: str, listen: str) -> None:
        self.server = server
        self.name = name
        self.listen = listen

    @property
    def base_url(self) -> str:
        return f"http://{self.listen}"

    async def add_toxic(
        self, name: str, kind: str, stream: str, attributes: dict[str, Any], toxicity: float = 1.0
    ) -> None:
        body = {"name": name, "type": kind, "stream": stream, "toxicity": toxicity, "attributes": attributes}
        await self.server._call("POST", f"/proxies/{self.name}/toxics", body)

    async def remove_toxic(self, name: str) -> None:
        await self.server._call("DELETE", f"/proxies/{self.name}/toxics/{name}", expect=(204,))

    async def toxics(self) -> list[dict[str, Any]]:
        return list(await self.server._call("GET", f"/proxies/{self.name}/toxics"))

    async def set_enabled(self, enabled: bool) -> None:
        """False: the listener closes and every connection through the proxy is cut (a partition);
        True: it listens again."""
        answer = await self.server._call("POST", f"/proxies/{self.name}", {"enabled": enabled})
        assert answer["enabled"] is enabled, answer
