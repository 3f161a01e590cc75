"""The server as the container image installs it: the build context deploy/Dockerfile sends
(pyproject.toml, shared/, services/), installed non-editably with `pip install --no-deps`, run
through its `queueflow` console script from a directory outside the repository.

No Docker engine runs here, so this is the image's install step on this machine's Python. It
catches what only a real install shows: SQL migrations or queries left out of the package data,
an import of something outside the packaged trees, a broken entry point.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from devkit.procs import SERVER_ARGV
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
# The build context: what deploy/Dockerfile.dockerignore allows (its "!name" lines).
CONTEXT = [
    line[1:].rstrip("/")
    for line in (REPO / "deploy" / "Dockerfile.dockerignore").read_text().splitlines()
    if line.startswith("!")
]
DEV = {"Authorization": "Bearer dev"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the installed packages and bin/queueflow."""
    root = tmp_path_factory.mktemp("image")
    context = root / "context"
    context.mkdir()
    for name in CONTEXT:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(source, context / name)
    site = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(context)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return site


@pytest.mark.timeout(600, func_only=True)
def test_with_it_on_pythonpath_python_imports_the_installed_copy(installed, tmp_path):
    probe = "import shared, services; print(shared.__file__, services.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(installed)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.returncode == 0, where.stderr
    assert all(path.startswith(str(installed)) for path in where.stdout.split()), where.stdout


async def test_the_installed_package_migrates_an_empty_database_and_runs_jobs(
    installed, empty_database, service, tmp_path
):
    database_url = empty_database
    env = {"PYTHONPATH": str(installed)}
    proc = await service(database_url, mode="all", env=env, start=False)
    assert proc.argv[: len(SERVER_ARGV)] == list(SERVER_ARGV)
    proc.argv[: len(SERVER_ARGV)] = [str(installed / "bin" / "queueflow"), "serve"]  # the image's ENTRYPOINT
    proc.cwd = tmp_path
    await proc.start()

    async with aiohttp.ClientSession(base_url=proc.base_url, headers=DEV) as http:
        async with http.post("/api/v1/jobs", json={"task_name": "echo", "payload": {"n": 1}}) as resp:
            assert resp.status == 201, await resp.text()
            job_id = (await resp.json())["job_id"]
        wf = {
            "name": "packaged",
            "steps": [
                {"name": "a", "task_name": "echo"},
                {"name": "b", "task_name": "echo", "depends_on": ["a"]},
            ],
        }
        async with http.post("/api/v1/workflows", json=wf) as resp:
            assert resp.status == 201, await resp.text()
            workflow_id = (await resp.json())["workflow_id"]

        async def finished() -> bool:
            async with (
                http.get(f"/api/v1/jobs/{job_id}") as job,
                http.get(f"/api/v1/workflows/{workflow_id}") as w,
            ):
                return (await job.json())["status"] == "completed" and (await w.json())[
                    "status"
                ] == "completed"

        await eventually(finished, timeout=30)
        async with http.get("/openapi.json") as resp:
            assert resp.status == 200
        # The console's files and the vendored Swagger UI were packaged too.
        for path in ("/ui/", "/ui/app.js", "/docs", "/docs/swagger-ui-bundle.js", "/docs/LICENSE"):
            async with http.get(path) as resp:
                assert resp.status == 200, path

    # Every migration file of the source tree was packaged and applied.
    db = await asyncpg.connect(database_url)
    try:
        versions = {r["version"] for r in await db.fetch("SELECT version FROM queueflow.schema_migrations")}
    finally:
        await db.close()
    assert versions == {p.stem for p in (REPO / "shared" / "db" / "migrations").glob("*.sql")}
