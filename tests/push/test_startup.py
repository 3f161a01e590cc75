"""`queueflow serve` refusing a bad value of a push flag (or of its environment variable), run for
real: exit 2 with one line that names the flag and the value, no traceback, before the database is
opened. --push-ca-file is checked where the pusher runs (`pusher`, `all`), as the pusher loads it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from devkit.procs import SERVER_ARGV
from services.cli import build_parser
from shared.config import settings_from

NOWHERE = "postgresql://nowhere.invalid/none"  # every refusal comes before the database is opened
MISSING_CA = "/nonexistent/queueflow-ca.pem"


def serve(*args: str, env: dict[str, str] | None = None) -> str:
    """Run `serve`, which must refuse to start: its one line of stderr."""
    done = subprocess.run(
        [*SERVER_ARGV, "--database-url", NOWHERE, "--worker-token", "w", "--api-keys", "k:acme", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


CIDR_CASES = {
    "not a range": (("--push-allow-cidrs", "not-a-cidr"), {}, "'not-a-cidr'"),
    "a prefix too long": (("--push-allow-cidrs", "10.0.0.0/33"), {}, "'10.0.0.0/33'"),
    "one bad entry of several": (("--push-allow-cidrs", "127.0.0.0/8,::1/129"), {}, "'::1/129'"),
    "from the environment": ((), {"QUEUEFLOW_PUSH_ALLOW_CIDRS": "10.0.0.0/8,not-a-cidr"}, "'not-a-cidr'"),
    "in pusher mode": (("--mode", "pusher", "--push-allow-cidrs", "nope"), {}, "'nope'"),
}


@pytest.mark.parametrize(("args", "env", "value"), CIDR_CASES.values(), ids=CIDR_CASES.keys())
def test_serve_refuses_a_push_allow_cidrs_entry_that_is_not_a_cidr_and_names_the_flag(args, env, value):
    line = serve(*args, env=env)
    assert line == f"queueflow: --push-allow-cidrs (QUEUEFLOW_PUSH_ALLOW_CIDRS): not a CIDR range: {value}"


def test_serve_refuses_a_push_ca_file_that_does_not_exist(tmp_path: Path):
    line = serve("--push-ca-file", MISSING_CA)
    assert line == (
        f"queueflow: --push-ca-file (QUEUEFLOW_PUSH_CA_FILE) '{MISSING_CA}' cannot be read: No such file or directory"
    )
    from_env = serve("--mode", "pusher", env={"QUEUEFLOW_PUSH_CA_FILE": str(tmp_path)})
    assert (
        from_env
        == f"queueflow: --push-ca-file (QUEUEFLOW_PUSH_CA_FILE) '{tmp_path}' cannot be read: Is a directory"
    )


def test_serve_refuses_a_push_ca_file_without_a_pem_certificate(tmp_path: Path):
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("this is not a certificate\n")
    line = serve("--mode", "pusher", "--push-ca-file", str(not_pem))
    assert line.startswith(
        f"queueflow: --push-ca-file (QUEUEFLOW_PUSH_CA_FILE) '{not_pem}' holds no PEM certificate"
    )


def test_a_push_ca_file_is_only_checked_where_the_pusher_runs():
    """An api (or a worker) does not read the file: a value meant for the pushers, set for every
    process, does not stop it."""
    for mode in ("api", "worker", "janitor", "workflow"):
        args = build_parser().parse_args(["serve", "--mode", mode, "--database-url", NOWHERE])
        assert settings_from(args, {"QUEUEFLOW_PUSH_CA_FILE": MISSING_CA}).push_ca_file == MISSING_CA


NUMBER_CASES = {
    "breaker failures": (("--push-breaker-failures", "five"), {}, "--push-breaker-failures:"),
    "breaker secs from the environment": (
        (),
        {"QUEUEFLOW_PUSH_BREAKER_SECS": "soon"},
        "QUEUEFLOW_PUSH_BREAKER_SECS:",
    ),
    "connections": (("--push-connections", "many"), {}, "--push-connections:"),
}


@pytest.mark.parametrize(("args", "env", "named"), NUMBER_CASES.values(), ids=NUMBER_CASES.keys())
def test_serve_refuses_a_push_number_that_is_not_one_and_names_where_it_came_from(args, env, named):
    line = serve(*args, env=env)
    assert line.startswith(f"queueflow: {named} "), line
