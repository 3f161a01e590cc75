"""The split topology of deploy/k8s, locally: the stand-in for the cluster that CI can run.

One PostgreSQL and the services as separate `queueflow serve` processes, as the manifests run
them: api x2, janitor x2, workflow x2, worker x1. Production settings: real credentials (no
--dev; only the apis get them), migrations off (the test database is already migrated, as the
migrations Job would have done), and each service's pool size read from its Deployment in
deploy/k8s/base. Short leases, retry delays and janitor intervals keep the run short.

While a producer enqueues jobs and workflows through both apis and a remote worker leases from
its own queue through both apis (with heartbeats), one replica of every service is SIGKILLed at
once (a node loss: no drain) and replaced. Afterwards nothing may be lost or done twice:

- every job ends as intended: completed, except the permanently failing jobs enqueued on purpose
  (their dead letters are the only ones) and the step job of the one workflow that must time out;
- every workflow completes, except that one, which a surviving janitor fails on its deadline;
- each workflow step job exists once per (workflow, step, fan-out index) and was delivered once,
  or twice (delivery_count 2, one retry) when the killed worker held it; no completion of a job,
  a step or a workflow is recorded twice (audit triggers in this test's database see every
  transition);
- the outbox is empty, and every process that was not killed is still running and drains on
  SIGTERM with exit status 0.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
import yaml

from devkit.procs import ServiceProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

BASE = Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "base"

WORKER_TOKEN = "topology-worker-token"
API_KEY = "topology-tenant-key"
TENANT = "acme"
TENANT_AUTH = {"Authorization": f"Bearer {API_KEY}"}
WORKER_AUTH = {"Authorization": f"Bearer {WORKER_TOKEN}"}

QUEUE = "default"  # the in-process worker's queue, and the workflow steps'
REMOTE_QUEUE = "remote-topology"  # only the remote HTTP worker leases from it

REPLICAS = {"api": 2, "janitor": 2, "workflow": 2, "worker": 1}
COMMON_FLAGS = ["--auto-migrate", "false", "--shutdown-grace-secs", "5"]
SERVICE_FLAGS = {
    "api": ["--worker-token", WORKER_TOKEN, "--api-keys", f"{API_KEY}:{TENANT}"],
    "janitor": ["--janitor-interval-secs", "0.2"],
    "workflow": [],
    # A job's lease is max(--lease-secs, timeout + grace) = 3 s: a killed worker's jobs come back fast.
    "worker": ["--workers", "8", "--lease-secs", "2", "--lease-grace-secs", "1"],
}

WAVES = 10
ECHO_PER_WAVE = 36
SLEEP_PER_WAVE = 4  # 0.5 s each, so that the worker is killed with a handler mid-run
REMOTE_PER_WAVE = 6
WORKFLOWS_PER_WAVE = 6
FAN_OUT_EVERY = 6  # every sixth workflow fans its step b out over the context's array
FAN_OUT_ITEMS = 10
INTENDED_FAILURES = 5
MAX_OUTSTANDING = 120  # standalone jobs the producer keeps queued ahead of the worker
KILL_AFTER_COMPLETED = 80
REMOTE_LEASE_SECS = 5

# A retry runs at once (fixed backoff, no delay, no jitter); the timeout bounds the lease.
JOB_CONFIG = {
    "timeout": 2,
    "max_retries": 3,
    "retry_backoff": "fixed",
    "retry_delay_secs": 0,
    "jitter_factor": 0.0,
}
STEP_CONFIG = {
    "timeout_secs": 2,
    "max_retries": 3,
    "retry_backoff": "fixed",
    "retry_delay_secs": 0,
    "jitter_factor": 0.0,
}
TIMEOUT_MARKER = "must-time-out"

ServiceFactory = Callable[..., Awaitable[ServiceProcess]]
Reply = tuple[int, Any]


def manifest_pool_flags(mode: str) -> list[str]:
    """The pool bounds the service's Deployment sets (QUEUEFLOW_{MAX,MIN}_DB_CONNECTIONS)."""
    docs = [d for d in yaml.safe_load_all((BASE / f"{mode}.yaml").read_text()) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["serve", "--mode", mode], container["args"]
    env = {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}
    return [
        "--max-db-connections",
        env["QUEUEFLOW_MAX_DB_CONNECTIONS"],
        "--min-db-connections",
        env["QUEUEFLOW_MIN_DB_CONNECTIONS"],
    ]


# Every completion of a job or a step and every settlement of a workflow, as it commits.
AUDIT_SQL = """
CREATE TABLE public.topology_audit (
    kind text NOT NULL, key text NOT NULL, detail integer, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION public.topology_audit_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.topology_audit (kind, key, detail) VALUES ('job', NEW.id::text, NEW.delivery_count);
    RETURN NULL;
END $$;
CREATE TRIGGER topology_audit_job AFTER UPDATE OF status ON queueflow.jobs FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status = 'completed')
    EXECUTE FUNCTION public.topology_audit_job();
CREATE FUNCTION public.topology_audit_step() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.topology_audit (kind, key, detail) VALUES ('step', NEW.workflow_id || '/' || NEW.name, NEW.attempt);
    RETURN NULL;
END $$;
CREATE TRIGGER topology_audit_step AFTER UPDATE OF status ON queueflow.workflow_steps FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status = 'completed')
    EXECUTE FUNCTION public.topology_audit_step();
CREATE FUNCTION public.topology_audit_workflow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.topology_audit (kind, key) VALUES ('workflow', NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER topology_audit_workflow AFTER UPDATE OF status ON queueflow.workflows FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('completed', 'failed', 'partially_failed', 'cancelled'))
    EXECUTE FUNCTION public.topology_audit_workflow();
"""


async def _json_codec(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", schema="pg_catalog", encoder=json.dumps, decoder=json.loads)


class Topology:
    """The live processes per service, as a Service's endpoints would list them."""

    def __init__(self, launch: ServiceFactory, database_url: str) -> None:
        self.launch = launch
        self.database_url = database_url
        self.live: dict[str, list[ServiceProcess]] = {mode: [] for mode in REPLICAS}
        self.killed: list[ServiceProcess] = []

    async def start(self, mode: str) -> ServiceProcess:
        proc = await self.launch(
            self.database_url,
            mode=mode,
            dev=False,
            start=False,
            extra_args=[*COMMON_FLAGS, *manifest_pool_flags(mode), *SERVICE_FLAGS[mode]],
        )
        # Seven interpreters importing at once on two cores: allow more than the default 30 s.
        await proc.start(ready_within=90)
        self.live[mode].append(proc)
        return proc

    async def crash(self, mode: str) -> None:
        """SIGKILL the oldest replica; it leaves the endpoints only once it is dead, as in a cluster."""
        proc = self.live[mode][0]
        assert await proc.kill() == -signal.SIGKILL
        self.live[mode].remove(proc)
        self.killed.append(proc)

    def processes(self) -> list[ServiceProcess]:
        return [p for procs in self.live.values() for p in procs]


class UncertainOutcome(Exception):
    """The request reached an api that died before answering: it may or may not have been applied."""


class ApiClient:
    """HTTP to whichever api replicas are live, round robin. A refused connection never reached a
    process, so the request goes to the next replica; a connection lost after sending is retried
    only where that is safe (idempotent requests) or after checking what happened."""

    def __init__(self, http: aiohttp.ClientSession, topology: Topology) -> None:
        self.http = http
        self.topology = topology
        self._turn = itertools.count()
        self.refused = 0
        self.uncertain = 0

    async def call(
        self,
        method: str,
        path: str,
        body: Any,
        headers: dict[str, str],
        *,
        on_uncertain: bool | Callable[[], Awaitable[Reply | None]] = True,
    ) -> Reply:
        """`on_uncertain`: True retries, False raises UncertainOutcome, a callable says whether the
        request was applied after all (its reply) or not (None: retry)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            apis = list(self.topology.live["api"])
            turn = next(self._turn)
            for i in range(len(apis)):
                url = apis[(turn + i) % len(apis)].base_url + path
                try:
                    async with self.http.request(method, url, json=body, headers=headers) as resp:
                        reply = await resp.json() if resp.content_type == "application/json" else None
                        return resp.status, reply
                except aiohttp.ClientConnectorError:
                    self.refused += 1
                except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as err:
                    self.uncertain += 1
                    if on_uncertain is False:
                        raise UncertainOutcome(f"{method} {path}: {err!r}") from err
                    if on_uncertain is not True:
                        applied = await on_uncertain()
                        if applied is not None:
                            return applied
            assert loop.time() < deadline, f"no api replica answered {method} {path} for 60 s"
            await asyncio.sleep(0.05)  # client back-off: every replica refused (replacements starting)


def diamond(marker: str, fan_out: bool) -> dict[str, Any]:
    """a -> (b, c) -> d, all echo; with fan_out, b runs once per element of the context's items."""

    def step(name: str, deps: list[str], **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "task_name": "echo",
            "depends_on": deps,
            "payload": {"step": name},
            "config": STEP_CONFIG,
            **extra,
        }

    b = step("b", ["a"], fan_out={"path": "items"}) if fan_out else step("b", ["a"])
    return {
        "name": f"diamond-{marker}",
        "steps": [step("a", []), b, step("c", ["a"]), step("d", ["b", "c"])],
        "context": {"items": list(range(FAN_OUT_ITEMS))} if fan_out else {},
        "metadata": {"marker": marker, "fan_out": fan_out},
    }


class Load:
    """The producer and the remote worker, and what they did."""

    def __init__(self, client: ApiClient, db: asyncpg.Pool) -> None:
        self.client = client
        self.db = db
        self.expected_keys: set[str] = set()
        self.intended_failures: set[str] = set()
        self.fan_out_markers: set[str] = set()
        self.markers: set[str] = set()
        self.ambiguous: set[str] = set()  # workflow creates whose reply was lost
        self.received: Counter[str] = Counter()  # remote worker: times each job was leased to it
        self.remote_completed: set[str] = set()
        self.lost_leases = 0  # lease requests whose reply was lost (their jobs come back via the janitor)
        self.conflicts: list[str] = []
        self.stop = asyncio.Event()

    # -- producer ---------------------------------------------------------------------------------

    async def enqueue(self, jobs: list[dict[str, Any]]) -> list[str]:
        # Idempotency keys make a retried batch safe whatever the lost attempt did.
        status, reply = await self.client.call("POST", "/api/v1/jobs/batch", {"jobs": jobs}, TENANT_AUTH)
        assert status == 201 and reply["count"] == len(jobs), (status, reply)
        self.expected_keys.update(j["idempotency_key"] for j in jobs)
        return list(reply["job_ids"])

    async def create_workflow(self, marker: str, definition: dict[str, Any]) -> str:
        async def created_after_all() -> Reply | None:
            self.ambiguous.add(marker)
            wf_id = await self.db.fetchval(
                "SELECT id FROM queueflow.workflows WHERE tenant_id = $1 AND metadata->>'marker' = $2",
                TENANT,
                marker,
            )
            return None if wf_id is None else (201, {"workflow_id": wf_id})

        status, reply = await self.client.call(
            "POST", "/api/v1/workflows", definition, TENANT_AUTH, on_uncertain=created_after_all
        )
        assert status == 201, (status, reply)
        return str(reply["workflow_id"])

    async def outstanding(self) -> int:
        return int(
            await self.db.fetchval(
                "SELECT count(*) FROM queueflow.jobs WHERE queue_name = $1 AND workflow_id IS NULL"
                " AND status IN ('pending', 'retrying', 'running')",
                QUEUE,
            )
        )

    async def produce(self) -> None:
        fail = [
            {
                "task_name": "fail",
                "payload": {"permanent": True, "message": "intended"},
                "config": JOB_CONFIG,
                "idempotency_key": f"fail-{i}",
            }
            for i in range(INTENDED_FAILURES)
        ]
        self.intended_failures = set(await self.enqueue(fail))
        for wave in range(WAVES):
            await eventually(
                lambda: self.outstanding_below(MAX_OUTSTANDING),
                timeout=90,
                interval=0.05,
                message="the in-process worker keeps up with the producer",
            )
            jobs: list[dict[str, Any]] = []
            for i in range(ECHO_PER_WAVE + SLEEP_PER_WAVE):
                if i % 10 == 5 and i // 10 < SLEEP_PER_WAVE:
                    jobs.append(
                        {
                            "task_name": "sleep",
                            # The crash comes when one started less than 0.1 s ago: 0.4 s of margin
                            # for a busy machine (finished jobs whose completion is in flight may
                            # land after the kill, so only a handler still running is sure to be
                            # reclaimed and rerun).
                            "payload": {"duration": 0.5},
                            "config": JOB_CONFIG,
                            "idempotency_key": f"sleep-{wave}-{i}",
                        }
                    )
                else:
                    jobs.append(
                        {
                            "task_name": "echo",
                            "payload": {"wave": wave, "i": i},
                            "config": JOB_CONFIG,
                            "idempotency_key": f"echo-{wave}-{i}",
                        }
                    )
            jobs += [
                {
                    "task_name": "remote-echo",
                    "payload": {"n": f"{wave}-{i}"},
                    "config": {**JOB_CONFIG, "queue": REMOTE_QUEUE},
                    "idempotency_key": f"remote-{wave}-{i}",
                }
                for i in range(REMOTE_PER_WAVE)
            ]
            await self.enqueue(jobs)
            creates = []
            for k in range(WORKFLOWS_PER_WAVE):
                n = wave * WORKFLOWS_PER_WAVE + k
                marker, fan_out = f"wf-{n}", n % FAN_OUT_EVERY == 0
                self.markers.add(marker)
                if fan_out:
                    self.fan_out_markers.add(marker)
                creates.append(self.create_workflow(marker, diamond(marker, fan_out)))
            await asyncio.gather(*creates)

    async def outstanding_below(self, limit: int) -> bool:
        return await self.outstanding() < limit

    # -- remote worker ----------------------------------------------------------------------------

    async def remote_worker(self) -> None:
        while not self.stop.is_set():
            try:
                status, reply = await self.client.call(
                    "POST",
                    f"/api/v1/queues/{REMOTE_QUEUE}/lease",
                    {"max_jobs": 4, "lease_secs": REMOTE_LEASE_SECS, "wait_secs": 1},
                    WORKER_AUTH,
                    on_uncertain=False,
                )
            except UncertainOutcome:
                self.lost_leases += 1  # a claim may have committed: the janitor reclaims it
                continue
            assert status == 200, (status, reply)
            await asyncio.gather(
                *(self.work(leased["job"], leased["lease_token"]) for leased in reply["jobs"])
            )

    async def work(self, job: dict[str, Any], token: str) -> None:
        job_id = job["id"]
        self.received[job_id] += 1
        assert job["queue_name"] == REMOTE_QUEUE and job["task_name"] == "remote-echo", job
        # Heartbeats and completions are idempotent for the lease holder: retried on another api.
        status, reply = await self.client.call(
            "POST",
            f"/api/v1/jobs/{job_id}/heartbeat",
            {"lease_token": token, "extend_secs": REMOTE_LEASE_SECS},
            WORKER_AUTH,
        )
        if status == 409:
            self.conflicts.append(f"heartbeat {job_id}: {reply}")
            return
        assert status == 200 and reply == {"status": "running"}, (status, reply)
        await asyncio.sleep(0.02)  # the "work"
        status, reply = await self.client.call(
            "POST",
            f"/api/v1/jobs/{job_id}/complete",
            {"lease_token": token, "result": {"by": "remote", **job["payload"]}},
            WORKER_AUTH,
        )
        if status == 409:
            self.conflicts.append(f"complete {job_id}: {reply}")
            return
        assert status == 204, (status, reply)
        self.remote_completed.add(job_id)


async def stop(proc: ServiceProcess, grace: float = 15.0) -> int | None:
    """SIGTERM and the exit status, or None when the process ignored it (it is then SIGKILLed)."""
    try:
        return await proc.terminate(grace=grace)
    except AssertionError:
        return None


def raise_failures(tasks: list[asyncio.Task[None]]) -> None:
    """A background task that crashed fails the test at once, with its own traceback."""
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def test_split_topology_survives_crashes_under_load(database_url: str, service: ServiceFactory) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    timings: dict[str, float] = {}

    setup = await asyncpg.connect(database_url)
    try:
        await setup.execute(AUDIT_SQL)
    finally:
        await setup.close()
    db = await asyncpg.create_pool(database_url, min_size=1, max_size=4, init=_json_codec)
    assert db is not None
    try:
        topology = Topology(service, database_url)
        await asyncio.gather(*(topology.start(mode) for mode, n in REPLICAS.items() for _ in range(n)))
        timings["started"] = loop.time() - began

        http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        load = Load(ApiClient(http, topology), db)
        background: list[asyncio.Task[None]] = []
        try:
            background.append(asyncio.create_task(load.produce(), name="producer"))
            background += [
                asyncio.create_task(load.remote_worker(), name=f"remote-worker-{i}") for i in range(3)
            ]

            # -- the crash: one replica of every service at once, the worker with jobs in flight -------
            async def busy() -> bool:
                raise_failures(background)
                row = await db.fetchrow(
                    """SELECT count(*) FILTER (WHERE status = 'completed' AND workflow_id IS NULL) AS done,
                              count(*) FILTER (WHERE status = 'running' AND task_name = 'sleep'
                                               AND started_at > now() - interval '100 milliseconds') AS fresh_sleeps
                       FROM queueflow.jobs WHERE queue_name = $1""",
                    QUEUE,
                )
                live = await db.fetchval(
                    "SELECT count(*) FROM queueflow.workflows WHERE status IN ('created', 'running')"
                )
                return row["done"] >= KILL_AFTER_COMPLETED and row["fresh_sleeps"] > 0 and live > 0

            await eventually(
                busy, timeout=60, interval=0.05, message="load built up: jobs done, a sleep job running"
            )
            timings["load_built"] = loop.time() - began
            await asyncio.gather(*(topology.crash(mode) for mode in ("worker", "api", "janitor", "workflow")))
            # Only the in-process worker leases from QUEUE: what it held is running there now, and
            # can only be finished by a reclaim and a second delivery (or by a completion the dead
            # worker had already sent).
            orphans = {
                str(r["id"])
                for r in await db.fetch(
                    "SELECT id FROM queueflow.jobs WHERE queue_name = $1 AND status = 'running'", QUEUE
                )
            }
            assert orphans, "the worker was killed with jobs in flight"

            # A workflow that must time out while the first janitor is dead: the other one fails it.
            timeout_wf = await load.create_workflow(
                TIMEOUT_MARKER,
                {
                    "name": TIMEOUT_MARKER,
                    "timeout_secs": 1,
                    "metadata": {"marker": TIMEOUT_MARKER},
                    "steps": [
                        {
                            "name": "slow",
                            "task_name": "sleep",
                            "payload": {"duration": 30},
                            "config": {"timeout_secs": 60, "max_retries": 0},
                        }
                    ],
                },
            )

            await asyncio.gather(*(topology.start(mode) for mode in ("worker", "api", "janitor", "workflow")))
            timings["replaced"] = loop.time() - began

            # -- everything settles -------------------------------------------------------------------
            async def settled() -> bool:
                raise_failures(background)
                if not background[0].done():
                    return False
                row = await db.fetchrow(
                    """SELECT (SELECT count(*) FROM queueflow.jobs WHERE status IN ('pending', 'retrying', 'running')) AS jobs,
                              (SELECT count(*) FROM queueflow.workflows WHERE status IN ('created', 'running')) AS workflows,
                              (SELECT count(*) FROM queueflow.workflow_outbox) AS outbox"""
                )
                assert dict(row) == {"jobs": 0, "workflows": 0, "outbox": 0}, dict(row)
                return True

            await eventually(
                settled, timeout=120, interval=0.2, message="every job, workflow and outbox row settled"
            )
            timings["settled"] = loop.time() - began
            load.stop.set()
            await asyncio.gather(*background)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await http.close()

        await check_outcome(db, load, orphans, timeout_wf)
    finally:
        await db.close()

    # Nothing but the killed replicas died, and every survivor drains on SIGTERM and exits 0.
    survivors = topology.processes()
    assert len(survivors) == sum(REPLICAS.values())
    assert all(p.returncode is None for p in survivors), [
        p.describe() for p in survivors if p.returncode is not None
    ]
    codes = await asyncio.gather(*(stop(p) for p in survivors))
    assert {(p.mode, p.api_port): c for p, c in zip(survivors, codes, strict=True) if c != 0} == {}, (
        "None: ignored SIGTERM"
    )
    timings["stopped"] = loop.time() - began
    print(
        f"split topology: {timings}; orphans {len(orphans)}, api failovers: refused {load.client.refused}, "
        f"uncertain {load.client.uncertain}, lost leases {load.lost_leases}, ambiguous creates {len(load.ambiguous)}"
    )


async def check_outcome(db: asyncpg.Pool, load: Load, orphans: set[str], timeout_wf: str) -> None:
    jobs = {str(r["id"]): r for r in await db.fetch("SELECT * FROM queueflow.jobs")}
    workflows = {r["id"]: r for r in await db.fetch("SELECT * FROM queueflow.workflows")}
    steps = await db.fetch("SELECT * FROM queueflow.workflow_steps")
    dead = await db.fetch("SELECT * FROM queueflow.dead_letters")
    audit = Counter(
        (r["kind"], r["key"]) for r in await db.fetch("SELECT kind, key FROM public.topology_audit")
    )

    # Nothing lost, nothing enqueued twice: one job per idempotency key, and every key is there.
    standalone = [j for j in jobs.values() if j["workflow_id"] is None]
    keys = Counter(j["idempotency_key"] for j in standalone)
    assert set(keys) == load.expected_keys and max(keys.values()) == 1
    assert len(load.expected_keys) == INTENDED_FAILURES + WAVES * (
        ECHO_PER_WAVE + SLEEP_PER_WAVE + REMOTE_PER_WAVE
    )

    # Every job ended as intended; the only dead letters are the intended ones.
    timeout_jobs = {i for i, j in jobs.items() if j["workflow_id"] == timeout_wf}
    ended = {i: j["status"] for i, j in jobs.items()}
    expected = {
        i: "failed" if i in load.intended_failures else "cancelled" if i in timeout_jobs else "completed"
        for i in jobs
    }
    assert ended == expected, {i: (ended[i], expected[i]) for i in jobs if ended[i] != expected[i]}
    assert {str(d["job_id"]) for d in dead} == load.intended_failures
    assert {d["reason"] for d in dead} == {"non_retryable"}

    # Completions recorded exactly once each, and only for completed jobs.
    job_completions = {key: n for (kind, key), n in audit.items() if kind == "job"}
    completed = {i for i, status in ended.items() if status == "completed"}
    assert set(job_completions) == completed
    assert {k: n for k, n in job_completions.items() if n != 1} == {}, "a job completion was recorded twice"

    # Deliveries: once, or twice for what the killed worker held (one retry after the reclaim).
    for job_id, job in jobs.items():
        if job["queue_name"] != QUEUE or job_id in timeout_jobs:
            continue
        if job_id in orphans:
            assert (job["delivery_count"], job["retry_count"]) in ((1, 0), (2, 1)), dict(job)
        else:
            assert (job["delivery_count"], job["retry_count"]) == (1, 0), dict(job)
    assert any(jobs[i]["delivery_count"] == 2 for i in orphans), "no orphaned job was reclaimed and rerun"

    # The remote worker got each of its jobs once and finished them all; a job whose lease reply
    # was lost with the killed api was reclaimed and leased again (at most 4 per lost reply).
    remote = {i: j for i, j in jobs.items() if j["queue_name"] == REMOTE_QUEUE}
    assert len(remote) == WAVES * REMOTE_PER_WAVE
    assert load.conflicts == []
    assert load.remote_completed == set(remote)
    assert set(load.received) == set(remote) and set(load.received.values()) == {1}
    extra = {i: j["delivery_count"] - 1 for i, j in remote.items() if j["delivery_count"] != 1}
    assert set(extra.values()) <= {1} and len(extra) <= 4 * load.lost_leases, (extra, load.lost_leases)
    assert all(j["result"]["by"] == "remote" for j in remote.values())

    # Workflows: one per marker (two only where a create's reply was lost and the retry raced it),
    # all completed but the one that had to time out.
    by_marker: dict[str, list[str]] = {}
    for wf_id, wf in workflows.items():
        by_marker.setdefault(wf["metadata"]["marker"], []).append(wf_id)
    assert set(by_marker) == load.markers | {TIMEOUT_MARKER}
    assert {m: len(ids) for m, ids in by_marker.items() if len(ids) > (2 if m in load.ambiguous else 1)} == {}
    assert by_marker[TIMEOUT_MARKER] == [timeout_wf]
    timed_out = workflows[timeout_wf]
    assert (timed_out["status"], timed_out["error_message"]) == ("failed", "workflow timed out after 1s")
    assert {wf["status"] for i, wf in workflows.items() if i != timeout_wf} == {"completed"}
    assert {k: n for (kind, k), n in audit.items() if kind == "workflow"} == dict.fromkeys(workflows, 1)

    # Steps: each completed exactly once, in its first scheduling; fan-outs counted every child once.
    steps_of: dict[str, dict[str, asyncpg.Record]] = {}
    for s in steps:
        steps_of.setdefault(s["workflow_id"], {})[s["name"]] = s
    step_completions = {k: n for (kind, k), n in audit.items() if kind == "step"}
    for wf_id, wf in workflows.items():
        if wf_id == timeout_wf:
            assert steps_of[wf_id]["slow"]["status"] == "cancelled"
            continue
        fan_out = wf["metadata"]["fan_out"]
        assert wf["metadata"]["marker"] in (
            load.fan_out_markers if fan_out else load.markers - load.fan_out_markers
        )
        assert set(steps_of[wf_id]) == {"a", "b", "c", "d"}
        for name, s in steps_of[wf_id].items():
            assert (s["status"], s["attempt"]) == ("completed", 1), dict(s)
            assert step_completions.get(f"{wf_id}/{name}") == 1, (
                f"{wf_id}/{name} completed {step_completions}"
            )
        b = steps_of[wf_id]["b"]
        if fan_out:
            assert (b["fan_total"], b["fan_completed"], b["fan_failed"]) == (FAN_OUT_ITEMS, FAN_OUT_ITEMS, 0)
            results = wf["context"]["b"]["results"]
            assert [r["item"] for r in results] == list(range(FAN_OUT_ITEMS)), results
        assert {"a", "b", "c", "d"} <= set(wf["context"])

        # Its step jobs: exactly one per (step, index), each of the first attempt.
        mine = [j for j in jobs.values() if j["workflow_id"] == wf_id]
        per_slot = Counter((j["workflow_step_id"], j["step_index"]) for j in mine)
        want = {("a", None), ("c", None), ("d", None)}
        want |= {("b", i) for i in range(FAN_OUT_ITEMS)} if fan_out else {("b", None)}
        assert set(per_slot) == want and set(per_slot.values()) == {1}, (wf_id, per_slot)
        assert {j["step_attempt"] for j in mine} == {1}
    assert len(step_completions) == 4 * (len(workflows) - 1)


# A regression test: on Python 3.11, asyncio.wait_for could swallow the cancellation of a waiter
# that SIGTERM's wake-up had just completed, and the janitor and the advancer then never exited.
@pytest.mark.parametrize("mode", ["janitor", "workflow"])
async def test_exits_on_sigterm(database_url: str, service: ServiceFactory, mode: str) -> None:
    """An idle janitor or advancer exits 0 soon after SIGTERM, within the drain time the manifests
    allow. Each is first seen to finish a unit of work, so that it waits for the next when the
    signal arrives (the janitor sweeping every 0.2 s, which reproduced the hang most often)."""
    db = await asyncpg.connect(database_url)
    try:
        if mode == "janitor":
            # A job whose lease expired: the janitor's first sweep reclaims it.
            job_id = await db.fetchval(
                """INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, locked_until, lease_token,
                                               delivery_count)
                   VALUES (gen_random_uuid(), 'q', 't', '{"max_retries": 3}', 'running', now() - interval '1 minute',
                           gen_random_uuid(), 1)
                   RETURNING id"""
            )
            extra = ["--janitor-interval-secs", "0.2"]

            async def worked() -> bool:
                return (
                    await db.fetchval("SELECT status FROM queueflow.jobs WHERE id = $1", job_id) == "retrying"
                )
        else:
            # An outbox row for a workflow that does not exist: a consumer takes and deletes it.
            await db.execute(
                "INSERT INTO queueflow.workflow_outbox (workflow_id, kind) VALUES ('missing', 'heal')"
            )
            extra = ["--worker-poll-secs", "60"]

            async def worked() -> bool:
                return await db.fetchval("SELECT count(*) FROM queueflow.workflow_outbox") == 0

        proc = await service(
            database_url,
            mode=mode,
            dev=False,
            extra_args=["--auto-migrate", "false", "--shutdown-grace-secs", "2", *extra],
        )
        await eventually(worked, timeout=20, interval=0.05)
    finally:
        await db.close()
    assert await stop(proc, grace=10) == 0, proc.describe()
