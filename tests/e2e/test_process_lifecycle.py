"""Process lifecycle: every mode stops cleanly on SIGTERM (Kubernetes sends it on every rollout),
parked long-polls are answered when the process drains, and api modes fail closed without
credentials."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)

# The janitor's shutdown race is timing dependent: a few start/stop cycles make it show.
CYCLES = {"janitor": 3}


@pytest.mark.parametrize("mode", ["api", "janitor", "workflow", "worker", "all"])
async def test_a_process_exits_zero_on_sigterm(database_url, service, mode):
    for _ in range(CYCLES.get(mode, 1)):
        proc = await service(database_url, mode=mode, extra_args=["--janitor-interval-secs", "0.2"])
        assert await proc.terminate(grace=10.0) == 0
        log = proc.log_text()
        assert '"queueflow_stopped"' in log
        assert '"development_mode"' in log  # --dev warns at startup


async def test_a_parked_long_poll_is_answered_empty_when_the_process_drains(database_url, service):
    proc = await service(database_url, mode="api", extra_args=["--worker-poll-secs", "60"])
    async with aiohttp.ClientSession() as http:

        async def parked_lease() -> tuple[int, dict]:
            async with http.post(
                f"{proc.base_url}/api/v1/queues/idle/lease",
                json={"wait_secs": 30},
                headers={"Authorization": "Bearer dev"},
            ) as resp:
                return resp.status, await resp.json()

        lease = asyncio.create_task(parked_lease())

        async def parked() -> bool:
            async with http.get(f"{proc.metrics_url}/metrics") as resp:
                return "queueflow_long_poll_waiters 1.0" in await resp.text()

        await eventually(parked, message="the lease is parked (the gauge counts parked leases)")

        stop = asyncio.create_task(proc.terminate(grace=20.0))
        status, body = await asyncio.wait_for(lease, 20)
        assert (status, body) == (200, {"jobs": []})
        assert await stop == 0


@pytest.mark.parametrize("mode", ["api", "all"])
async def test_api_modes_refuse_to_start_without_credentials(database_url, service, mode):
    proc = await service(database_url, mode=mode, dev=False, start=False)
    with pytest.raises(RuntimeError, match="exited with"):
        await proc.start(ready_within=20)
    assert proc.returncode not in (0, None)
    assert "--worker-token" in proc.log_text()
