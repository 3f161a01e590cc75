"""The curl + jq worker loop from the remote-workers page, run as a real bash script against a real
API process (strict credentials) and a janitor process."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from pathlib import Path

import aiohttp
import pytest

from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(90)

HERE = Path(__file__).resolve().parent
WORKER_TOKEN = "w-e2e-secret"
TENANT = {"Authorization": "Bearer k-acme"}


async def test_the_documented_shell_worker_processes_jobs_with_heartbeats(
    database_url, service, tmp_path, db
):
    missing = [tool for tool in ("bash", "curl", "jq") if shutil.which(tool) is None]
    assert not missing, f"the seed page's shell worker needs {', '.join(missing)} (.ci/run installs them)"
    api = await service(
        database_url,
        mode="api",
        dev=False,
        extra_args=["--worker-token", WORKER_TOKEN, "--api-keys", "k-acme:acme"],
    )
    janitor = await service(
        database_url, mode="janitor", dev=False, extra_args=["--janitor-interval-secs", "0.2"]
    )
    hb_log = tmp_path / "heartbeats.log"
    hb_log.touch()
    env = {
        **os.environ,
        "BASE": api.base_url,
        "WORKER_TOKEN": WORKER_TOKEN,
        "QUEUE": "images",
        "LEASE_SECS": "2",
        "WAIT_SECS": "1",
        "HB_EVERY": "0.5",
        "HANDLER": str(HERE / "resize_image.sh"),
        "HB_LOG": str(hb_log),
    }
    script = await asyncio.create_subprocess_exec(
        "bash",
        str(HERE / "shell_worker.sh"),
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with aiohttp.ClientSession(base_url=api.base_url, headers=TENANT) as http:

            async def create(payload: dict, **config) -> str:
                async with http.post(
                    "/api/v1/jobs",
                    json={
                        "task_name": "resize-image",
                        "payload": payload,
                        "config": {"queue": "images", **config},
                    },
                ) as resp:
                    assert resp.status == 201, await resp.text()
                    return str((await resp.json())["job_id"])

            quick = [await create({"image": f"{i}.png", "work_secs": 0.1}) for i in range(3)]
            # Works for longer than its 2 s lease: only its heartbeats keep the janitor away.
            slow = await create({"image": "big.png", "work_secs": 3})
            broken = await create({"image": "broken.png", "ok": False}, max_retries=0)

            async def job(job_id: str) -> dict:
                async with http.get(f"/api/v1/jobs/{job_id}") as resp:
                    assert resp.status == 200
                    return dict(await resp.json())

            async def all_finished() -> bool:
                states = [(await job(j))["status"] for j in [*quick, slow, broken]]
                return all(s in ("completed", "failed") for s in states)

            await eventually(all_finished, timeout=45)

            for job_id in [*quick, slow]:
                done = await job(job_id)
                assert done["status"] == "completed"
                assert done["result"] == {"ok": True}
                assert (done["delivery_count"], done["retry_count"]) == (1, 0), done
            failed = await job(broken)
            assert (failed["status"], failed["error_message"]) == ("failed", "resize failed")
            async with http.get("/api/v1/dlq") as resp:
                entries = (await resp.json())["dead_letters"]
            assert [(e["job_id"], e["reason"]) for e in entries] == [(broken, "max_attempts_exceeded")]
    finally:
        os.killpg(script.pid, signal.SIGKILL)
        await script.wait()
        await janitor.terminate(grace=10.0)

    beats = [line.split() for line in hb_log.read_text().splitlines()]
    slow_beats = [status for job_id, *status in beats if job_id == slow]
    assert slow_beats.count(["running"]) >= 2, beats
    assert await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE tenant_id = 'acme'") == 5
