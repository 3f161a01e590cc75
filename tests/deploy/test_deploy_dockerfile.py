"""Static checks of deploy/Dockerfile (no Docker engine runs on the CI machine).

The Dockerfile is parsed into stages and instructions and checked against the project: the
build context, pyproject.toml, the CLI and shared.config. Its HEALTHCHECK command is run for
real against a throwaway local HTTP server.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import pytest
from qf_deploy_helpers import DEPLOY, REPO, cli_parser, known_env_names, parse_cli, serve_option_parser

DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
BASE_IMAGE = "python:3.11-slim-bookworm"
UID = "10001"


@dataclass
class Instruction:
    keyword: str
    value: str

    def exec_form(self) -> list[str]:
        parsed = json.loads(self.value)
        assert isinstance(parsed, list) and all(isinstance(p, str) for p in parsed), self.value
        return parsed


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction:
        found = self.all(keyword)
        assert found, f"stage {self.name}: no {keyword}"
        return found[-1]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages; continuation lines joined, comments dropped."""
    logical: list[str] = []
    buffer = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buffer):
            continue  # Docker drops comment lines, even inside a continued instruction
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        logical.append((buffer + stripped).strip())
        buffer = ""
    assert not buffer, "dangling line continuation at the end of the Dockerfile"

    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        keyword, _, value = line.partition(" ")
        keyword, value = keyword.upper(), value.strip()
        if keyword == "FROM":
            words = value.split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may precede the first FROM, not {keyword}"
            arg, _, default = value.partition("=")
            args[arg] = default
        else:
            stages[-1].instructions.append(Instruction(keyword, value))
    return args, stages


@pytest.fixture(scope="module")
def dockerfile() -> tuple[dict[str, str], list[Stage]]:
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def stages(dockerfile: tuple[dict[str, str], list[Stage]]) -> list[Stage]:
    return dockerfile[1]


@pytest.fixture(scope="module")
def runtime(stages: list[Stage]) -> Stage:
    return stages[-1]


@pytest.fixture(scope="module")
def builder(stages: list[Stage]) -> Stage:
    return next(s for s in stages if s.name == "builder")


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def resolve(image: str, args: dict[str, str]) -> str:
    """`image` with the global ARG defaults substituted, until none is left (a default may name
    an earlier ARG, as BUILDER_IMAGE's does)."""
    for _ in range(len(args) + 1):
        before = image
        for name, default in args.items():
            image = image.replace("${" + name + "}", default).replace("$" + name, default)
        if image == before:
            return image
    raise AssertionError(f"ARG defaults refer to each other in a loop: {args}")


def test_multi_stage_on_the_slim_python_311_base(dockerfile: tuple[dict[str, str], list[Stage]]) -> None:
    args, stages = dockerfile
    assert [s.name for s in stages] == ["builder", "runtime"]
    for stage in stages:
        assert resolve(stage.base, args) == BASE_IMAGE, stage
    # Two build args, so deploy/tools/build-image.sh can pass a runtime base without pip; by
    # default both are the one slim image, and the builder's follows the runtime's.
    assert stages[0].base == "${BUILDER_IMAGE}" and stages[1].base == "${PYTHON_IMAGE}"
    assert args["BUILDER_IMAGE"] == "${PYTHON_IMAGE}"


def test_runtime_checks_that_the_venv_interpreter_resolves(runtime: Stage) -> None:
    """The venv's interpreter is a symlink into the base: a RUN after the COPY runs it."""
    copy = runtime.instructions.index(runtime.all("COPY")[0])
    later_runs = [i.value for i in runtime.all("RUN") if runtime.instructions.index(i) > copy]
    assert any(run.startswith("queueflow ") for run in later_runs), later_runs


def test_builder_makes_a_venv_and_installs_the_project(builder: Stage) -> None:
    runs = " && ".join(i.value for i in builder.all("RUN"))
    assert "python3 -m venv" in runs  # Debian has no `python` outside a venv
    assert "pip install --no-deps --no-build-isolation ." in runs
    assert "pip check" in runs
    venv = {i.value for i in builder.all("ENV") if "VIRTUAL_ENV=/opt/queueflow" in i.value}
    assert venv, "the builder's venv lives at /opt/queueflow"


def test_builder_installs_only_what_the_lock_pins_with_hashes(builder: Stage) -> None:
    """Every pip install of the builder is the lock in hash-checking mode, or the project itself
    without dependencies and without build isolation (which would fetch setuptools unhashed), and
    the lock is installed before the project."""
    installs = []
    for run in builder.all("RUN"):
        for command in run.value.split("&&"):
            words = command.split()
            if "pip" in words and "install" in words:
                installs.append(words[words.index("install") + 1 :])
    assert installs == [
        ["--require-hashes", "-r", "requirements.lock"],
        ["--no-deps", "--no-build-isolation", "."],
    ], installs
    copied = [c.value.split()[:-1] for c in builder.all("COPY")]
    assert copied[0] == ["requirements.lock"], "the lock alone first: its layer outlives source changes"
    uninstall = " ".join(i.value for i in builder.all("RUN"))
    assert "pip uninstall -y -q setuptools wheel" in uninstall, "the build backend stays out of the image"


def test_every_base_is_a_build_arg_so_it_can_be_pinned_by_digest(
    dockerfile: tuple[dict[str, str], list[Stage]],
) -> None:
    """No registry is reachable here, so the defaults are tags; a build that reaches one passes
    `--build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...` (docs/deployment.md)."""
    args, stages = dockerfile
    for stage in stages:
        assert stage.base.startswith("${") and stage.base.endswith("}"), stage.base
    pinned = {**args, "PYTHON_IMAGE": f"{BASE_IMAGE}@sha256:{'0' * 64}"}
    for stage in stages:
        assert resolve(stage.base, pinned).endswith("@sha256:" + "0" * 64), stage
    doc = (REPO / "docs" / "deployment.md").read_text()
    assert "PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:" in doc


def test_builder_copies_every_package_pyproject_installs(builder: Stage, pyproject: dict) -> None:
    copied = set()
    for copy in builder.all("COPY"):
        words = copy.value.split()
        assert not any(w.startswith("--from") for w in words), "the builder copies from the context only"
        copied.update(w.rstrip("/") for w in words[:-1])
    assert "pyproject.toml" in copied
    includes = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    top_level = {pattern.rstrip("*").rstrip(".") for pattern in includes}
    missing = top_level - copied
    assert not missing, f"pyproject installs {sorted(missing)} but the builder never copies them"


def test_runtime_copies_only_the_venv(runtime: Stage) -> None:
    copies = runtime.all("COPY") + runtime.all("ADD")
    assert [c.value for c in copies] == ["--from=builder /opt/queueflow /opt/queueflow"]


def test_runtime_has_no_compilers_or_download_tools(runtime: Stage) -> None:
    text = " ".join(i.value for i in runtime.instructions).lower()
    for banned in ("apt-get", "apk ", "pip install", "gcc", "g++", "build-essential", "curl", "wget"):
        assert banned not in text, f"runtime stage mentions {banned!r}"


def test_runtime_runs_as_uid_10001(runtime: Stage) -> None:
    user = runtime.last("USER").value
    # Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
    assert user.split(":")[0] == UID, user
    assert runtime.instructions.index(runtime.last("USER")) > max(
        runtime.instructions.index(i) for i in runtime.all("RUN")
    ), "USER must come after every RUN"
    useradd = " ".join(i.value for i in runtime.all("RUN"))
    assert f"--uid {UID}" in useradd and f"--gid {UID}" in useradd


def test_entrypoint_is_the_console_script(runtime: Stage, pyproject: dict) -> None:
    entrypoint = runtime.last("ENTRYPOINT").exec_form()
    assert entrypoint == ["queueflow"]
    assert "queueflow" in pyproject["project"]["scripts"]


def test_default_cmd_is_a_valid_serve_invocation(runtime: Stage) -> None:
    cmd = runtime.last("CMD").exec_form()
    assert cmd == ["serve", "--mode", "all"]
    options = parse_cli(serve_option_parser(), cmd[1:])
    assert options.mode == "all"


def test_default_cmd_parses_with_the_real_cli(runtime: Stage) -> None:
    cmd = runtime.last("CMD").exec_form()
    parsed = parse_cli(cli_parser(), cmd)
    if hasattr(parsed, "mode"):
        assert parsed.mode == "all"


def test_exposed_ports_are_the_server_defaults(runtime: Stage) -> None:
    from shared.config import Settings

    exposed = {int(p.split("/")[0]) for i in runtime.all("EXPOSE") for p in i.value.split()}
    assert exposed == {Settings.api_port, Settings.metrics_port}


def test_runtime_env_is_not_server_configuration(runtime: Stage) -> None:
    """The image sets interpreter settings only; server settings belong to the deployment."""
    names = set()
    for env in runtime.all("ENV"):
        for pair in shlex.split(env.value):
            names.add(pair.split("=", 1)[0])
    assert names.isdisjoint(known_env_names()), names & known_env_names()
    assert {"PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PATH"} <= names


def healthcheck_command(runtime: Stage) -> list[str]:
    value = runtime.last("HEALTHCHECK").value
    options, marker, command = value.partition("CMD ")
    assert marker, "HEALTHCHECK ... CMD [...]"
    assert all(o.startswith("--") for o in options.split()), options
    argv = json.loads(command)
    assert isinstance(argv, list), "exec form, so no shell is needed"
    return argv


def test_healthcheck_uses_python_against_the_metrics_port(runtime: Stage) -> None:
    argv = healthcheck_command(runtime)
    assert argv[:2] == ["python", "-c"]
    code = argv[2]
    assert "QUEUEFLOW_METRICS_PORT" in code and "'9090'" in code and "/health" in code
    assert "127.0.0.1" in code
    assert "QUEUEFLOW_METRICS_PORT" in known_env_names()


class _HealthHandler(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).paths.append(self.path)
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def health_server(status: int) -> Iterator[tuple[int, list[str]]]:
    handler = type("Handler", (_HealthHandler,), {"status": status, "paths": []})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler.paths
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def run_healthcheck(runtime: Stage, port: int) -> int:
    argv = healthcheck_command(runtime)
    proc = subprocess.run(
        [sys.executable, *argv[1:]],
        env={"QUEUEFLOW_METRICS_PORT": str(port)},
        capture_output=True,
        timeout=30,
        check=False,
    )
    return proc.returncode


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_command_follows_health(runtime: Stage, status: int, healthy: bool) -> None:
    with health_server(status) as (port, paths):
        code = run_healthcheck(runtime, port)
    assert paths == ["/health"]
    assert (code == 0) is healthy


def test_healthcheck_command_fails_when_nothing_listens(runtime: Stage) -> None:
    with health_server(200) as (port, _):
        pass  # bound, then closed: nothing listens on `port` any more
    assert run_healthcheck(runtime, port) != 0


def ignore_patterns() -> list[tuple[bool, str]]:
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, line.lstrip("!").rstrip("/")))
    return rules


def ignored(path: str, rules: list[tuple[bool, str]]) -> bool:
    """.dockerignore semantics, enough for these patterns: the last matching rule wins."""
    result = False
    for negated, pattern in rules:
        pattern = pattern.removeprefix("**/")
        parts = path.split("/")
        if fnmatch.fnmatch(path, pattern) or any(fnmatch.fnmatch(p, pattern) for p in parts):
            result = not negated
    return result


def test_dockerignore_sends_only_what_the_build_needs(builder: Stage) -> None:
    rules = ignore_patterns()
    assert rules[0] == (False, "*"), "start from 'ignore everything', then allow"
    for copy in builder.all("COPY"):
        for source in copy.value.split()[:-1]:
            assert not ignored(source.rstrip("/"), rules), f"COPY {source} is excluded from the context"
    for path in (
        ".venv",
        ".git",
        "tests",
        "bench",
        "docs",
        ".qfdata",
        "shared/__pycache__",
        "shared/db/__pycache__/x.pyc",
        "queueflow_server.egg-info",
    ):
        assert ignored(path, rules), f"{path} would be sent to the Docker daemon"
    assert not ignored("shared/db/migrations/0001.sql", rules)
