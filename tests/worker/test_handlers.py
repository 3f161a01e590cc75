"""The in-process runtime with the test's own handlers: results, failure classification, the
concurrency bound, cancellation reaching the handler, task timeouts, and shutdown."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import threading
import types

import pytest

from services.worker import runtime
from services.worker.registry import JobContext, PermanentError
from services.worker.runtime import HELD_PER_WORKER, _Claimed, _Finished, default_registry
from tests.protocol.helpers import AUTH, cancel, create_job, dead_letters, finished, get_job, job_row, reaches
from tests.support.api import database_of
from tests.support.waiting import eventually


class Gate:
    """A handler that parks until released, recording what happened to it."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.saw_flag: list[str] = []
        self.release = asyncio.Event()

    async def handle(self, ctx: JobContext) -> dict:
        self.started.append(str(ctx.job.id))
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(str(ctx.job.id))
            if ctx.cancelled.is_set():
                self.saw_flag.append(str(ctx.job.id))
            raise
        return {"released": True}


async def test_cancelling_a_running_job_cancels_its_handler(worker_app, db):
    gate = Gate()
    registry = default_registry()
    registry.register("gate", gate.handle)
    client = await worker_app(registry)
    job_id = await create_job(client, "gate")
    await eventually(lambda: gate.started == [job_id])

    assert await cancel(client, job_id) == 204

    await eventually(lambda: gate.cancelled == [job_id], message="the handler's task was cancelled")
    assert gate.saw_flag == [job_id]  # ctx.cancelled was set before the task was cancelled
    gate.release.set()
    follower = await create_job(client, "echo")
    await finished(client, follower)
    job = await get_job(client, job_id)
    assert job["status"] == "cancelled"
    assert "result" not in job
    assert await dead_letters(db, job_id) == []


async def test_at_most_workers_handlers_run_at_once_per_queue(worker_app):
    gate = Gate()
    registry = default_registry()
    registry.register("gate", gate.handle)
    client = await worker_app(registry, workers=3)
    ids = [await create_job(client, "gate") for _ in range(5)]

    await eventually(lambda: len(gate.started) == 3)
    # The runtime claims ahead (up to twice --workers jobs held, like a remote worker's batch), but
    # only --workers handlers run; the others wait their turn with their leases kept alive.
    running = [j for j in ids if (await get_job(client, j))["status"] == "running"]
    assert 3 <= len(running) <= 6
    assert len(gate.started) == 3

    gate.release.set()
    for job_id in ids:
        assert (await finished(client, job_id))["result"] == {"released": True}


async def test_sync_handlers_run_and_none_means_an_empty_result(worker_app):
    seen: list[str] = []

    def blocking(ctx: JobContext) -> None:
        seen.append(threading.current_thread().name)

    registry = default_registry()
    registry.register("blocking", blocking)
    client = await worker_app(registry)
    job = await finished(client, await create_job(client, "blocking"))
    assert (job["status"], job["result"]) == ("completed", {})
    assert seen and seen[0] != threading.main_thread().name  # off the event loop


async def test_failures_are_classified_by_the_exception(worker_app, db):
    class Permanent(Exception):
        retryable = False

    async def permanent(ctx: JobContext) -> dict:
        raise PermanentError("bad input")

    async def flagged(ctx: JobContext) -> dict:
        raise Permanent("flagged permanent")

    async def transient(ctx: JobContext) -> dict:
        raise ConnectionError("try later")

    async def wrong_type(ctx: JobContext) -> list:
        return [1, 2]

    registry = default_registry()
    for name, fn in [
        ("permanent", permanent),
        ("flagged", flagged),
        ("transient", transient),
        ("wrong_type", wrong_type),
    ]:
        registry.register(name, fn)
    client = await worker_app(registry)

    ids = {
        name: await create_job(client, name, max_retries=2)
        for name in ("permanent", "flagged", "transient", "wrong_type")
    }

    for name in ("permanent", "flagged", "wrong_type"):
        job = await finished(client, ids[name])
        assert job["status"] == "failed", name
        assert [d["reason"] for d in await dead_letters(db, ids[name])] == ["non_retryable"], name
    assert (await get_job(client, ids["permanent"]))["error_message"] == "bad input"
    assert "list" in (await get_job(client, ids["wrong_type"]))["error_message"]
    retrying = await reaches(client, ids["transient"], "retrying")
    assert retrying["error_message"] == "try later"


async def test_a_handler_error_does_not_stop_the_worker(worker_app):
    async def boom(ctx: JobContext) -> dict:
        raise RuntimeError("boom")

    registry = default_registry()
    registry.register("boom", boom)
    client = await worker_app(registry, workers=1)
    bad = await create_job(client, "boom", max_retries=0)
    good = await create_job(client, "echo", {"still": "alive"})
    assert (await finished(client, bad))["status"] == "failed"
    assert (await finished(client, good))["result"] == {"still": "alive", "echoed": True}


async def test_a_task_level_timeout_overrides_the_jobs_own(worker_app):
    gate = Gate()
    registry = default_registry()
    registry.register("slow", gate.handle, timeout_secs=1)
    client = await worker_app(registry)
    job_id = await create_job(client, "slow", timeout=3600, max_retries=0)
    job = await finished(client, job_id)
    assert job["status"] == "failed"
    assert job["error_message"].startswith("job exceeded its timeout")
    assert gate.cancelled == [job_id]  # the timed-out handler was cancelled, not left running


async def test_shutdown_lets_an_in_flight_handler_finish_and_report(worker_app, db):
    async def brief(ctx: JobContext) -> dict:
        await asyncio.sleep(0.3)
        return {"finished": True}

    registry = default_registry()
    registry.register("brief", brief)
    worker = await worker_app(registry)
    job_id = await create_job(worker, "brief")
    await reaches(worker, job_id, "running")

    await worker.close()

    row = await job_row(db, job_id)
    assert row["status"] == "completed"


async def test_shutdown_past_the_grace_period_releases_the_job_without_spending_a_retry(worker_app, db):
    gate = Gate()
    registry = default_registry()
    registry.register("gate", gate.handle)
    worker = await worker_app(registry, shutdown_grace_secs=0.2)
    job_id = await create_job(worker, "gate", max_retries=2)
    await eventually(lambda: gate.started == [job_id])

    await worker.close()

    assert gate.cancelled == [job_id]
    row = await job_row(db, job_id)
    assert row["status"] == "pending"  # given back, claimable at once
    assert (row["retry_count"], row["lease_token"], row["result"]) == (0, None, None)

    gate.release.set()
    successor = await worker_app(registry)
    job = await finished(successor, job_id)
    assert (job["status"], job["delivery_count"], job["retry_count"]) == ("completed", 2, 0)


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
async def test_an_async_callable_object_is_awaited_as_a_handler(worker_app):
    """Handler is typed Callable[[JobContext], Awaitable | dict | None]: an object whose __call__ is
    async (or any callable returning an awaitable) is a valid handler, and its result is awaited."""

    class Resize:
        async def __call__(self, ctx: JobContext) -> dict:
            return {"resized": ctx.payload["name"]}

    registry = default_registry()
    registry.register("resize", Resize())
    client = await worker_app(registry)
    job = await finished(client, await create_job(client, "resize", {"name": "a.png"}))
    assert (job["status"], job.get("result"), job.get("error_message")) == (
        "completed",
        {"resized": "a.png"},
        None,
    )


async def test_claims_never_run_away_from_completions_the_database_has_not_written(worker_app, db):
    """Finished jobs stop holding run slots, so the next claim overlaps their completions; but while
    completions are stuck, the runtime holds at most HELD_PER_WORKER x --workers jobs, not the
    backlog."""
    cap = HELD_PER_WORKER * 2
    client = await worker_app(workers=2)
    completer = database_of(client).completer
    stuck = asyncio.Event()
    waiting: list[object] = []
    later: list[asyncio.Task[None]] = []
    submit = completer.submit_nowait

    async def release(item, answered):
        await stuck.wait()
        submit(item, answered)

    def stalled(item, answered):
        waiting.append(item[0])
        later.append(asyncio.create_task(release(item, answered)))

    completer.submit_nowait = stalled  # type: ignore[method-assign]
    resp = await client.post(
        "/api/v1/jobs/batch", json={"jobs": [{"task_name": "echo"} for _ in range(40)]}, headers=AUTH
    )
    assert resp.status == 201

    await eventually(lambda: len(waiting) >= cap)
    await asyncio.sleep(0.3)  # room for a runaway claim to show itself
    assert len(waiting) == cap
    assert await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'running'") == cap

    stuck.set()
    await eventually(
        lambda: db.fetchval("SELECT count(*) = 40 FROM queueflow.jobs WHERE status = 'completed'"), timeout=20
    )


async def test_a_fast_stream_is_claimed_in_batches_that_grow_with_its_pace(worker_app, db):
    """At the slowest pace a claim takes 2 x --workers jobs; a stream of short jobs is claimed in
    larger batches (each claim writes its own claim key, so the keys count the claims)."""
    client = await worker_app(workers=2)
    total = 2_000
    for _ in range(total // 1_000):
        resp = await client.post(
            "/api/v1/jobs/batch", json={"jobs": [{"task_name": "echo"} for _ in range(1_000)]}, headers=AUTH
        )
        assert resp.status == 201
    await eventually(
        lambda: db.fetchval("SELECT count(*) = $1 FROM queueflow.jobs WHERE status = 'completed'", total),
        timeout=60,
    )
    claims = await db.fetchval("SELECT count(DISTINCT claim_key) FROM queueflow.jobs")
    assert claims < total / (2 * 2 * 2)  # on average more than twice the slowest pace's batch


async def test_a_job_claimed_ahead_keeps_its_lease_while_it_waits_for_a_run_slot(worker_app, db):
    """With one run slot taken by a long handler, a short job claimed behind it waits longer than
    its own lease (timeout 1 s + grace 1 s); its lease is renewed while it waits, so the janitor
    never reclaims it and it runs once, spending no retry."""
    gate = Gate()
    registry = default_registry()
    registry.register("gate", gate.handle)
    client = await worker_app(registry, janitor_loop=True, workers=1, lease_secs=1, lease_grace_secs=1)
    first = await create_job(client, "gate", {})
    await eventually(lambda: len(gate.started) == 1)
    waiting = await create_job(client, "echo", {"i": 1}, timeout=1)
    await eventually(
        lambda: db.fetchval("SELECT status = 'running' FROM queueflow.jobs WHERE id = $1", waiting)
    )
    await asyncio.sleep(4)  # twice its lease; the janitor sweeps every second
    row = await job_row(db, waiting)
    assert (row["status"], row["retry_count"], row["delivery_count"]) == ("running", 0, 1)
    gate.release.set()
    job = await finished(client, waiting)
    assert (job["status"], job["retry_count"]) == ("completed", 0)
    assert (await finished(client, first))["status"] == "completed"


MARK: contextvars.ContextVar[str | None] = contextvars.ContextVar("mark", default=None)


async def test_a_handler_that_never_awaits_runs_in_a_context_of_its_own(worker_app):
    """A handler finishing in its first step runs without a task of its own (eagerly), still in
    its own copy of the context: what it sets is never seen by the next job's handler."""

    async def marking(ctx: JobContext) -> dict:
        seen = MARK.get()
        MARK.set(str(ctx.job.id))
        return {"seen": seen}

    registry = default_registry()
    registry.register("mark", marking)
    client = await worker_app(registry, workers=1)
    ids = [await create_job(client, "mark", {}) for _ in range(5)]
    results = [(await finished(client, job_id))["result"] for job_id in ids]
    assert results == [{"seen": None}] * 5


async def test_a_handler_cancelled_after_its_first_step_can_await_while_it_cleans_up(worker_app, db):
    """A handler that suspended in its first step goes on as a task; the API's cancellation reaches
    it there, and it may await (and be woken) while it cleans up."""
    cleaned: list[str] = []
    started = asyncio.Event()

    async def stubborn(ctx: JobContext) -> dict:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # a wake-up after the cancellation, relayed to the handler
            cleaned.append(str(ctx.job.id))
            raise
        return {}

    registry = default_registry()
    registry.register("stubborn", stubborn)
    client = await worker_app(registry)
    job_id = await create_job(client, "stubborn")
    await asyncio.wait_for(started.wait(), 10)
    assert await cancel(client, job_id) == 204
    await eventually(lambda: cleaned == [job_id])
    assert (await get_job(client, job_id))["status"] == "cancelled"


def _blocking(ctx: JobContext) -> None:
    pass


async def _limited(ctx: JobContext) -> dict:
    return {}


async def _fails_after_a_wait(ctx: JobContext) -> None:
    await asyncio.sleep(0)
    raise RuntimeError("failed after its first step")


def _fails_blocking(ctx: JobContext) -> None:
    raise RuntimeError("failed in its thread")


async def _overruns(ctx: JobContext) -> None:
    await asyncio.sleep(60)


@pytest.mark.parametrize(
    ("task", "config", "outcome"),
    [
        ("echo", {}, "completed"),  # the fast path: an async handler that never suspends
        ("blocking", {}, "completed"),  # a sync handler, in a thread
        ("limited", {}, "completed"),  # a task with a concurrency limit of its own
        ("fail", {"max_retries": 0}, "failed"),  # a failure in the first step, and its write
        ("fails_after_a_wait", {"max_retries": 0}, "failed"),  # a failure in a later step
        ("fails_blocking", {"max_retries": 0}, "failed"),  # a sync handler's failure
        ("overruns", {"max_retries": 0, "timeout": 1}, "failed"),  # a time-out
    ],
)
async def test_a_finished_job_leaves_nothing_for_the_garbage_collector(worker_app, db, task, config, outcome):
    """Once its outcome is written, a job's runtime state (its claim record, context, job) is freed
    by reference counting: no reference cycle is left per job for the collector to find later (at
    a fast pace those cycles cost the server an eighth of its CPU). The collector is off while the
    jobs run, so a cycle would still be there to find."""
    registry = default_registry()
    registry.register("blocking", _blocking)
    registry.register("limited", _limited, concurrency=2)
    registry.register("fails_after_a_wait", _fails_after_a_wait)
    registry.register("fails_blocking", _fails_blocking)
    registry.register("overruns", _overruns)
    client = await worker_app(registry, workers=100)
    gc.collect()
    gc.disable()
    try:
        jobs = [{"task_name": task, "config": config} for _ in range(100)]
        resp = await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=AUTH)
        assert resp.status == 201, await resp.text()
        await eventually(
            lambda: db.fetchval("SELECT count(*) = 100 FROM queueflow.jobs WHERE status = $1", outcome),
            timeout=30,
        )
        gc.set_debug(gc.DEBUG_SAVEALL)  # what the collection finds unreachable is kept in gc.garbage
        gc.collect()
        # (only the runtime's own objects: this process may hold other tests' leftovers)
        in_cycles = [
            o
            for o in gc.garbage
            if isinstance(o, _Claimed | JobContext | _Finished)
            or (isinstance(o, types.FrameType) and o.f_code.co_filename == runtime.__file__)
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert in_cycles == []
