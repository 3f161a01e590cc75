"""The `queueflow` command: credential refusal, migrate, and the JSON client against a real server."""

import asyncio
import json
import subprocess

from devkit.procs import CLI_ARGV as CLI


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env)


def test_serve_without_credentials_exits_non_zero_naming_what_is_missing():
    out = run("serve", "--mode", "api", "--database-url", "postgresql://nowhere/none")
    assert out.returncode != 0
    assert "--worker-token" in out.stderr
    assert "--api-keys" in out.stderr and "--jwt-secret" in out.stderr


def test_serve_with_a_malformed_api_key_exits_non_zero():
    out = run(
        "serve",
        "--mode",
        "api",
        "--database-url",
        "postgresql://nowhere/none",
        "--worker-token",
        "w",
        "--api-keys",
        "no-colon-here",
    )
    assert out.returncode != 0
    assert "api-keys" in out.stderr


def test_serve_rejects_an_unknown_mode():
    out = run("serve", "--mode", "sideways", "--database-url", "postgresql://nowhere/none", "--dev")
    assert out.returncode != 0
    assert "--mode" in out.stderr


async def test_migrate_on_a_migrated_database_applies_nothing(database_url):
    out = await asyncio.to_thread(run, "migrate", "--database-url", database_url)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"applied": []}


async def test_job_create_wait_get_list_and_stats_through_the_cli(database_url, service):
    proc = await service(database_url, mode="all")
    common = ["--server-url", proc.base_url, "--token", "dev"]

    created = await asyncio.to_thread(
        run, "job", "create", "--task", "echo", "--payload", '{"n": 7}', "--wait", *common
    )
    assert created.returncode == 0, created.stderr
    job = json.loads(created.stdout)
    assert job["status"] == "completed" and job["result"] == {"n": 7, "echoed": True}

    got = json.loads((await asyncio.to_thread(run, "job", "get", job["id"], *common)).stdout)
    assert got["id"] == job["id"]
    listed = json.loads((await asyncio.to_thread(run, "job", "list", "--limit", "5", *common)).stdout)
    assert [j["id"] for j in listed["jobs"]] == [job["id"]]
    stats = json.loads((await asyncio.to_thread(run, "stats", *common)).stdout)
    assert stats["jobs_completed"] == 1
    tasks = json.loads((await asyncio.to_thread(run, "tasks", *common)).stdout)
    assert {"echo", "fail", "log", "sleep"} <= set(tasks["tasks"])


async def test_job_cancel_of_a_finished_job_reports_the_conflict(database_url, service):
    proc = await service(database_url, mode="all")
    common = ["--server-url", proc.base_url, "--token", "dev"]
    created = await asyncio.to_thread(run, "job", "create", "--task", "echo", "--wait", *common)
    job_id = json.loads(created.stdout)["id"]
    out = await asyncio.to_thread(run, "job", "cancel", job_id, *common)
    assert out.returncode == 2
    assert "409" in out.stderr and "already completed" in out.stderr
