"""The `queueflow` command: credential refusal, migrate, spec, and the JSON client against a real
server, each command's effect checked through the API."""

import asyncio
import json
import os
import re
import shlex
import subprocess
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from devkit.ports import free_port
from devkit.procs import CLI_ARGV as CLI
from services.cli import build_parser
from services.cli.commands import COMMANDS, Call
from tests.support.waiting import eventually


def run(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env, input=stdin)


class Cli:
    """The command against one server (client flags appended), and the API to check its effects."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    async def run(
        self, *args: str, stdin: str | None = None, token: str = "dev"
    ) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            run, *args, "--server-url", self.base_url, "--token", token, stdin=stdin
        )

    async def ok(self, *args: str, stdin: str | None = None) -> Any:
        out = await self.run(*args, stdin=stdin)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    async def fails(self, *args: str, status: int, token: str = "dev") -> str:
        """The server's error message, from the error body a failing command printed (exit 2)."""
        out = await self.run(*args, token=token)
        assert out.returncode == 2 and out.stdout == "", out.stdout
        assert "Traceback" not in out.stderr and f"HTTP {status}: " in out.stderr, out.stderr
        body = json.loads(out.stderr.split(f"HTTP {status}: ", 1)[1])
        assert set(body) == {"error", "timestamp"}
        return body["error"]

    async def api(self, method: str, path: str) -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession(headers={"Authorization": "Bearer dev"}) as session,
            session.request(method, self.base_url + path) as resp,
        ):
            return resp.status, await resp.json()

    async def api_post(self, path: str, body: Any) -> tuple[int, Any]:
        """POST as a tenant (job creation) or, on a worker route, with the worker token."""
        token = "dev" if path == "/api/v1/jobs" else "a-worker"
        async with (
            aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as session,
            session.post(self.base_url + path, json=body) as resp,
        ):
            return resp.status, (
                await resp.json() if resp.content_length != 0 and resp.status != 204 else None
            )

    async def get(self, path: str) -> Any:
        status, body = await self.api("GET", path)
        assert status == 200, body
        return body

    async def until(self, path: str, status: str) -> Any:
        """The resource at `path` once its status is `status` (polled, with a deadline)."""

        async def check() -> Any:
            body = await self.get(path)
            assert body["status"] == status, body["status"]
            return body

        return await eventually(check, timeout=30)


@pytest.fixture
async def cli(database_url, service) -> Cli:
    """A server whose key `dev` is tenant1 (read-write), `acme-ro` is tenant acme (read-only) and
    `a-worker` the worker token (credentials, so not --dev, which refuses them)."""
    keys = ["--api-keys", "dev:tenant1,acme-ro:acme:ro", "--worker-token", "a-worker"]
    proc = await service(database_url, mode="all", dev=False, extra_args=keys)
    return Cli(proc.base_url)


FLOW = {
    "name": "cli-flow",
    "steps": [
        {"name": "a", "task_name": "echo", "payload": {"n": 1}},
        {"name": "b", "task_name": "echo", "depends_on": ["a"]},
    ],
}


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


async def test_migrate_refused_by_the_database_says_so_in_one_line(database_url):
    unknown = database_url.rpartition("/")[0] + "/no_such_database"
    out = await asyncio.to_thread(run, "migrate", "--database-url", unknown)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert "refused the migration" in out.stderr and "no_such_database" in out.stderr


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
    for piece, found in ((job["id"][-12:], [job["id"]]), ("ffffffffffff0", [])):
        argv = ("job", "list", "--id-contains", piece, *common)
        assert [j["id"] for j in json.loads((await asyncio.to_thread(run, *argv)).stdout)["jobs"]] == found
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


async def test_spec_writes_the_served_document_as_json_and_yaml(cli, tmp_path):
    out_dir = tmp_path / "new" / "spec"
    written = await asyncio.to_thread(run, "spec", "--output-dir", str(out_dir))
    assert written.returncode == 0, written.stderr
    files = [out_dir / "openapi.json", out_dir / "openapi.yaml"]
    assert json.loads(written.stdout) == {"written": [str(f) for f in files]}
    served = await cli.get("/openapi.json")
    assert json.loads(files[0].read_text()) == served
    assert yaml.safe_load(files[1].read_text()) == served


async def test_workflow_create_from_a_file_and_stdin_then_get_list_steps_and_diagram(cli, tmp_path):
    definition = tmp_path / "flow.json"
    definition.write_text(json.dumps(FLOW))
    from_file = (await cli.ok("workflow", "create", "--file", str(definition)))["workflow_id"]
    from_stdin = (await cli.ok("workflow", "create", "--file", "-", stdin=json.dumps(FLOW)))["workflow_id"]

    for wf_id in (from_file, from_stdin):
        await cli.until(f"/api/v1/workflows/{wf_id}", "completed")
    got = await cli.ok("workflow", "get", from_file)
    assert got == await cli.get(f"/api/v1/workflows/{from_file}")
    assert [s["name"] for s in got["steps"]] == ["a", "b"]
    listed = await cli.ok("workflow", "list", "--status", "completed", "--limit", "1")
    assert len(listed["workflows"]) == 1 and listed["next_cursor"]
    rest = await cli.ok("workflow", "list", "--status", "completed", "--cursor", listed["next_cursor"])
    assert {w["id"] for w in listed["workflows"] + rest["workflows"]} == {from_file, from_stdin}
    steps = await cli.ok("workflow", "steps", from_file)
    assert [(s["name"], s["status"]) for s in steps["steps"]] == [("a", "completed"), ("b", "completed")]
    diagram = await cli.ok("workflow", "diagram", from_file)
    assert diagram == await cli.get(f"/api/v1/workflows/{from_file}/diagram")
    assert diagram["format"] == "mermaid" and "graph TD" in diagram["diagram"]


async def test_workflow_cancel_and_retry_while_its_queue_is_paused(cli):
    paused = await cli.ok("queue", "pause", "default")
    assert (paused["queue"], paused["paused"]) == ("default", True)
    wf_id = (await cli.ok("workflow", "create", "--file", "-", stdin=json.dumps(FLOW)))["workflow_id"]

    assert await cli.ok("workflow", "cancel", wf_id) == {"cancelled": wf_id}
    await cli.until(f"/api/v1/workflows/{wf_id}", "cancelled")
    assert "already cancelled" in await cli.fails("workflow", "cancel", wf_id, status=409)

    assert await cli.ok("workflow", "retry", wf_id) == {"retried": wf_id}
    assert (await cli.ok("queue", "resume", "default"))["paused"] is False
    done = await cli.until(f"/api/v1/workflows/{wf_id}", "completed")
    assert done["retry_count"] == 1


async def test_queue_pause_holds_the_tenants_jobs_until_resume(cli):
    assert (await cli.ok("queue", "pause", "default"))["paused"] is True
    job_id = (await cli.ok("job", "create", "--task", "echo"))["job_id"]
    [default] = (await cli.ok("queue", "list"))["queues"]
    # The API's answer, but for the waiting job's age, which grows between the two reads.
    assert default.pop("oldest_pending_age_secs") >= 0
    assert default == {"queue": "default", "pending": 1, "scheduled": 0, "running": 0, "paused": True}
    assert (await cli.get("/api/v1/queues"))["queues"][0]["paused"] is True
    assert (await cli.get(f"/api/v1/jobs/{job_id}"))["status"] == "pending"

    resumed = await cli.ok("queue", "resume", "default")
    assert (resumed["queue"], resumed["paused"]) == ("default", False)
    await cli.until(f"/api/v1/jobs/{job_id}", "completed")


async def test_job_retry_runs_a_cancelled_job_again_in_place(cli):
    await cli.ok("queue", "pause", "default")
    job_id = (await cli.ok("job", "create", "--task", "echo", "--payload", '{"n": 3}'))["job_id"]
    assert await cli.ok("job", "cancel", job_id) == {"cancelled": job_id}
    await cli.ok("queue", "resume", "default")

    retried = await cli.ok("job", "retry", job_id)
    assert retried["id"] == job_id
    job = await cli.until(f"/api/v1/jobs/{job_id}", "completed")
    assert job["result"] == {"n": 3, "echoed": True}


async def test_job_logs_follow_and_attempts_through_the_cli(cli):
    """`job logs --follow` prints the lines as they arrive until the job finishes; `job attempts`
    shows each attempt with its worker; `workers` the worker that leased it."""
    status, created = await cli.api_post("/api/v1/jobs", {"task_name": "t", "config": {"queue": "cli-logs"}})
    assert status == 201
    job_id = created["job_id"]
    status, leased = await cli.api_post(
        "/api/v1/queues/cli-logs/lease", {"worker_id": "cli-worker", "worker": {"sdk": "test"}}
    )
    token = leased["jobs"][0]["lease_token"]
    lines = {"lease_token": token, "lines": [{"message": "one"}, {"message": "two", "level": "warn"}]}
    assert (await cli.api_post(f"/api/v1/jobs/{job_id}/logs", lines))[0] == 200

    page = await cli.ok("job", "logs", job_id, "--after", "1")
    assert [line["message"] for line in page["lines"]] == ["two"] and page["last_seq"] == 2

    follow = asyncio.create_task(cli.run("job", "logs", job_id, "--follow"))
    more = {"lease_token": token, "lines": [{"message": "three"}]}
    assert (await cli.api_post(f"/api/v1/jobs/{job_id}/logs", more))[0] == 200
    assert (await cli.api_post(f"/api/v1/jobs/{job_id}/complete", {"lease_token": token}))[0] == 204
    out = await follow
    assert out.returncode == 0, out.stderr
    printed = out.stdout.splitlines()
    assert [json.loads(line)["message"] for line in printed[:3]] == ["one", "two", "three"]
    assert json.loads("\n".join(printed[3:])) == {
        "job_id": job_id,
        "status": "completed",
        "last_seq": 3,
        "dropped": 0,
    }

    attempts = (await cli.ok("job", "attempts", job_id))["attempts"]
    assert [(a["attempt"], a["outcome"], a["worker_id"]) for a in attempts] == [
        (1, "completed", "cli-worker")
    ]
    [worker] = (await cli.ok("workers"))["workers"]
    assert (worker["worker_id"], worker["info"]) == ("cli-worker", {"sdk": "test"})


async def test_cron_create_get_list_pause_resume_and_delete(cli):
    created = await cli.ok(
        "cron",
        "create",
        "--name",
        "nightly",
        "--schedule",
        "0 3 1 1 *",
        "--task",
        "echo",
        "--payload",
        '{"k": 1}',
        "--queue",
        "reports",
    )
    cron_id = created["cron_id"]
    got = await cli.ok("cron", "get", cron_id)
    assert got == await cli.get(f"/api/v1/cron/{cron_id}")
    assert (got["name"], got["cron_expr"], got["task_name"], got["payload"], got["queue_name"]) == (
        "nightly",
        "0 3 1 1 *",
        "echo",
        {"k": 1},
        "reports",
    )
    assert [c["id"] for c in (await cli.ok("cron", "list"))["crons"]] == [cron_id]

    for action, printed, enabled in (("pause", "paused", False), ("resume", "resumed", True)):
        assert await cli.ok("cron", action, cron_id) == {printed: cron_id}
        assert (await cli.get(f"/api/v1/cron/{cron_id}"))["enabled"] is enabled

    assert await cli.ok("cron", "delete", cron_id) == {"deleted": cron_id}
    assert (await cli.api("GET", f"/api/v1/cron/{cron_id}"))[0] == 404
    await cli.fails("cron", "delete", cron_id, status=404)


async def test_cron_create_in_a_time_zone_shows_the_next_firing_on_that_clock(cli):
    created = await cli.ok(
        "cron",
        "create",
        "--name",
        "report",
        "--schedule",
        "0 9 * * 1-5",
        "--task",
        "echo",
        "--timezone",
        "America/New_York",
    )
    got = await cli.ok("cron", "get", created["cron_id"])
    assert got["timezone"] == "America/New_York"
    local = datetime.fromisoformat(got["next_run_local"])
    assert (local.hour, local.minute, local.isoweekday() <= 5) == (9, 0, True)
    assert local.utcoffset() in (timedelta(hours=-5), timedelta(hours=-4))
    error = await cli.fails(
        "cron",
        "create",
        "--name",
        "bad",
        "--schedule",
        "0 9 * * *",
        "--task",
        "echo",
        "--timezone",
        "Atlantis/Capital",
        status=400,
    )
    assert "Atlantis/Capital" in error


async def test_worker_key_create_list_and_delete(cli):
    created = await cli.ok(
        "worker-key",
        "create",
        "--name",
        "runners",
        "--queue",
        "emails",
        "--queue",
        "pdfs",
        "--expires-at",
        "2999-01-01T00:00:00Z",
    )
    assert created["token"].startswith("qfwk_")
    assert (created["name"], created["queues"]) == ("runners", ["emails", "pdfs"])
    assert created["expires_at"].startswith("2999-01-01T00:00:00")
    everywhere = await cli.ok("worker-key", "create", "--name", "all")
    assert everywhere["queues"] is None and everywhere["expires_at"] is None
    listed = (await cli.ok("worker-key", "list"))["worker_keys"]
    assert [k["id"] for k in listed] == [created["id"], everywhere["id"]]
    assert all("token" not in k for k in listed)
    assert await cli.ok("worker-key", "delete", created["id"]) == {"deleted": created["id"]}
    await cli.fails("worker-key", "delete", created["id"], status=404)
    await cli.fails("worker-key", "create", "--name", "x", "--expires-at", "2001-01-01T00:00:00Z", status=400)


async def test_client_flags_go_before_or_after_the_arguments_or_come_from_the_environment(cli):
    job_id = (await cli.ok("job", "create", "--task", "echo", "--wait"))["id"]
    before = await asyncio.to_thread(
        run, "job", "get", "--server-url", cli.base_url, "--token", "dev", job_id
    )
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["id"] == job_id

    env = {**os.environ, "QUEUEFLOW_SERVER_URL": cli.base_url, "QUEUEFLOW_TOKEN": "acme-ro"}
    from_env = await asyncio.to_thread(run, "whoami", env=env)
    who = json.loads(from_env.stdout)
    assert (who["tenant"], who["access"], who["role"]) == ("acme", "read_only", "viewer")
    overridden = await asyncio.to_thread(run, "whoami", "--token", "dev", env=env)
    assert json.loads(overridden.stdout)["tenant"] == "tenant1"


async def test_audit_lists_the_tenants_entries_with_filters(cli):
    job_id = (await cli.ok("job", "create", "--task", "echo"))["job_id"]
    await cli.ok("queue", "pause", "q-audit")
    await cli.ok("queue", "resume", "q-audit")
    everything = (await cli.ok("audit"))["entries"]
    assert [e["action"] for e in everything] == ["resumeQueue", "pauseQueue", "createJob"]
    assert [e["targets"] for e in (await cli.ok("audit", "--action", "pauseQueue"))["entries"]] == [
        ["q-audit"]
    ]
    assert [e["action"] for e in (await cli.ok("audit", "--target", job_id))["entries"]] == ["createJob"]
    page = await cli.ok("audit", "--limit", "1")
    assert page["has_more"] and len(page["entries"]) == 1
    later = await cli.ok("audit", "--limit", "1", "--cursor", page["next_cursor"])
    assert later["entries"][0]["action"] == "pauseQueue"
    assert "admin role" in await cli.fails("audit", status=403, token="acme-ro")


async def test_error_answers_print_the_servers_error_body_and_exit_2(cli):
    assert "not found" in await cli.fails("job", "get", str(uuid.uuid4()), status=404)
    assert "not found" in await cli.fails("workflow", "diagram", "no-such-workflow", status=404)
    await cli.fails(
        "cron",
        "create",
        "--name",
        "n",
        "--schedule",
        "* * * * *",
        "--task",
        "echo",
        status=403,
        token="acme-ro",
    )
    assert "cron" in await cli.fails(
        "cron", "create", "--name", "n", "--schedule", "every day", "--task", "echo", status=400
    )
    assert (await cli.get("/api/v1/cron"))["crons"] == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["job", "get", "some-id", "--server-url", "http://127.0.0.1:{port}"], "cannot reach"),
        (["migrate", "--database-url", "postgresql://127.0.0.1:{port}/qf"], "cannot reach the database"),
        (["workflow", "create", "--file", "{tmp}/bad.json"], "bad.json is not JSON"),
        (["workflow", "create", "--file", "{tmp}/missing.json"], "cannot read"),
        (["spec", "--output-dir", "{tmp}/bad.json"], "cannot write"),
        (["job", "create", "--task", "echo", "--payload", "[1"], "usage:"),
        (["cron", "create", "--name", "n", "--task", "echo"], "--schedule"),
        (["dlq", "get", "seven"], "invalid int value"),
    ],
)
def test_local_errors_exit_2_without_a_traceback(tmp_path: Path, args: list[str], says: str):
    (tmp_path / "bad.json").write_text('{"name": "cli-flow", "steps": [')
    argv = [a.format(port=free_port(), tmp=tmp_path) for a in args]
    out = run(*argv)
    assert out.returncode == 2 and out.stdout == ""
    assert says in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_docs_cli_md_has_an_example_that_parses_for_every_command():
    text = (Path(__file__).parents[2] / "docs" / "cli.md").read_text()
    parser = build_parser()
    documented = set()
    for example in re.findall(r"^\|.*\| `queueflow ([^`]+)` \|$", text, re.MULTILINE):
        args = parser.parse_args(shlex.split(example))
        documented.add((args.command, getattr(args, "action", None)))
    commands = {(name, None) for name in ("serve", "migrate", "spec")}
    for name, entry in COMMANDS.items():
        commands |= {(name, None)} if isinstance(entry, Call) else {(name, a) for a in entry.calls}
    assert documented == commands


async def test_queue_set_retention_removes_completed_jobs_yet_job_create_wait_sees_its_outcome(cli):
    assert (await cli.ok("queue", "get", "default"))["retention"] == "keep"
    changed = await cli.ok("queue", "set", "default", "--retention", "remove_completed")
    assert (changed["queue"], changed["retention"]) == ("default", "remove_completed")
    [listed] = (await cli.ok("queue", "list"))["queues"]
    assert listed["retention"] == "remove_completed"
    # A job the CLI creates alone is read back, and waited for, as upstream's client does.
    done = await cli.ok("job", "create", "--task", "echo", "--payload", '{"n": 5}', "--wait")
    assert (done["status"], done["result"]) == ("completed", {"n": 5, "echoed": True})
    await cli.fails("queue", "set", "default", "--retention", "keep", status=403, token="acme-ro")
    out = await cli.run("queue", "set", "default", "--retention", "forever")
    assert out.returncode == 2 and "invalid choice" in out.stderr
    assert (await cli.ok("queue", "set", "default", "--retention", "keep"))["retention"] == "keep"
