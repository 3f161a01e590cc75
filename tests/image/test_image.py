"""The container image, built and run: `make image-test`.

Runs the image that deploy/tools/build-image.sh built (named by $QF_IMAGE_TEST) with podman,
against this session's PostgreSQL, each container set up as its Kubernetes manifest says: the
prod overlay's args and environment (the Secret's keys filled with test values), its user,
read-only root filesystem with an emptyDir on /tmp, no capabilities, no privilege escalation.
Host networking, so the containers reach PostgreSQL on 127.0.0.1; that is also why each
container gets free ports and a loopback bind address instead of the manifests' 8000/9090.

Skipped unless QF_IMAGE_TEST names an image (the normal `pytest` run never builds one: that
takes minutes and needs root and podman). With it set, a missing podman or kustomize is a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devkit.ports import free_port
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("QF_IMAGE_TEST", "")

pytestmark = [
    pytest.mark.skipif(not IMAGE, reason="set QF_IMAGE_TEST=<image> (make image-test builds and sets it)"),
    pytest.mark.timeout(600),
]

DEPLOY_TESTS = str(REPO / "tests" / "deploy")
if DEPLOY_TESTS not in sys.path:
    sys.path.insert(0, DEPLOY_TESTS)

import qf_deploy_helpers as manifests  # noqa: E402

WORKER_TOKEN = "w-image-test"
TENANT_KEY = "k-image-test"
TENANT = {"Authorization": f"Bearer {TENANT_KEY}"}
WORKER = {"Authorization": f"Bearer {WORKER_TOKEN}"}
OVERLAY = "prod"


# --- podman -----------------------------------------------------------------------------------


def podman_flags() -> tuple[list[str], list[str]]:
    """The global and run flags deploy/tools/podman-flags.sh settles on (the build used them)."""
    script = REPO / "deploy" / "tools" / "podman-flags.sh"
    show = (
        f"source {shlex.quote(str(script))}"
        ' && echo "${QF_PODMAN_GLOBAL_FLAGS[*]}" && echo "${QF_PODMAN_RUN_FLAGS[*]}"'
    )
    shown = subprocess.run(
        ["bash", "-c", show],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    global_flags, run_flags = shown.stdout.splitlines()
    return global_flags.split(), run_flags.split()


GLOBAL_FLAGS, RUN_FLAGS = podman_flags() if IMAGE else ([], [])


async def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    proc = await asyncio.create_subprocess_exec(
        "podman",
        *GLOBAL_FLAGS,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {proc.returncode}:\n{err.decode()}")
    return out.decode()


# --- the manifests ----------------------------------------------------------------------------


@dataclass
class Pod:
    """What a manifest says about one container, as podman flags and an argv."""

    component: str
    args: list[str]
    env: dict[str, str]
    security: list[str]
    user: str


@pytest.fixture(scope="module")
def pods() -> dict[str, Pod]:
    kustomize = manifests.find_kustomize()
    if kustomize is None:
        pytest.fail("kustomize is missing: `make tools` installs it", pytrace=False)
    rendered = manifests.render_overlay(kustomize, OVERLAY)
    secret = manifests.load_secret_example()
    secret["stringData"] = {
        "DATABASE_URL": "set per test",
        "QUEUEFLOW_WORKER_TOKEN": WORKER_TOKEN,
        "QUEUEFLOW_API_KEYS": f"{TENANT_KEY}:acme",
    }
    found = {}
    for owner in rendered.pod_owners():
        pod_spec = manifests.pod_spec(owner)
        (container,) = pod_spec["containers"]
        context = {**pod_spec.get("securityContext", {}), **container.get("securityContext", {})}
        assert context["runAsNonRoot"] is True
        security = ["--cap-drop=all"] if context["capabilities"]["drop"] == ["ALL"] else []
        if context["allowPrivilegeEscalation"] is False:
            security.append("--security-opt=no-new-privileges")
        if context["readOnlyRootFilesystem"]:
            # Only what the pod mounts is writable: podman's own tmpfs set (/tmp, /var/tmp,
            # /run) is turned off and the emptyDirs come back as tmpfs mounts.
            security += ["--read-only", "--read-only-tmpfs=false"]
        volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            empty_dir = volumes[mount["name"]]["emptyDir"]
            size = empty_dir.get("sizeLimit", "64Mi").removesuffix("i").lower()
            security.append(f"--tmpfs={mount['mountPath']}:rw,size={size},mode=1777")
        component = manifests.component(owner)
        found[component] = Pod(
            component=component,
            args=manifests.invocation(container),
            env=manifests.container_env(rendered, container, secret),
            security=security,
            user=f"{context['runAsUser']}:{context['runAsGroup']}",
        )
    assert {"api", "janitor", "workflow", "worker", "migrate"} <= set(found), sorted(found)
    return found


# --- containers -------------------------------------------------------------------------------


@dataclass
class Container:
    name: str
    mode: str
    api_port: int
    metrics_port: int
    serves_api: bool
    exit_code: int | None = None
    logs: str = ""

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"


class Fleet:
    """The containers of one test: started detached, stopped and removed at the end."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.tag = uuid.uuid4().hex[:8]
        self.started: list[Container] = []

    def _run_flags(self, pod: Pod, api_port: int, metrics_port: int) -> list[str]:
        env = {
            **pod.env,
            "DATABASE_URL": self.database_url,
            # Host networking: free ports and loopback only, instead of 8000/9090 on every address.
            "QUEUEFLOW_API_PORT": str(api_port),
            "QUEUEFLOW_METRICS_PORT": str(metrics_port),
            "QUEUEFLOW_HOST": "127.0.0.1",
        }
        flags = [*RUN_FLAGS, "--network=host", f"--user={pod.user}", *pod.security]
        # No systemd here to drive podman's health-check timer; the test runs the check itself.
        flags.append("--health-interval=disable")
        for name, value in sorted(env.items()):
            flags += ["--env", f"{name}={value}"]
        return flags

    async def run_to_completion(self, pod: Pod) -> str:
        """A run-once container (the migrations Job): its output, after checking it exited 0."""
        flags = self._run_flags(pod, free_port(), free_port())
        return await podman("run", "--rm", *flags, IMAGE, *pod.args, timeout=300)

    async def start(self, pod: Pod, args: list[str] | None = None, mode: str | None = None) -> Container:
        argv = pod.args if args is None else args
        mode = mode or argv[argv.index("--mode") + 1]
        api_port, metrics_port = free_port(), free_port()
        container = Container(
            name=f"qf-image-{self.tag}-{mode}",
            mode=mode,
            api_port=api_port,
            metrics_port=metrics_port,
            serves_api=mode in ("api", "all"),
        )
        flags = self._run_flags(pod, api_port, metrics_port)
        await podman("run", "--detach", f"--name={container.name}", *flags, IMAGE, *argv)
        self.started.append(container)
        return container

    async def stop(self, container: Container) -> None:
        """SIGTERM (the image's STOPSIGNAL), wait for the drain, record exit code and logs."""
        await podman("stop", "--time=60", container.name, timeout=90)
        state = json.loads(await podman("inspect", "--format={{json .State}}", container.name))
        container.exit_code = int(state["ExitCode"])
        container.logs = await podman("logs", container.name)

    async def remove_all(self) -> None:
        for container in self.started:
            if container.exit_code is None:
                container.logs = await podman("logs", container.name, check=False)
                print(f"--- {container.name} ---\n{container.logs[-4000:]}")
            await podman("rm", "--force", container.name, check=False)


@pytest.fixture
async def fleet(empty_database: str) -> AsyncIterator[Fleet]:
    group = Fleet(empty_database)
    try:
        yield group
    finally:
        await group.remove_all()


# --- checks -----------------------------------------------------------------------------------


async def wait_ready(http: aiohttp.ClientSession, container: Container) -> None:
    async def ready() -> bool:
        state = await podman("inspect", "--format={{.State.Status}}", container.name)
        assert state.strip() == "running", f"{container.name} is {state.strip()}"
        try:
            async with http.get(f"{container.metrics_url}/ready") as resp:
                return resp.status == 200
        except aiohttp.ClientConnectionError:
            return False

    await eventually(ready, timeout=60, interval=0.2, message=f"{container.name} never became ready")


async def check_probes(http: aiohttp.ClientSession, container: Container) -> None:
    """/health and /ready on every listener of the mode, /metrics on the metrics port, and the
    image's own HEALTHCHECK command run inside the container."""
    bases = [container.metrics_url] + ([container.api_url] if container.serves_api else [])
    for base in bases:
        for path in ("/health", "/ready"):
            async with http.get(base + path) as resp:
                assert resp.status == 200, (container.name, base + path, await resp.text())
    async with http.get(f"{container.metrics_url}/metrics") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/plain"
        text = await resp.text()
    assert "# TYPE queueflow_" in text, text[:500]
    if not container.serves_api:
        # Non-API modes open no API listener at all.
        with pytest.raises(aiohttp.ClientConnectionError):
            async with http.get(f"{container.api_url}/health"):
                pass
    # The process runs as the manifest's user; only the emptyDir (/tmp) is writable, and the
    # root filesystem is read-only even for root.
    inside = await podman(
        "exec", container.name, "sh", "-c", "id -u; id -g; touch /tmp/probe && echo tmp-writable"
    )
    assert inside.split() == ["10001", "10001", "tmp-writable"], inside
    as_root = await podman(
        "exec", "--user=0", container.name, "sh", "-c", "touch /etc/probe 2>&1", check=False
    )
    assert "Read-only file system" in as_root, as_root
    health = await podman("healthcheck", "run", container.name, check=False)
    assert "unhealthy" not in health, (container.name, health)
    status = await podman("inspect", "--format={{.State.Health.Status}}", container.name)
    assert status.strip() == "healthy", (container.name, status)


async def create_job(http: aiohttp.ClientSession, base: str, body: dict[str, Any]) -> str:
    async with http.post(f"{base}/api/v1/jobs", json=body, headers=TENANT) as resp:
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["job_id"])


async def get_job(http: aiohttp.ClientSession, base: str, job_id: str) -> dict[str, Any]:
    async with http.get(f"{base}/api/v1/jobs/{job_id}", headers=TENANT) as resp:
        assert resp.status == 200, await resp.text()
        return dict(await resp.json())


async def job_finishes(http: aiohttp.ClientSession, base: str, job_id: str) -> dict[str, Any]:
    async def done() -> dict[str, Any] | None:
        job = await get_job(http, base, job_id)
        return job if job["status"] in ("completed", "failed") else None

    return await eventually(done, timeout=60, interval=0.2)


async def workflow_completes(http: aiohttp.ClientSession, base: str) -> None:
    body = {
        "name": "image-test",
        "steps": [
            {"name": "a", "task_name": "echo", "payload": {"step": "a"}},
            {"name": "b", "task_name": "echo", "depends_on": ["a"]},
        ],
    }
    async with http.post(f"{base}/api/v1/workflows", json=body, headers=TENANT) as resp:
        assert resp.status == 201, await resp.text()
        workflow_id = (await resp.json())["workflow_id"]

    async def done() -> str | None:
        async with http.get(f"{base}/api/v1/workflows/{workflow_id}", headers=TENANT) as resp:
            status = (await resp.json())["status"]
        return status if status in ("completed", "failed") else None

    assert await eventually(done, timeout=60, interval=0.2) == "completed"


async def lease(http: aiohttp.ClientSession, base: str, queue: str, lease_secs: int) -> dict[str, Any]:
    async with http.post(
        f"{base}/api/v1/queues/{queue}/lease",
        json={"max_jobs": 1, "lease_secs": lease_secs, "wait_secs": 5},
        headers=WORKER,
    ) as resp:
        assert resp.status == 200, await resp.text()
        (leased,) = (await resp.json())["jobs"]
        return dict(leased)


async def stop_cleanly(fleet: Fleet, container: Container) -> None:
    await fleet.stop(container)
    assert container.exit_code == 0, (
        f"{container.name} exited {container.exit_code}:\n{container.logs[-4000:]}"
    )
    assert "Traceback" not in container.logs, container.logs[-4000:]


# --- the tests --------------------------------------------------------------------------------


async def test_the_image_is_small_non_root_and_has_no_toolchain() -> None:
    (inspected,) = json.loads(await podman("image", "inspect", IMAGE))
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["queueflow"]
    assert config["Cmd"] == ["serve", "--mode", "all"]
    # The Docker-format HEALTHCHECK, which podman lists beside the OCI config (no field there).
    assert inspected["Healthcheck"]["Test"][:3] == ["CMD", "python", "-c"]
    size = int(inspected["Size"])
    print(f"{IMAGE}: {size / 1e6:.0f} MB")
    probe = (
        "for tool in gcc cc c++ make apt-get curl wget git; do "
        '  command -v "$tool" && exit 1; '
        "done; "
        "test ! -e /src && test ! -e /opt/queueflow/lib/python3.11/site-packages/tests && "
        "id -u && touch /opt/queueflow/probe 2>/dev/null && exit 2; "
        "python -c 'import shared.db, services.cli; print(\"ok\")'"
    )
    out = await podman(
        "run", "--rm", *RUN_FLAGS, "--network=none", "--entrypoint=sh", IMAGE, "-c", probe, check=False
    )
    assert out.split() == ["10001", "ok"], out


async def test_the_kubernetes_topology_runs_from_the_image(fleet: Fleet, pods: dict[str, Pod]) -> None:
    """migrate, then api + janitor + workflow + worker, as the manifests run them."""
    migrated = await fleet.run_to_completion(pods["migrate"])
    assert "Traceback" not in migrated
    containers = {
        component: await fleet.start(pods[component])
        for component in ("api", "janitor", "workflow", "worker")
    }
    api = containers["api"].api_url
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        for container in containers.values():
            await wait_ready(http, container)
        for container in containers.values():
            await check_probes(http, container)

        # Enqueued through the api container, run by the worker container's in-process handler.
        echo = await create_job(http, api, {"task_name": "echo", "payload": {"n": 1}})
        done = await job_finishes(http, api, echo)
        assert (done["status"], done["result"]) == ("completed", {"n": 1, "echoed": True}), done

        # A queue no in-process worker serves: a remote worker leases and completes it through
        # the api container's worker protocol.
        remote = await create_job(
            http,
            api,
            {"task_name": "resize-image", "payload": {"img": "a.png"}, "config": {"queue": "remote"}},
        )
        leased = await lease(http, api, "remote", 60)
        assert leased["job"]["id"] == remote
        async with http.post(
            f"{api}/api/v1/jobs/{remote}/complete",
            json={"lease_token": leased["lease_token"], "result": {"thumb": "a-small.png"}},
            headers=WORKER,
        ) as resp:
            assert resp.status == 204, await resp.text()
        done = await get_job(http, api, remote)
        assert (done["status"], done["result"]) == ("completed", {"thumb": "a-small.png"}), done

        # The janitor container reclaims a lease that nobody completes.
        abandoned = await create_job(
            http, api, {"task_name": "resize-image", "payload": {}, "config": {"queue": "remote"}}
        )
        assert (await lease(http, api, "remote", 1))["job"]["id"] == abandoned

        async def reclaimed() -> dict[str, Any] | None:
            job = await get_job(http, api, abandoned)
            return job if job["status"] != "running" else None

        job = await eventually(reclaimed, timeout=60, interval=0.2)
        assert job["retry_count"] == 1, job

        # The workflow container advances a two-step workflow the worker container runs.
        await workflow_completes(http, api)

        async with http.get(f"{containers['worker'].metrics_url}/metrics") as resp:
            assert 'task="echo"' in await resp.text()

    for component in ("api", "worker", "workflow", "janitor"):
        await stop_cleanly(fleet, containers[component])


async def test_all_mode_runs_from_the_image_default_command(fleet: Fleet, pods: dict[str, Pod]) -> None:
    """The image's default CMD (`serve --mode all`), with the api pod's settings."""
    await fleet.run_to_completion(pods["migrate"])
    container = await fleet.start(pods["api"], args=[], mode="all")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await wait_ready(http, container)
        await check_probes(http, container)
        job_id = await create_job(http, container.api_url, {"task_name": "echo", "payload": {"n": 2}})
        done = await job_finishes(http, container.api_url, job_id)
        assert (done["status"], done["result"]) == ("completed", {"n": 2, "echoed": True}), done
        await workflow_completes(http, container.api_url)
    await stop_cleanly(fleet, container)
