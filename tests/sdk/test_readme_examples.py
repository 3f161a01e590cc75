"""Every SDK README's runnable example, run as written against a real server.

The code is taken from the README's fenced block (so the README cannot drift from working code);
the only change made to it is the server address, which points at the test's `--dev` server
instead of localhost:8000. Each example enqueues or works jobs on the "images" queue, and the test
checks the outcome on the server, not just the example's exit status.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.sdk.builds import SDKS, build
from tests.support.waiting import eventually

DEV = {"Authorization": "Bearer dev"}
README_URL = "http://localhost:8000"


def fenced_block(readme: Path, heading: str, language: str) -> str:
    """The first ```language block after the line `heading`."""
    lines = readme.read_text().splitlines()
    start = lines.index(heading)
    opening = next(i for i in range(start, len(lines)) if lines[i].strip() == f"```{language}")
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].strip() == "```")
    return "\n".join(lines[opening + 1 : closing]) + "\n"


def pointed_at(code: str, base_url: str) -> str:
    """The example with its server address replaced by the test server's."""
    assert README_URL in code, f"the example no longer names {README_URL}:\n{code}"
    return code.replace(README_URL, base_url)


async def images_jobs(base_url: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{base_url}/api/v1/jobs", params={"queue": "images", "limit": "100"}, headers=DEV) as resp,
    ):
        assert resp.status == 200
        return (await resp.json())["jobs"]


async def enqueue(base_url: str, body: dict[str, Any]) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/api/v1/jobs", json=body, headers=DEV) as resp,
    ):
        assert resp.status == 201, await resp.text()
        return (await resp.json())["job_id"]


async def reaching(base_url: str, job_id: str, status: str = "completed") -> dict[str, Any]:
    """The job, once it has `status`."""

    async def there() -> dict[str, Any] | None:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{base_url}/api/v1/jobs/{job_id}", headers=DEV) as resp,
        ):
            job = await resp.json()
        return job if job["status"] == status else None

    return await eventually(there, timeout=60, interval=0.1)


async def spawn(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def finish(proc: asyncio.subprocess.Process, within: float = 60) -> tuple[int, str]:
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        raise AssertionError(
            f"the example did not exit within {within}s:\n{out.decode(errors='replace')}"
        ) from None
    return proc.returncode, out.decode(errors="replace")


@pytest.mark.timeout(360)
async def test_go_readme_example_enqueues_works_and_drains_on_sigint(service, database_url, tmp_path):
    srv = await service(database_url, mode="api")
    code = fenced_block(SDKS / "go" / "README.md", "## A worker and a producer", "go")
    (tmp_path / "main.go").write_text(pointed_at(code, srv.base_url))
    (tmp_path / "go.mod").write_text(
        "module example.com/readme\n\ngo 1.26.0\n\nrequire github.com/unofficial-queueflow/client-go v0.0.0\n\n"
        f"replace github.com/unofficial-queueflow/client-go => {SDKS / 'go'}\n"
    )
    # The SDK's own requirements (the OpenTelemetry API) resolved as a user's `go mod tidy` would.
    tidied = await spawn(["go", "mod", "tidy"], tmp_path)
    status, out = await finish(tidied, within=300)
    assert status == 0, out
    built = await spawn(["go", "build", "-o", "example", "."], tmp_path)
    status, out = await finish(built, within=300)
    assert status == 0, out

    proc = await spawn([str(tmp_path / "example")], tmp_path, {"QF_TOKEN": "dev", "QF_WORKER_TOKEN": "dev"})
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    assert line.startswith("enqueued "), line
    job = await reaching(srv.base_url, line.split()[1])
    assert job["result"] == {"resized": "https://example.com/cat.png"}
    proc.send_signal(signal.SIGINT)
    status, out = await finish(proc)
    assert status == 0, out

    # Run again: the idempotency key returns the same job, which is not run twice.
    again = await spawn([str(tmp_path / "example")], tmp_path, {"QF_TOKEN": "dev", "QF_WORKER_TOKEN": "dev"})
    assert (await asyncio.wait_for(again.stdout.readline(), 30)).decode() == line
    again.send_signal(signal.SIGINT)
    status, out = await finish(again)
    assert status == 0, out
    [only] = await images_jobs(srv.base_url)
    assert (only["id"], only["delivery_count"]) == (job["id"], 1)


async def test_typescript_readme_example_runs_to_completion(service, database_url, tmp_path):
    await asyncio.to_thread(build, "typescript")
    srv = await service(database_url, mode="api")
    code = fenced_block(SDKS / "typescript" / "README.md", "## Example", "js")
    dist = (SDKS / "typescript" / "dist" / "index.js").as_uri()
    assert '"./dist/index.js"' in code
    (tmp_path / "example.mjs").write_text(code.replace('"./dist/index.js"', json.dumps(dist)))
    proc = await spawn(["node", "example.mjs"], tmp_path, {"QF_URL": srv.base_url, "QF_TOKEN": "dev"})
    status, out = await finish(proc)
    assert status == 0, out
    assert out.startswith("completed {"), out
    [job] = await images_jobs(srv.base_url)
    assert (job["status"], job["result"]) == (
        "completed",
        {"resized": "https://example.com/a.png", "width": 200},
    )


@pytest.mark.timeout(360)
async def test_rust_example_program_enqueues_works_and_follows_events(service, database_url):
    srv = await service(database_url, mode="api")
    env = {
        "QUEUEFLOW_URL": srv.base_url,
        "QUEUEFLOW_TOKEN": "dev",
        "PATH": f"{Path.home() / '.cargo' / 'bin'}:{os.environ['PATH']}",
    }
    proc = await spawn(["cargo", "run", "--quiet", "--example", "worker"], SDKS / "rust", env)
    status, out = await finish(proc, within=300)  # includes compiling the example
    assert status == 0, out
    [job] = await images_jobs(srv.base_url)
    assert (job["status"], job["result"]) == ("completed", {"thumbnail_width": 128})
    assert f"enqueued {job['id']}" in out
    assert f"job {job['id']} is completed" in out, out  # seen over the SSE stream


async def test_python_readme_client_example_runs(service, database_url, tmp_path):
    srv = await service(database_url, mode="api")
    code = fenced_block(SDKS / "python" / "README.md", "## The client", "python")
    (tmp_path / "client_example.py").write_text(pointed_at(code, srv.base_url))
    proc = await spawn(
        [sys.executable, "client_example.py"], tmp_path, {"PYTHONPATH": str(SDKS / "python" / "src")}
    )
    status, out = await finish(proc)
    assert status == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("pending "), out  # the created job, read back
    assert lines[-1].startswith("404 job not found"), out  # NotFound carries the error body


async def test_python_readme_worker_example_works_a_job_and_stops_on_sigterm(service, database_url, tmp_path):
    srv = await service(database_url, mode="api")
    code = fenced_block(SDKS / "python" / "README.md", "## The worker", "python")
    (tmp_path / "worker_example.py").write_text(pointed_at(code, srv.base_url))
    proc = await spawn(
        [sys.executable, "worker_example.py"], tmp_path, {"PYTHONPATH": str(SDKS / "python" / "src")}
    )
    try:
        job_id = await enqueue(
            srv.base_url,
            {"task_name": "resize-image", "payload": {"url": "u"}, "config": {"queue": "images"}},
        )
        job = await reaching(srv.base_url, job_id)
        assert job["result"] == {"ok": True}
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
    status, out = await finish(proc)
    assert status == 0, out


@pytest.mark.timeout(360)
async def test_rust_readme_worker_example_works_and_dead_letters(service, database_url, tmp_path):
    srv = await service(database_url, mode="api")
    code = fenced_block(SDKS / "rust" / "README.md", "## A worker", "rust")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.rs").write_text(pointed_at(code, srv.base_url))
    manifest = fenced_block(SDKS / "rust" / "README.md", "# unofficial-queueflow-client for Rust", "toml")
    manifest = manifest.replace('path = "sdks/rust"', f'path = "{SDKS / "rust"}"')
    (tmp_path / "Cargo.toml").write_text(
        f'[package]\nname = "readme-example"\nversion = "0.0.0"\nedition = "2021"\n\n{manifest}'
    )
    (tmp_path / "Cargo.lock").write_bytes(
        (SDKS / "rust" / "Cargo.lock").read_bytes()
    )  # the SDK's pinned versions
    env = {
        "PATH": f"{Path.home() / '.cargo' / 'bin'}:{os.environ['PATH']}",
        "CARGO_TARGET_DIR": str(SDKS / "rust" / "target"),
    }  # reuse the SDK's compiled dependencies
    built = await spawn(["cargo", "build", "--quiet"], tmp_path, env)
    status, out = await finish(built, within=300)
    assert status == 0, out

    proc = await spawn([str(SDKS / "rust" / "target" / "debug" / "readme-example")], tmp_path)
    try:
        resize = await enqueue(
            srv.base_url,
            {"task_name": "resize-image", "payload": {"url": "u"}, "config": {"queue": "images"}},
        )
        transcode = await enqueue(
            srv.base_url,
            {"task_name": "transcode", "payload": {}, "config": {"queue": "images", "max_retries": 3}},
        )
        assert (await reaching(srv.base_url, resize))["result"] == {
            "url": "u"
        }  # the handler echoes its payload

        failed = await reaching(srv.base_url, transcode, "failed")
        assert (failed["error_message"], failed["retry_count"]) == (
            "codec is missing",
            0,
        )  # permanent: no retry
    finally:
        proc.kill()
        await proc.wait()
