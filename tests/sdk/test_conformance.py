"""The SDK conformance suite: every scenario of sdks/conformance/scenarios against every SDK's
runner, on a real server (an api and a janitor process with real credentials, plus any process a
scenario's `server.processes` asks for). See sdks/conformance/README.md for the runner contract."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from devkit.procs import ServiceProcess
from tests.sdk.builds import LANGUAGES, build, runner_command
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((REPO / "sdks" / "conformance" / "scenarios").glob("*.json"))
TENANT_TOKEN = "conf-tenant-key"
OTHER_TENANT_TOKEN = "conf-other-tenant-key"
WORKER_TOKEN = "conf-worker-token"
CREDENTIALS = [
    "--worker-token",
    WORKER_TOKEN,
    "--api-keys",
    f"{TENANT_TOKEN}:conformance,{OTHER_TENANT_TOKEN}:conformance-other",
]
TENANT = {"Authorization": f"Bearer {TENANT_TOKEN}"}
OTHER_TENANT = {"Authorization": f"Bearer {OTHER_TENANT_TOKEN}"}
RUNNER_DEADLINE = 60.0


class Cluster:
    """An api and a janitor process on the test's database; the api can be restarted in place."""

    def __init__(self, database_url: str, log_dir: Path) -> None:
        self.database_url = database_url
        self.log_dir = log_dir
        self.procs: list[ServiceProcess] = []
        self.api: ServiceProcess | None = None

    async def start(self) -> None:
        self.api = await self._spawn("api", [])
        await self._spawn("janitor", ["--janitor-interval-secs", "0.2"])

    async def add(self, mode: str) -> None:
        """One more process of `mode` (`server.processes`), e.g. `workflow`: the advancer and the
        timers of sleeping and waiting steps, which neither the api nor the janitor runs."""
        if mode in ("api", "janitor", "all"):
            raise AssertionError(f"server.processes: {mode!r} runs already or would serve a second api")
        await self._spawn(mode, [])

    async def _spawn(self, mode: str, extra: list[str], port: int | None = None) -> ServiceProcess:
        args = [*CREDENTIALS, *extra] if mode == "api" else extra
        proc = ServiceProcess(self.database_url, mode=mode, dev=False, extra_args=args, log_dir=self.log_dir)
        if port is not None:
            proc.api_port = port
            proc.argv += ["--api-port", str(port)]
        self.procs.append(proc)
        return await proc.start()

    async def restart_api(self) -> None:
        assert self.api is not None
        port = self.api.api_port
        await self.api.kill()
        self.api = await self._spawn("api", [], port=port)

    async def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.started and proc.returncode is None:
                await proc.kill()


@pytest.fixture
async def cluster(database_url, tmp_path):
    c = Cluster(database_url, tmp_path)
    await c.start()
    yield c
    await c.stop()


async def create_jobs(
    base_url: str, queue: str, jobs: list[dict[str, Any]], headers: dict[str, str] = TENANT
) -> list[str]:
    ids = []
    async with aiohttp.ClientSession() as http:
        for job in jobs:
            job = dict(job)
            sent = {**headers, **job.pop("headers", {})}
            body = {**job, "config": {**job.get("config", {}), "queue": queue}}
            async with http.post(f"{base_url}/api/v1/jobs", json=body, headers=sent) as resp:
                assert resp.status == 201, await resp.text()
                ids.append((await resp.json())["job_id"])
    return ids


class HidingProxy:
    """A front for the api that behaves like a server without some routes (an upstream server that
    lacks an extension): each hidden route answers 404 with the contract's error body and
    /openapi.json does not list it; everything else is passed through."""

    def __init__(self, upstream: str, hidden: list[str]) -> None:
        self.upstream = upstream
        self.hidden = {tuple(route.split(" ", 1)) for route in hidden}
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.forward)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"

    async def forward(self, request: web.Request) -> web.StreamResponse:
        if (request.method, request.path) in self.hidden:
            return web.json_response({"error": "not found", "timestamp": "2026-01-01T00:00:00Z"}, status=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                request.method,
                f"{self.upstream}{request.path_qs}",
                data=await request.read(),
                headers=headers,
            ) as resp,
        ):
            body = await resp.read()
            if request.path == "/openapi.json" and resp.status == 200:
                doc = json.loads(body)
                for method, path in self.hidden:
                    doc["paths"].get(path, {}).pop(method.lower(), None)
                    if not doc["paths"].get(path, True):
                        del doc["paths"][path]
                return web.json_response(doc)
            passed = {k: v for k, v in resp.headers.items() if k.lower() in ("content-type", "retry-after")}
            return web.Response(status=resp.status, body=body, headers=passed)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def calls_served(cluster: Cluster) -> dict[str, float]:
    """Requests the api has served, per "METHOD route" (every status), from its /metrics."""
    async with aiohttp.ClientSession() as http, http.get(f"{cluster.api.metrics_url}/metrics") as resp:
        text = await resp.text()
    served: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "queueflow_http_requests_total":
                key = f"{sample.labels['method']} {sample.labels['route']}"
                served[key] = served.get(key, 0.0) + sample.value
    return served


async def mint_worker_key(base_url: str, queue: str, spec: dict[str, Any]) -> str:
    """`setup.worker_key`: a key of the scenario's tenant (limited to the scenario's queue when
    `queue_only`); its token is the runner's worker token."""
    body = {"name": spec["name"], "queues": [queue] if spec.get("queue_only") else None}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base_url}/api/v1/worker-keys", json=body, headers=TENANT) as resp,
    ):
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["token"])


async def get_json(base_url: str, path: str, headers: dict[str, str] = TENANT) -> Any:
    async with aiohttp.ClientSession() as http, http.get(f"{base_url}{path}", headers=headers) as resp:
        return resp.status, await resp.json()


class Run:
    """One runner process and the events it has emitted."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.stderr = b""

    def count(self, name: str) -> int:
        return sum(1 for e in self.events if e.get("event") == name)

    def first(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e.get("event") == name), None)


async def act(action: dict[str, Any], event: dict[str, Any], run: Run, cluster: Cluster, db) -> None:
    what = action["do"]
    if what == "cancel_job":
        async with aiohttp.ClientSession() as http:
            url = f"{cluster.api.base_url}/api/v1/jobs/{event['job_id']}/cancel"
            async with http.post(url, headers=TENANT) as resp:
                assert resp.status == 204, await resp.text()
    elif what == "expire_lease_and_wait_reclaim":
        job_id = uuid.UUID(event["job_id"])
        await db.execute(
            "UPDATE queueflow.jobs SET locked_until = now() - interval '1 second' WHERE id = $1", job_id
        )

        async def reclaimed():
            return await db.fetchval("SELECT status FROM queueflow.jobs WHERE id = $1", job_id) != "running"

        await eventually(reclaimed, timeout=20)
    elif what == "restart_api":
        await cluster.restart_api()
    else:
        raise AssertionError(f"unknown scenario action {what!r}")
    if action.get("then") == "continue":
        run.proc.stdin.write(b"continue\n")
        await run.proc.stdin.drain()


async def drive(
    language: str,
    scenario: dict[str, Any],
    path: Path,
    cluster: Cluster,
    db,
    queue: str,
    base_url: str,
    worker_token: str = WORKER_TOKEN,
) -> Run:
    env = {
        **os.environ,
        "QF_BASE_URL": base_url,
        "QF_TENANT_TOKEN": TENANT_TOKEN,
        "QF_WORKER_TOKEN": worker_token,
        "QF_QUEUE": queue,
    }
    argv, extra_env = runner_command(language)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        str(path),
        cwd=REPO,
        env={**env, **extra_env},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    run = Run(proc)
    actions = scenario.get("actions", [])
    stderr_task = asyncio.create_task(proc.stderr.read())

    async def read_events() -> None:
        while line := await proc.stdout.readline():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a runner's stray output is not an event
            run.events.append(event)
            for action in actions:
                if action["on_event"] == event.get("event") and run.count(event["event"]) == action.get(
                    "nth", 1
                ):
                    await act(action, event, run, cluster, db)

    try:
        async with asyncio.timeout(RUNNER_DEADLINE):
            await read_events()
            await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        run.stderr = await stderr_task
        raise AssertionError(
            f"{language} runner did not finish {scenario['name']} within {RUNNER_DEADLINE}s; "
            f"events {run.events}; stderr {run.stderr.decode(errors='replace')[-2000:]}"
        ) from None
    run.stderr = await stderr_task
    return run


def check_job(expected: dict[str, Any], job: dict[str, Any], dead: dict[str, Any] | None, where: str) -> None:
    for key, want in expected.items():
        if key == "progress":  # the server adds the time of the report
            got = {k: v for k, v in (job.get("progress") or {}).items() if k != "updated_at"}
            assert got == want, f"{where}: progress {job.get('progress')!r}, expected {want!r}"
        elif key == "dead_letter_reason":
            assert dead is not None and dead["reason"] == want, f"{where}: dead letter {dead} != {want}"
        elif want is None:
            assert job.get(key) is None, f"{where}: {key} = {job.get(key)!r}, expected absent"
        else:
            assert job.get(key) == want, f"{where}: {key} = {job.get(key)!r}, expected {want!r}"


@pytest.fixture
def built(language: str) -> str:
    """The SDK built (once per session; a cold Rust or TypeScript build can take minutes on a fresh
    machine, so it happens here, outside the test's timeout)."""
    build(language)
    return language


# func_only: the timeout covers the scenario, not the SDK build in the fixture above.
@pytest.mark.timeout(150, func_only=True)
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
@pytest.mark.parametrize("language", LANGUAGES)
async def test_sdk_conformance(language, built, path, cluster, db):
    scenario = json.loads(path.read_text())
    queue = f"conf-{language}-{scenario['name']}"
    for mode in scenario.get("server", {}).get("processes", []):
        await cluster.add(mode)
    job_ids = await create_jobs(cluster.api.base_url, queue, scenario["setup"]["jobs"])
    other_ids = await create_jobs(
        cluster.api.base_url, queue, scenario["setup"].get("other_tenant_jobs", []), OTHER_TENANT
    )
    worker_token = WORKER_TOKEN
    if key := scenario["setup"].get("worker_key"):
        worker_token = await mint_worker_key(cluster.api.base_url, queue, key)

    proxy = None
    base_url = cluster.api.base_url
    if hidden := scenario.get("server", {}).get("hide_routes"):
        proxy = HidingProxy(cluster.api.base_url, hidden)
        await proxy.start()
        base_url = proxy.base_url
    try:
        run = await drive(language, scenario, path, cluster, db, queue, base_url, worker_token)
    finally:
        if proxy is not None:
            await proxy.stop()
    where = f"{language}/{scenario['name']}"
    assert run.proc.returncode == 0, (
        f"{where}: runner exited {run.proc.returncode}; events {run.events}; "
        f"stderr {run.stderr.decode(errors='replace')[-3000:]}"
    )

    expect = scenario["expect"]
    for name in expect.get("events", []):
        assert run.count(name) >= 1, f"{where}: no {name!r} event; got {run.events}"
    for name, fields in expect.get("event_fields", {}).items():
        event = run.first(name)
        for key, want in fields.items():
            assert event.get(key) == want, (
                f"{where}: {name}.{key} = {event.get(key)!r}, expected {want!r} ({event})"
            )
    for i, (job_id, want) in enumerate(zip(job_ids, expect.get("jobs", []), strict=True)):
        status, job = await get_json(cluster.api.base_url, f"/api/v1/jobs/{job_id}")
        assert status == 200
        _, dlq = await get_json(cluster.api.base_url, f"/api/v1/dlq?queue={queue}&limit=100")
        dead = next((d for d in dlq["dead_letters"] if d["job_id"] == job_id), None)
        check_job(want, job, dead, f"{where} job {i}")
    for i, (job_id, want) in enumerate(zip(other_ids, expect.get("other_tenant_jobs", []), strict=True)):
        status, job = await get_json(cluster.api.base_url, f"/api/v1/jobs/{job_id}", OTHER_TENANT)
        assert status == 200
        check_job(want, job, None, f"{where} other tenant's job {i}")
    await check_visibility(expect, job_ids, run, cluster.api.base_url, queue, language, where)
    if calls := expect.get("calls"):
        served = await calls_served(cluster)
        for route, want in calls.items():
            count = served.get(route, 0.0)
            if want == "some":
                ok = count > 0
            elif want == "none":
                ok = count == 0
            else:
                ok = want["min"] <= count <= want["max"]
            assert ok, f"{where}: the api served {route} {count:g} times, expected {want}; served {served}"


def each(value: Any, count: int) -> list[Any]:
    """An expectation given as a list, or as one value for each of `count` items."""
    return list(value) if isinstance(value, list) else [value] * count


async def check_visibility(
    expect: dict[str, Any], job_ids: list[str], run: Run, base_url: str, queue: str, language: str, where: str
) -> None:
    """`expect.logs`, `expect.attempts`, `expect.workers` and `expect.spans` (the README's
    Visibility section): what the worker loop reported, read back through the API, and the spans
    the runner's in-memory exporter saw."""
    for job_id, want in zip(job_ids, expect.get("logs", []), strict=False):
        status, page = await get_json(base_url, f"/api/v1/jobs/{job_id}/logs?limit=1000")
        assert status == 200, page
        lines = page["lines"]
        count = want["count"]
        assert len(lines) == count, (
            f"{where}: job {job_id} has {len(lines)} log lines, expected {count}: {lines}"
        )
        template = want["messages"]
        messages = (
            [template.format(n=n) for n in range(1, count + 1)] if isinstance(template, str) else template
        )
        assert [line["message"] for line in lines] == messages, f"{where}: log messages {lines}"
        assert [line["seq"] for line in lines] == list(range(1, count + 1)), f"{where}: log seqs {lines}"
        assert [line["level"] for line in lines] == each(want["levels"], count), f"{where}: levels {lines}"
        assert [line["attempt"] for line in lines] == each(want["attempts"], count), (
            f"{where}: attempts {lines}"
        )
    for job_id, want in zip(job_ids, expect.get("attempts", []), strict=False):
        status, body = await get_json(base_url, f"/api/v1/jobs/{job_id}/attempts")
        assert status == 200, body
        got = body["attempts"]
        assert len(got) == len(want), f"{where}: job {job_id} attempts {got}, expected {want}"
        for attempt, fields in zip(got, want, strict=True):
            for key, value in fields.items():
                assert attempt.get(key) == value, f"{where}: attempt {attempt} has {key} != {value!r}"
    if wanted := expect.get("workers"):
        status, body = await get_json(base_url, "/api/v1/workers")
        assert status == 200, body
        listed = {w["worker_id"]: w for w in body["workers"]}
        for want in wanted:
            worker = listed.get(want["worker_id"])
            assert worker is not None, f"{where}: worker {want['worker_id']} not listed: {body}"
            info = worker.get("info", {})
            assert worker["live"] is True and worker["queues"] == [queue], f"{where}: worker {worker}"
            assert info.get("sdk") == language, f"{where}: worker info {info}"
            assert set(want["tasks"]) <= set(info.get("tasks", [])), f"{where}: worker tasks {info}"
            for field in ("version", "hostname"):
                assert isinstance(info.get(field), str) and info[field], f"{where}: worker {field}: {info}"
    for job_id, want in zip(job_ids, expect.get("spans", []), strict=False):
        spans = [e for e in run.events if e.get("event") == "worker_span" and e.get("job_id") == job_id]
        assert len(spans) == want["count"], f"{where}: job {job_id} worker spans {spans}"
        status, job = await get_json(base_url, f"/api/v1/jobs/{job_id}")
        for span, attempt in zip(spans, want["attempts"], strict=True):
            assert span["name"] == f"process {queue}" and span["kind"] == "consumer", f"{where}: span {span}"
            assert span["status"] == want["status"], f"{where}: span status {span}"
            assert span["parent_span_id"] == want["parent_span_id"], f"{where}: span parent {span}"
            if "trace_id" in want:
                assert span["trace_id"] == want["trace_id"], f"{where}: span trace {span}"
            assert span["attributes"] == {
                **span["attributes"],
                "messaging.system": "queueflow",
                "messaging.operation": "process",
                "messaging.destination.name": queue,
                "messaging.message.id": job_id,
                "queueflow.task.name": job["task_name"],
                "queueflow.job.attempt": attempt,
            }, f"{where}: span attributes {span}"
            for key in ("trace_id", "span_id"):
                assert len(span[key]) == (32 if key == "trace_id" else 16), f"{where}: span ids {span}"
        if want.get("handler_span"):
            seen = [e for e in run.events if e.get("event") == "handler_span" and e.get("job_id") == job_id]
            assert [(e["trace_id"], e["span_id"]) for e in seen] == [
                (s["trace_id"], s["span_id"]) for s in spans
            ], f"{where}: the handler's current span {seen} is not the worker span {spans}"


def test_every_language_has_a_runner_and_every_scenario_is_listed():
    assert set(LANGUAGES) == {"python", "typescript", "go", "rust"}
    names = {json.loads(p.read_text())["name"] for p in SCENARIOS}
    assert names == {p.stem for p in SCENARIOS}
    readme = (REPO / "sdks" / "conformance" / "README.md").read_text()
    modes = {json.loads(p.read_text())["worker"]["mode"] for p in SCENARIOS}
    for mode in modes:
        assert f"**`{mode}`**" in readme, f"worker mode {mode} is not documented in the runner contract"


if sys.platform == "win32":  # pragma: no cover
    pytest.skip("the runners are POSIX programs", allow_module_level=True)
