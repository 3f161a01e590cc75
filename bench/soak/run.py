"""The soak's driver: the servers, the load, the kills and the samples, then the evidence.

Topology (a fresh durable cluster, one database): `--mode api`, `janitor`, `workflow`, and `worker`
(in-process handlers: bench/soak/tasks.py, queues `soak-local` and `default`) as separate server
processes, plus one remote worker process (bench/soak/remote.py: worker protocol on `soak-remote`,
and idle long-polls on `soak-idle`). This process drives, at the configured rates:

- single enqueues (`POST /api/v1/jobs`) and batches (`POST /api/v1/jobs/batch`), every job with an
  idempotency key, so a call retried after the api died mid-request cannot make a second job;
- four-step diamond workflows (steps on `default`, run by the in-process worker);
- two cron schedules (every 10 s and every minute) on `soak-local`;
- SSE listeners on recent jobs and workflows, read to their terminal event;

and every `kill_secs` SIGKILLs one service process (api, janitor, workflow or worker, at random)
and restarts it on the same ports. Every `sample_secs` it samples each process's RSS and its
PostgreSQL connections (bench/soak/probe.py). When the load stops, the schedules are deleted, the
backlog drains, everything is stopped, and the database and the execution log are read for the
checks (bench/soak/verify.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench import harness
from bench.client import HEADERS
from bench.soak import execlog, probe
from devkit.procs import ChildProcess, ServiceProcess

ROLES = ("api", "janitor", "workflow", "worker")
REMOTE_QUEUE, LOCAL_QUEUE, IDLE_QUEUE = "soak-remote", "soak-local", "soak-idle"
TASK = "soak-work"
DIAMOND = {
    "name": "soak-diamond",
    "steps": [
        {"name": "a", "task_name": TASK},
        {"name": "b", "task_name": TASK, "depends_on": ["a"]},
        {"name": "c", "task_name": TASK, "depends_on": ["a"]},
        {"name": "d", "task_name": TASK, "depends_on": ["b", "c"]},
    ],
}
CRONS = {"every-10s": "*/10 * * * * *", "every-minute": "* * * * *"}
RETRY_SECS = 0.5
SOAK_APP = "queueflow-soak"


@dataclass
class Options:
    minutes: float
    kill_secs: float
    sample_secs: float
    single_per_sec: float
    batch_every_secs: float
    batch_size: int
    workflow_every_secs: float
    sse_listeners: int
    drain_secs: float
    seed: int
    out_dir: Path


@dataclass
class Incarnation:
    role: str
    pid: int
    started: float  # wall clock
    ended: float | None = None
    killed: bool = False


@dataclass
class State:
    t0: float  # wall clock at the start of the load
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # idempotency key -> record
    workflows: list[dict[str, Any]] = field(default_factory=list)
    crons: dict[str, dict[str, Any]] = field(default_factory=dict)
    kills: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    incarnations: list[Incarnation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    load_ended: float = 0.0
    drain: dict[str, Any] = field(default_factory=dict)
    remote: dict[str, Any] = field(default_factory=dict)
    db: dict[str, Any] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n


class Soak:
    def __init__(self, opts: Options, dsn: str, pg_port: int, postmaster: int | None) -> None:
        self.opts = opts
        self.dsn = dsn
        self.pg_port = pg_port
        self.postmaster = postmaster
        self.rng = random.Random(opts.seed)
        self.log_dir = opts.out_dir / "logs"
        self.exec_log = opts.out_dir / "executions.log"
        self.env = {execlog.ENV: str(self.exec_log)}
        self.procs: dict[str, ServiceProcess] = {}
        self.generation = itertools.count(1)
        self.remote: ChildProcess | None = None
        self.state = State(t0=time.time())
        self.stop_load = asyncio.Event()
        self.api_url = ""

    # --- processes ---------------------------------------------------------------------------

    def _extra(self, role: str) -> list[str]:
        if role == "worker":
            return ["--queues", f"{LOCAL_QUEUE},default", "--workers", "8", "--handlers", "bench.soak.tasks"]
        return []

    async def start(self, role: str, ports: tuple[int, int] | None = None) -> ServiceProcess:
        proc = ServiceProcess(
            self.dsn, role, extra_args=self._extra(role), env=self.env, log_dir=self.log_dir, own_session=True
        )
        if ports is not None:  # a restart: the same ports, so clients find it where it was
            proc.api_port, proc.metrics_port = ports
            proc.argv += ["--api-port", str(ports[0]), "--metrics-port", str(ports[1])]
        proc.log_path = self.log_dir / f"{role}-{next(self.generation)}.log"
        await proc.start(ready_within=harness.READY_WITHIN_SECS)
        self.procs[role] = proc
        self.state.incarnations.append(Incarnation(role, proc.pid, time.time()))
        return proc

    def _incarnation(self, pid: int) -> Incarnation:
        return next(i for i in self.state.incarnations if i.pid == pid and i.ended is None)

    async def kill_and_restart(self, role: str) -> None:
        old = self.procs[role]
        pid = old.pid
        killed_at = time.time()
        await old.kill()
        inc = self._incarnation(pid)
        inc.ended, inc.killed = killed_at, True
        t = time.monotonic()
        new = await self.start(role, (old.api_port, old.metrics_port))
        self.state.kills.append(
            {
                "role": role,
                "pid": pid,
                "at": killed_at,
                "t": round(killed_at - self.state.t0, 1),
                "new_pid": new.pid,
                "ready_after_secs": round(time.monotonic() - t, 2),
            }
        )
        print(
            f"[soak] t={killed_at - self.state.t0:6.0f}s SIGKILL {role} pid {pid}; "
            f"pid {new.pid} ready in {time.monotonic() - t:.1f}s",
            file=sys.stderr,
            flush=True,
        )

    # --- HTTP with retries -------------------------------------------------------------------

    async def post(self, http: aiohttp.ClientSession, path: str, body: Any, expect: int, what: str) -> Any:
        """POST until the api answers `expect`; connection errors and 5xx are counted and retried
        (the api may be down: the soak kills it); any other answer is a failure of the soak."""
        while True:
            try:
                async with http.post(self.api_url + path, json=body) as resp:
                    raw = await resp.read()
                    if resp.status == expect:
                        return json.loads(raw) if raw else None
                    self.state.count(f"{what}_http_{resp.status}")
                    if resp.status < 500:
                        raise RuntimeError(f"POST {path} -> {resp.status}: {raw[:300]!r}")
            except (aiohttp.ClientError, TimeoutError, ConnectionError):
                self.state.count(f"{what}_connection_errors")
            await asyncio.sleep(RETRY_SECS)

    # --- load ----------------------------------------------------------------------------------

    async def paced(self, every: float, action: Any, limit: int = 64) -> None:
        """Start `action(n)` every `every` seconds (n = 0, 1, ...) until the load stops; at most
        `limit` in flight (a slow api makes the generator wait, it does not pile up calls)."""
        gate = asyncio.Semaphore(limit)
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks: set[asyncio.Task[None]] = set()

        async def one(n: int) -> None:
            try:
                await action(n)
            finally:
                gate.release()

        for n in itertools.count():
            delay = start + n * every - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop_load.wait(), delay)
            if self.stop_load.is_set():
                break
            await gate.acquire()
            task = asyncio.create_task(one(n))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)

    def _job(self, key: str, queue: str, kind: str) -> dict[str, Any]:
        self.state.jobs[key] = {"queue": queue, "kind": kind, "id": None, "sent": time.time()}
        return {
            "task_name": TASK,
            "payload": {"key": key},
            "config": {"queue": queue},
            "idempotency_key": key,
        }

    async def single(self, http: aiohttp.ClientSession, n: int) -> None:
        key = f"s-{n}"
        queue = REMOTE_QUEUE if n % 2 else LOCAL_QUEUE
        body = self._job(key, queue, "single")
        answer = await self.post(http, "/api/v1/jobs", body, 201, "enqueue")
        self.state.jobs[key]["id"] = answer["job_id"]

    async def batch(self, http: aiohttp.ClientSession, n: int) -> None:
        queue = REMOTE_QUEUE if n % 2 else LOCAL_QUEUE
        keys = [f"b-{n}-{i}" for i in range(self.opts.batch_size)]
        body = {"jobs": [self._job(k, queue, "batch") for k in keys]}
        answer = await self.post(http, "/api/v1/jobs/batch", body, 201, "batch")
        for key, job_id in zip(keys, answer["job_ids"], strict=True):
            self.state.jobs[key]["id"] = job_id

    async def workflow(self, http: aiohttp.ClientSession, n: int) -> None:
        # Workflow creation takes no idempotency key: a create retried after the api died may
        # have committed the first time too. Such extra workflows are counted by verify (they
        # must complete like the others).
        answer = await self.post(http, "/api/v1/workflows", DIAMOND, 201, "workflow")
        self.state.workflows.append({"id": answer["workflow_id"], "sent": time.time()})

    async def create_crons(self, http: aiohttp.ClientSession) -> None:
        for name, expr in CRONS.items():
            body = {"name": name, "cron_expr": expr, "task_name": TASK, "queue": LOCAL_QUEUE}
            answer = await self.post(http, "/api/v1/cron", body, 201, "cron")
            self.state.crons[answer["cron_id"]] = {"name": name, "expr": expr, "created": time.time()}

    async def delete_crons(self, http: aiohttp.ClientSession) -> None:
        for cron_id, cron in self.state.crons.items():
            while True:
                try:
                    async with http.delete(f"{self.api_url}/api/v1/cron/{cron_id}") as resp:
                        if resp.status in (200, 204):
                            break
                except (aiohttp.ClientError, TimeoutError, ConnectionError):
                    pass
                await asyncio.sleep(RETRY_SECS)
            cron["deleted"] = time.time()

    async def sse_listener(self, http: aiohttp.ClientSession, n: int) -> None:
        """Follow the newest job's (every fourth listener: the newest workflow's) event stream to
        its terminal event, pause a second, repeat; a stream cut by a kill is counted as broken."""
        kind = "workflow" if n % 4 == 3 else "job"
        while not self.stop_load.is_set():
            if kind == "workflow":
                target = self.state.workflows[-1]["id"] if self.state.workflows else None
            else:
                target = next((r["id"] for r in reversed(self.state.jobs.values()) if r["id"]), None)
            if target is not None:
                self.state.count(f"sse_{kind}_streams")
                outcome = await self._follow(http, f"/api/v1/{kind}s/{target}/events")
                self.state.count(f"sse_{kind}_{outcome}")
            await asyncio.sleep(1)

    async def _follow(self, http: aiohttp.ClientSession, path: str) -> str:
        terminal = {"completed", "failed", "cancelled", "partially_failed"}
        last = None
        try:
            async with http.get(self.api_url + path, timeout=aiohttp.ClientTimeout(total=120)) as resp:
                if resp.status != 200:
                    return f"http_{resp.status}"
                async for raw in resp.content:
                    line = raw.decode().strip()
                    if line.startswith("data: "):
                        last = json.loads(line[6:]).get("status")
        except (aiohttp.ClientError, TimeoutError, ConnectionError):
            return "broken"
        return "terminal" if last in terminal else "ended_without_terminal"

    # --- kills and samples -----------------------------------------------------------------------

    async def killer(self) -> None:
        """Every `kill_secs`, one service at random; the roles come in shuffled rounds of four,
        so each is killed about as often as the others."""
        order: list[str] = []
        while True:
            if not order:
                order = self.rng.sample(ROLES, len(ROLES))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_load.wait(), self.opts.kill_secs)
            if self.stop_load.is_set():
                return
            await self.kill_and_restart(order.pop())

    async def sampler(self, conn: asyncpg.Connection) -> None:
        while True:
            await self.sample(conn)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_load.wait(), self.opts.sample_secs)
            if self.stop_load.is_set():
                await self.sample(conn)
                return

    async def sample(self, conn: asyncpg.Connection) -> None:
        pids = {role: proc.pid for role, proc in self.procs.items() if proc.returncode is None}
        if self.remote is not None:
            pids["remote"] = self.remote.pid
        pids["driver"] = os.getpid()
        conns, unattributed = await probe.connections_by_process(conn, self.pg_port, pids)
        now = time.time()
        self.state.samples.append(
            {
                "t": round(now - self.state.t0, 1),
                "processes": {
                    name: {"pid": pid, "rss_mb": probe.rss_mb(pid), "connections": conns.get(name, {})}
                    for name, pid in pids.items()
                },
                "unattributed_connections": unattributed,
                "postgres": probe.postgres_backends(self.postmaster),
            }
        )

    # --- the run ---------------------------------------------------------------------------------

    async def run(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.exec_log.unlink(missing_ok=True)
        self.exec_log.touch()
        for role in ROLES:  # the api first: it migrates the database
            await self.start(role)
        self.api_url = self.procs["api"].base_url
        remote_stats = self.opts.out_dir / "remote-stats.json"
        self.remote = harness.client(
            [
                sys.executable,
                "-m",
                "bench.soak.remote",
                "--base-url",
                self.api_url,
                "--queue",
                REMOTE_QUEUE,
                "--idle-queue",
                IDLE_QUEUE,
                "--stats",
                str(remote_stats),
            ],
            self.log_dir / "remote.log",
            name="soak remote worker",
            env=self.env,
        )
        conn = await asyncpg.connect(self.dsn, server_settings={"application_name": SOAK_APP})
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=60)
        async with aiohttp.ClientSession(headers=HEADERS, timeout=timeout) as http:
            self.state.t0 = time.time()
            await self.create_crons(http)
            o = self.opts
            load = [
                asyncio.create_task(self.paced(1 / o.single_per_sec, lambda n: self.single(http, n))),
                asyncio.create_task(self.paced(o.batch_every_secs, lambda n: self.batch(http, n), limit=4)),
                asyncio.create_task(
                    self.paced(o.workflow_every_secs, lambda n: self.workflow(http, n), limit=8)
                ),
                *(asyncio.create_task(self.sse_listener(http, n)) for n in range(o.sse_listeners)),
                asyncio.create_task(self.killer()),
                asyncio.create_task(self.sampler(conn)),
            ]
            print(f"[soak] load for {o.minutes:g} min; logs in {self.log_dir}", file=sys.stderr, flush=True)
            done, _ = await asyncio.wait(load, timeout=o.minutes * 60, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:  # a generator that failed ends the soak early, with its error
                if task.exception() is not None:
                    self.stop_load.set()
                    raise task.exception()  # type: ignore[misc]
            self.state.load_ended = time.time()
            self.stop_load.set()
            await asyncio.gather(*load)
            await self.delete_crons(http)
            self.state.drain = await self.drain(conn)
        await harness.stop(self.remote, grace=30)
        for role in reversed(ROLES):
            await harness.stop(self.procs[role])
            self._incarnation(self.procs[role].pid).ended = time.time()
        self.state.remote = json.loads(remote_stats.read_text()) if remote_stats.exists() else {}
        self.state.db = await dump(conn)
        await conn.close()

    async def drain(self, conn: asyncpg.Connection) -> dict[str, Any]:
        """Wait for the backlog to empty: no job pending, retrying or running, no workflow running."""
        started = time.monotonic()
        deadline = started + self.opts.drain_secs
        while True:
            left = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM queueflow.jobs WHERE status IN ('pending','retrying','running')) AS jobs,"
                " (SELECT count(*) FROM queueflow.workflows WHERE status NOT IN"
                "  ('completed','failed','partially_failed','cancelled')) AS workflows"
            )
            if (left["jobs"] == 0 and left["workflows"] == 0) or time.monotonic() > deadline:
                return {
                    "secs": round(time.monotonic() - started, 1),
                    "jobs_left": left["jobs"],
                    "workflows_left": left["workflows"],
                }
            await asyncio.sleep(1)


async def dump(conn: asyncpg.Connection) -> dict[str, Any]:
    jobs = await conn.fetch(
        "SELECT id::text, status, queue_name, task_name, idempotency_key, workflow_id, delivery_count,"
        " EXTRACT(EPOCH FROM created_at)::float8 AS created, EXTRACT(EPOCH FROM started_at)::float8 AS started,"
        " EXTRACT(EPOCH FROM completed_at)::float8 AS completed,"
        " (status = 'running' AND locked_until > now()) AS live_lease, metadata->>'cron_id' AS cron_id,"
        " metadata->>'cron_due_at' AS cron_due_at"
        " FROM queueflow.jobs"
    )
    workflows = await conn.fetch(
        "SELECT id, status, EXTRACT(EPOCH FROM created_at)::float8 AS created FROM queueflow.workflows"
    )
    dead = await conn.fetchval("SELECT count(*) FROM queueflow.dead_letters")
    return {"jobs": [dict(r) for r in jobs], "workflows": [dict(r) for r in workflows], "dead_letters": dead}
