"""Network faults between SDK workers and the API, through a real Toxiproxy (docs/operations.md,
"Network faults").

Each test runs a fleet on a real PostgreSQL: one janitor, and per SDK (Python, TypeScript, Go,
Rust) an api process of its own, a Toxiproxy proxy in front of it, and that SDK's conformance
runner (sdks/conformance/README.md) running the SDK's worker loop through the proxy on a queue of
its own. The four languages go through each fault at the same time. Jobs are created and checked
directly (the tenant side is not faulted); only the workers' traffic crosses the proxy.

What every test asserts, per SDK:
- nothing is lost: every job ends `completed` (one terminal state) with its own payload as result;
- a handler runs more than once only for a job whose lease expired and was reclaimed (its
  `retry_count` is above 0): the duplicates at-least-once allows, and no others;
- the same worker process is still running afterwards and completes jobs created after the fault
  is gone: the loop recovered without a restart.
Plus each fault's own evidence that it did bite (a reclaimed job, an answer that was cut, ...), so
that a fault that silently failed to apply fails the test rather than passing it.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devkit.procs import ServiceProcess
from tests.netfault.toxiproxy import Proxy, Toxiproxy, toxiproxy_or_skip
from tests.sdk.builds import LANGUAGES, build, runner_command
from tests.support.waiting import eventually

# One fleet per test, every test of the module on the same xdist worker: each runs four api
# processes, four SDK runners and a Toxiproxy at once, too much to overlap with another such test
# on two cores.
pytestmark = [pytest.mark.xdist_group("netfault"), pytest.mark.timeout(150, func_only=True)]

REPO = Path(__file__).resolve().parents[2]
TENANT_TOKEN = "netfault-tenant-key"
WORKER_TOKEN = "netfault-worker-token"
TENANT = {"Authorization": f"Bearer {TENANT_TOKEN}"}
WORKER = {"Authorization": f"Bearer {WORKER_TOKEN}"}
API_ARGS = ["--worker-token", WORKER_TOKEN, "--api-keys", f"{TENANT_TOKEN}:netfault"]
# The runners stop on their own after this many handlers; the tests stop them first.
NEVER = 100_000
SETTLE = 40.0  # how long the jobs of a phase may take to reach their end (a bound, not a target)


@pytest.fixture(scope="module")
def toxiproxy_bin() -> str:
    return toxiproxy_or_skip()


@pytest.fixture(scope="module")
def sdks_built() -> list[str]:
    """Every SDK's runner, built once (outside the tests' timeouts: a cold build takes minutes)."""
    for language in LANGUAGES:
        build(language)
    return LANGUAGES


class Runner:
    """One SDK conformance runner process and the events it writes."""

    def __init__(self, language: str, spec: dict[str, Any], base_url: str, queue: str, log_dir: Path) -> None:
        self.language = language
        self.spec = spec
        self.base_url = base_url
        self.queue = queue
        self.log_path = log_dir / f"runner-{language}-{spec['worker']['mode']}-{queue}.log"
        self.spec_path = log_dir / f"spec-{language}-{queue}.json"
        self.events: list[dict[str, Any]] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._taken: dict[str, int] = {}  # per event name, how many next_event() returned

    async def start(self) -> Runner:
        self.spec_path.write_text(json.dumps(self.spec))
        argv, extra_env = runner_command(self.language)
        env = {
            **os.environ,
            **extra_env,
            "QF_BASE_URL": self.base_url,
            "QF_TENANT_TOKEN": TENANT_TOKEN,
            "QF_WORKER_TOKEN": WORKER_TOKEN,
            "QF_QUEUE": self.queue,
        }
        log = self.log_path.open("ab")  # the child keeps its own copy of the descriptor
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *argv,
                str(self.spec_path),
                cwd=REPO,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        finally:
            log.close()
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.events.append(event)

    def runs(self, job_id: str) -> int:
        """How many times a handler started for `job_id` in this process."""
        return sum(
            1 for e in self.events if e.get("event") == "handler_started" and e.get("job_id") == job_id
        )

    async def next_event(self, name: str, within: float = 30.0) -> dict[str, Any]:
        """The first event `name` not yet returned by this method."""
        seen = self._taken.setdefault(name, 0)

        def found() -> dict[str, Any] | None:
            matching = [e for e in self.events if e.get("event") == name]
            return matching[seen] if len(matching) > seen else None

        event = await eventually(
            found, timeout=within, message=f"{self.language}: no {name} event\n{self.tail()}"
        )
        self._taken[name] = seen + 1
        return event

    def send(self, command: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def wait(self, within: float) -> int:
        assert self.proc is not None
        async with asyncio.timeout(within):
            code = await self.proc.wait()
        if self._reader is not None:
            await self._reader
        return code

    def tail(self) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return (
            f"--- {self.language} runner stderr (tail) ---\n{text[-3000:]}\n--- events: {self.events[-20:]}"
        )

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


class Lane:
    """One SDK's part of the fleet: its api process, the proxy in front of it, its queue."""

    def __init__(self, language: str, api: ServiceProcess, proxy: Proxy, log_dir: Path) -> None:
        self.language = language
        self.api = api
        self.proxy = proxy
        self.log_dir = log_dir
        self.queue = f"netfault-{language}"
        self.runners: list[Runner] = []

    async def start_runner(self, worker: dict[str, Any], queue: str | None = None) -> Runner:
        spec = {"name": f"netfault-{self.language}", "worker": {"stop_after_jobs": NEVER, **worker}}
        runner = Runner(self.language, spec, self.proxy.base_url, queue or self.queue, self.log_dir)
        self.runners.append(runner)
        return await runner.start()

    async def create_jobs(self, task: str, count: int, *, tag: str, queue: str | None = None) -> list[str]:
        """`count` jobs on this lane's queue, created directly on its api (no fault on this path)."""
        ids = []
        config = {"queue": queue or self.queue, "retry_delay_secs": 0, "max_retries": 20}
        async with aiohttp.ClientSession() as http:
            for n in range(count):
                body = {"task_name": task, "payload": {"tag": tag, "n": n}, "config": config}
                async with http.post(f"{self.api.base_url}/api/v1/jobs", json=body, headers=TENANT) as resp:
                    assert resp.status == 201, await resp.text()
                    ids.append((await resp.json())["job_id"])
        return ids

    async def metric(self, name: str, **labels: str) -> float:
        """The sum of a metric's samples on this lane's api whose labels include `labels`."""
        async with aiohttp.ClientSession() as http, http.get(f"{self.api.metrics_url}/metrics") as resp:
            text = await resp.text()
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    total += sample.value
        return total


class Fleet:
    def __init__(self, lanes: list[Lane], janitor: ServiceProcess, toxiproxy: Toxiproxy) -> None:
        self.lanes = lanes
        self.janitor = janitor
        self.toxiproxy = toxiproxy

    async def each(self, scenario: Callable[[Lane], Awaitable[None]]) -> None:
        """Run `scenario` for every lane at once; the first failure is raised (with its lane)."""
        results = await asyncio.gather(*(scenario(lane) for lane in self.lanes), return_exceptions=True)
        for lane, result in zip(self.lanes, results, strict=True):
            if isinstance(result, BaseException):
                tails = "\n".join(r.tail() for r in lane.runners)
                raise AssertionError(f"[{lane.language}] {result!r}\n{tails}") from result


@pytest.fixture
async def db(database_url) -> AsyncIterator[asyncpg.Pool]:
    """A pool (not the suite's single connection): the four lanes query at once."""
    async with asyncpg.create_pool(database_url, min_size=1, max_size=4) as pool:
        yield pool


@pytest.fixture
async def fleet(database_url, service, tmp_path, toxiproxy_bin, sdks_built) -> AsyncIterator[Fleet]:
    toxiproxy = await Toxiproxy(toxiproxy_bin, tmp_path).start()
    lanes: list[Lane] = []
    try:
        janitor = await service(
            database_url, mode="janitor", dev=False, extra_args=["--janitor-interval-secs", "0.2"]
        )
        apis = await asyncio.gather(
            *(service(database_url, mode="api", dev=False, extra_args=API_ARGS) for _ in sdks_built)
        )
        for language, api in zip(sdks_built, apis, strict=True):
            proxy = await toxiproxy.create_proxy(f"api-{language}", f"127.0.0.1:{api.api_port}")
            lanes.append(Lane(language, api, proxy, tmp_path))
        yield Fleet(lanes, janitor, toxiproxy)
    finally:
        for lane in lanes:
            for runner in lane.runners:
                await runner.stop()
        await toxiproxy.stop()


# --- what every test checks ------------------------------------------------------------------------


async def job_rows(db: asyncpg.Pool, ids: list[str]) -> dict[str, asyncpg.Record]:
    rows = await db.fetch(
        "SELECT j.id::text AS id, j.status, j.retry_count, j.delivery_count, j.payload::text AS payload,"
        " j.result::text AS result, j.error_message,"
        " (SELECT count(*) FROM queueflow.dead_letters d WHERE d.job_id = j.id) AS dead_letters"
        " FROM queueflow.jobs j WHERE j.id = ANY($1::uuid[])",
        ids,
    )
    return {r["id"]: r for r in rows}


async def settled(
    db: asyncpg.Pool, ids: list[str], runner: Runner | None = None, within: float = SETTLE
) -> dict[str, asyncpg.Record]:
    """Wait until every job is completed (the one terminal state these handlers lead to); fails at
    once should `runner`, the worker expected to do it, have exited."""

    async def all_completed() -> dict[str, asyncpg.Record]:
        if runner is not None and not runner.alive:
            raise RuntimeError(f"the {runner.language} worker exited\n{runner.tail()}")
        rows = await job_rows(db, ids)
        assert len(rows) == len(ids), f"jobs missing: {set(ids) - set(rows)}"
        waiting = {i: (r["status"], r["retry_count"]) for i, r in rows.items() if r["status"] != "completed"}
        assert not waiting, f"not completed yet: {waiting}"
        return rows

    return await eventually(all_completed, timeout=within, interval=0.1)


def check_outcome(
    runner: Runner, rows: dict[str, asyncpg.Record], rescued: Collection[str] = ()
) -> Counter[str]:
    """Nothing lost, each result its own payload (`rescued`: another holder's), duplicates only
    after a lease expired, the loop alive. Returns how many jobs were `reclaimed` (their lease
    expired) and how many `duplicated` (ran more than once here), for the evidence checks."""
    tally: Counter[str] = Counter()
    for job_id, row in rows.items():
        assert row["status"] == "completed", f"{job_id}: {row['status']}"
        assert row["dead_letters"] == 0, f"{job_id} is completed and dead-lettered"
        runs = runner.runs(job_id)
        if job_id in rescued:
            assert json.loads(row["result"]) == {"rescued": True}, (
                f"{job_id}: the late holder overwrote {row['result']}"
            )
        else:
            assert json.loads(row["result"]) == json.loads(row["payload"]), (
                f"{job_id}: result {row['result']}"
            )
            assert runs >= 1, f"{job_id} completed without this worker running it"
        if runs > 1:
            assert row["retry_count"] >= 1, (
                f"{job_id} ran {runs} times but its lease never expired (retry_count 0): a duplicate "
                "at-least-once does not allow"
            )
            tally["duplicated"] += 1
        if row["retry_count"] >= 1:
            tally["reclaimed"] += 1
    assert runner.alive, f"the {runner.language} worker exited\n{runner.tail()}"
    return tally


async def recovers(lane: Lane, runner: Runner, db: asyncpg.Pool, task: str = "nf.echo") -> None:
    """After the fault: the same process completes new jobs, each once, without any reclaim."""
    ids = await lane.create_jobs(task, 3, tag="after")
    rows = await settled(db, ids, runner)
    for job_id, row in rows.items():
        assert runner.runs(job_id) == 1 and row["retry_count"] == 0, (job_id, dict(row))
    check_outcome(runner, rows)


HANDLERS = {
    "nf.echo": "return_payload",
    "nf.quick": "sleep_200ms_then_return_payload",
    "nf.slow": "sleep_1500ms_then_return_payload",
}


# --- the faults ------------------------------------------------------------------------------------


async def test_added_latency_delays_but_duplicates_and_loses_nothing(fleet, db):
    """`latency` (300 ms +- 100 ms each way) on every worker connection, well under the lease
    (4 s, heartbeats every 2 s): every job completes exactly once, no lease ever expires."""

    async def scenario(lane: Lane) -> None:
        for stream in ("upstream", "downstream"):
            await lane.proxy.add_toxic(f"lag-{stream}", "latency", stream, {"latency": 300, "jitter": 100})
        assert {t["type"] for t in await lane.proxy.toxics()} == {"latency"}
        runner = await lane.start_runner(
            {"mode": "loop", "handlers": HANDLERS, "lease_secs": 4, "concurrency": 2}
        )
        ids = await lane.create_jobs("nf.quick", 6, tag="lag") + await lane.create_jobs(
            "nf.slow", 2, tag="lag"
        )
        rows = await settled(db, ids, runner)
        tally = check_outcome(runner, rows)
        assert tally["reclaimed"] == 0 and tally["duplicated"] == 0, tally
        assert all(runner.runs(i) == 1 for i in ids)
        for stream in ("upstream", "downstream"):
            await lane.proxy.remove_toxic(f"lag-{stream}")
        await recovers(lane, runner, db)

    await fleet.each(scenario)


async def warmed_up(lane: Lane, db: asyncpg.Pool, worker: dict[str, Any]) -> Runner:
    """The lane's worker loop, started and seen completing a job (so it is leasing, and has asked
    the server whether it offers the batch acknowledgement), before any fault."""
    runner = await lane.start_runner({"mode": "loop", "handlers": HANDLERS, **worker})
    ids = await lane.create_jobs("nf.echo", 1, tag="warm-up")
    check_outcome(runner, await settled(db, ids, runner))
    return runner


async def test_connections_cut_mid_request(fleet, db):
    """Two ways an answer is lost after the request reached the api.

    `limit_data` (downstream, 400 bytes per connection): every lease answer that carries a job is
    longer than that, so it is cut mid-body: the api has leased the job, the worker never sees it,
    and the job is reclaimed when its lease (2 s) runs out, again and again while the toxic is on.
    `reset_peer` (downstream, at once): the answers to the acknowledgements of two running jobs are
    reset after the api recorded them: the worker must resend (a replay with the same token is a
    204) or learn the job is done, and not run the jobs again; a job created meanwhile is leased
    with its answer reset, and reclaimed.
    """

    async def scenario(lane: Lane) -> None:
        runner = await warmed_up(lane, db, {"lease_secs": 2, "concurrency": 2})

        # limit_data: lease answers cut mid-body.
        await lane.proxy.add_toxic("cut", "limit_data", "downstream", {"bytes": 400})
        cut = await lane.create_jobs("nf.echo", 3, tag="cut")

        async def each_reclaimed() -> bool:
            rows = await job_rows(db, cut)
            assert all(r["retry_count"] >= 1 for r in rows.values()), {i: dict(r) for i, r in rows.items()}
            return True

        await eventually(each_reclaimed, timeout=SETTLE, interval=0.1)
        assert all(runner.runs(i) == 0 for i in cut), "a truncated lease answer was taken for a lease"
        await lane.proxy.remove_toxic("cut")
        tally = check_outcome(runner, await settled(db, cut, runner))
        assert tally["reclaimed"] == len(cut), tally

        # reset_peer: the acknowledgements' answers reset after the api committed them.
        slow = await lane.create_jobs("nf.slow", 2, tag="reset")
        await eventually(lambda: all(runner.runs(i) == 1 for i in slow), timeout=SETTLE)
        await lane.proxy.add_toxic("reset", "reset_peer", "downstream", {"timeout": 0})
        await settled(db, slow, runner)  # recorded while every answer to the worker is being reset
        # The toxic's own evidence: a job created now is leased, its answer reset, and reclaimed.
        [probe] = await lane.create_jobs("nf.echo", 1, tag="reset-probe")

        async def probe_reclaimed() -> bool:
            row = (await job_rows(db, [probe]))[probe]
            assert row["retry_count"] >= 1 and runner.runs(probe) == 0, dict(row)
            return True

        await eventually(probe_reclaimed, timeout=SETTLE, interval=0.1)
        await lane.proxy.remove_toxic("reset")
        rows = await settled(db, [*slow, probe], runner)
        tally = check_outcome(runner, rows)
        assert tally["duplicated"] == 0 and all(runner.runs(i) == 1 for i in slow), tally
        assert tally["reclaimed"] == 1, tally
        await recovers(lane, runner, db)

    await fleet.each(scenario)


async def test_connection_cut_mid_long_poll(fleet, db):
    """The worker is parked in a lease long-poll when its answers stop flowing (`timeout` toxic,
    downstream, 0: data dropped, the connection held open); a job created meanwhile is claimed by
    that poll, whose answer never arrives; removing the toxic closes the connection under the parked
    poll. The job is not lost: it is reclaimed once its lease (2 s) runs out and the recovered loop
    runs it. (When the close reaches the server before the poll's answer is written, which a loaded
    machine allows, the lease route gives the job back at once instead, no retry spent: it is then
    delivered twice and run once.)"""

    async def scenario(lane: Lane) -> None:
        runner = await warmed_up(lane, db, {"lease_secs": 2, "concurrency": 1})
        await eventually(
            lambda: lane.metric("queueflow_long_poll_waiters"),
            timeout=SETTLE,
            message="the worker never parked",
        )
        await lane.proxy.add_toxic("mute", "timeout", "downstream", {"timeout": 0})
        [job] = await lane.create_jobs("nf.echo", 1, tag="long-poll")

        async def claimed() -> bool:
            row = (await job_rows(db, [job]))[job]
            assert row["status"] == "running", dict(row)
            return True

        await eventually(claimed, timeout=SETTLE)  # by a poll whose answer is being dropped
        await lane.proxy.remove_toxic("mute")  # closes the connections it held
        rows = await settled(db, [job], runner)
        tally = check_outcome(runner, rows)
        given_back = rows[job]["retry_count"] == 0 and rows[job]["delivery_count"] == 2
        assert (tally["reclaimed"] == 1 or given_back) and runner.runs(job) == 1, (
            tally,
            dict(rows[job]),
            runner.runs(job),
        )
        await recovers(lane, runner, db)

    await fleet.each(scenario)


async def lease_directly(lane: Lane, queue: str, wait_secs: int = 5) -> tuple[str, str]:
    """Lease one job of `queue` on the lane's api, not through the proxy: (job id, lease token)."""
    body = {"max_jobs": 1, "lease_secs": 30, "wait_secs": wait_secs}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{lane.api.base_url}/api/v1/queues/{queue}/lease", json=body, headers=WORKER) as resp,
    ):
        assert resp.status == 200, await resp.text()
        jobs = (await resp.json())["jobs"]
        assert len(jobs) == 1, f"a lease of {queue} within {wait_secs}s got {jobs}"
        return jobs[0]["job"]["id"], jobs[0]["lease_token"]


async def complete_directly(lane: Lane, job_id: str, token: str, result: dict[str, Any]) -> None:
    body = {"lease_token": token, "result": result}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{lane.api.base_url}/api/v1/jobs/{job_id}/complete", json=body, headers=WORKER) as resp,
    ):
        assert resp.status == 204, await resp.text()


async def test_partition_longer_than_the_lease(fleet, db):
    """The proxy is disabled (listener closed, every connection cut) while a worker runs a job
    (1.5 s handler, 2 s lease), and stays down until the janitor has reclaimed it; another holder
    then completes it. Meanwhile a raw client of the same SDK holds a lease of its own through the
    same proxy. After the partition: the raw client's late heartbeat and complete are answered 409
    with the error body, the late loop does not overwrite the other holder's result nor run the job
    again, and the loop carries on with new jobs."""

    async def scenario(lane: Lane) -> None:
        runner = await warmed_up(lane, db, {"lease_secs": 2, "concurrency": 2})
        stale_queue = f"{lane.queue}-stale"
        [stale_job] = await lane.create_jobs("nf.echo", 1, tag="stale", queue=stale_queue)
        raw = await lane.start_runner({"mode": "raw_stale_lease", "lease_secs": 2}, queue=stale_queue)
        leased = await raw.next_event("leased")
        assert leased["job_id"] == stale_job
        [held] = await lane.create_jobs("nf.slow", 1, tag="partition")
        await eventually(lambda: runner.runs(held) == 1, timeout=SETTLE)

        await lane.proxy.set_enabled(False)

        async def reclaimed() -> bool:
            rows = await job_rows(db, [held, stale_job])
            assert all(r["status"] == "retrying" and r["retry_count"] == 1 for r in rows.values()), {
                i: dict(r) for i, r in rows.items()
            }
            return True

        await eventually(reclaimed, timeout=SETTLE, interval=0.1)
        # Another holder finishes both jobs while the first is cut off.
        for queue, job_id in ((lane.queue, held), (stale_queue, stale_job)):
            got, token = await lease_directly(lane, queue)
            assert got == job_id
            await complete_directly(lane, job_id, token, {"rescued": True})
        refused_before = {
            route: await lane.metric("queueflow_http_requests_total", route=route, status="409")
            for route in ("/api/v1/jobs/{id}/heartbeat", "/api/v1/jobs/{id}/complete")
        }

        await lane.proxy.set_enabled(True)
        raw.send("continue")
        stale = await raw.next_event("stale_rejected")
        assert stale["heartbeat_status"] == 409 and stale["complete_status"] == 409, stale
        assert stale["error_body_ok"] is True, stale
        assert await raw.wait(within=SETTLE) == 0, raw.tail()
        for route, before in refused_before.items():
            after = await lane.metric("queueflow_http_requests_total", route=route, status="409")
            assert after > before, f"the api answered no 409 on {route} after the partition"

        await recovers(lane, runner, db)
        rows = await job_rows(db, [held, stale_job])
        check_outcome(runner, {held: rows[held]}, rescued={held})
        assert runner.runs(held) == 1, "the late loop ran a job another holder had completed"
        assert json.loads(rows[stale_job]["result"]) == {"rescued": True}

    await fleet.each(scenario)


async def _equals(value: Awaitable[float], want: float) -> bool:
    return await value == want


async def test_jobs_claimed_for_a_long_poll_whose_worker_is_gone_go_back_at_once(
    database_url, service, tmp_path, toxiproxy_bin, db
):
    """A worker parked in a long-poll loses its connection (the proxy is disabled: every connection
    through it closes); a job created while the orphaned poll still waits is claimed by it. The api
    notices the caller is gone and gives the job back at once (no retry spent, and its status change
    wakes the other waiters), so a live worker parked behind the orphan gets it, instead of the job
    sitting leased to no one until the janitor reclaims it (30 s here)."""
    api = await service(database_url, mode="api", dev=False, extra_args=API_ARGS)
    toxiproxy = await Toxiproxy(toxiproxy_bin, tmp_path).start()
    try:
        proxy = await toxiproxy.create_proxy("api", f"127.0.0.1:{api.api_port}")
        lane = Lane("raw", api, proxy, tmp_path)
        queue = "netfault-vanished"
        body = {"max_jobs": 1, "lease_secs": 30, "wait_secs": 10}

        async def long_poll() -> None:
            async with aiohttp.ClientSession() as http:
                url = f"{proxy.base_url}/api/v1/queues/{queue}/lease"
                async with http.post(url, json=body, headers=WORKER) as resp:
                    raise AssertionError(f"the cut long-poll was answered: {resp.status} {await resp.text()}")

        poll = asyncio.create_task(long_poll())
        await eventually(lambda: lane.metric("queueflow_long_poll_waiters"), timeout=SETTLE)
        await proxy.set_enabled(False)
        with pytest.raises(aiohttp.ClientError):
            await poll
        assert await lane.metric("queueflow_long_poll_waiters") == 1, "the orphaned poll is no longer parked"
        # A live worker parks behind the orphan; the hub wakes its waiters first come, first served.
        live = asyncio.create_task(lease_directly(lane, queue, wait_secs=10))
        await eventually(lambda: _equals(lane.metric("queueflow_long_poll_waiters"), 2), timeout=SETTLE)
        [job] = await lane.create_jobs("nf.echo", 1, tag="vanished", queue=queue)
        got, token = await live
        assert got == job
        row = await db.fetchrow(
            "SELECT status, delivery_count, retry_count FROM queueflow.jobs WHERE id = $1", uuid.UUID(job)
        )
        # Claimed by the orphaned poll first, given back (no retry spent), then claimed by the live one.
        assert (row["status"], row["delivery_count"], row["retry_count"]) == ("running", 2, 0), dict(row)
        await complete_directly(lane, job, token, {"n": 0, "tag": "vanished"})
    finally:
        await toxiproxy.stop()
