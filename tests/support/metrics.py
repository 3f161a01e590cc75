"""Reading a QueueFlow process's /metrics in end-to-end tests."""

from __future__ import annotations

import aiohttp

from devkit.procs import ServiceProcess


async def requests_served_with(
    http: aiohttp.ClientSession, proc: ServiceProcess, status_prefix: str
) -> float:
    """How many requests `proc` has answered with a status starting with `status_prefix` ("500",
    "5" for every 5xx), from its queueflow_http_requests_total counter."""
    async with http.get(f"{proc.metrics_url}/metrics") as resp:
        text = await resp.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("queueflow_http_requests_total{") and f'status="{status_prefix}' in line
    )


async def gauge(http: aiohttp.ClientSession, proc: ServiceProcess, name: str) -> float:
    """The value of the unlabelled gauge `name` on `proc`'s /metrics (0 when it is absent)."""
    async with http.get(f"{proc.metrics_url}/metrics") as resp:
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
