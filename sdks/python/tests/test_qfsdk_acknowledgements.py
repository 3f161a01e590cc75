"""The worker loop's batch acknowledgement (sdks/conformance/README.md, "Batch acknowledgement"),
against the stub server: the probe, batching, per-item answers, falling back, outages, stop."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web
from conftest import BATCH_ROUTE, FAST, error, job_json, run_until, until

from unofficial_queueflow_client import Backoff, Client, JobContext, Worker


async def test_successes_go_through_the_batch_route_and_failures_one_call_each(stub):
    stub.offer_batch = True
    ids = stub.add_jobs(*(job_json("ok", {"n": n}) for n in range(6)), job_json("boom"))

    async def boom(ctx):
        raise ValueError("boom")

    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: ctx.payload, "boom": boom}, wait_secs=0, concurrency=7)
        await run_until(worker, lambda: len(stub.batch_acked()) == 6 and stub.calls("fail") and worker.held == 0)
    assert stub.calls("complete") == []  # no job was completed on its own
    assert sorted(stub.batch_acked()) == sorted(ids[:6])
    items = {item["id"]: item for batch in stub.batches() for item in batch}
    assert [items[job_id]["result"] for job_id in ids[:6]] == [{"n": n} for n in range(6)]
    assert all(item["lease_token"] for item in items.values())
    assert len(stub.calls("fail", ids[6])) == 1
    assert stub.probes() == 1
    probe = next(headers for _, path, headers, _ in stub.requests if path == "/openapi.json")
    batch = next(headers for _, path, headers, _ in stub.requests if path == "/api/v1/jobs/complete")
    assert "Authorization" not in probe and batch["Authorization"] == "Bearer worker"
    # the probe comes before the first acknowledgement
    paths = [path for _, path, _, _ in stub.requests]
    assert paths.index("/openapi.json") < paths.index("/api/v1/jobs/complete")


async def test_an_idle_worker_acknowledges_at_once(stub):
    stub.offer_batch = True
    stub.add_jobs(job_json("ok"))
    finished = []

    def ok(ctx):
        finished.append(asyncio.get_running_loop().time())
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": ok}, wait_secs=0)
        runner = asyncio.create_task(worker.run())
        await until(stub.batches)
        acked = asyncio.get_running_loop().time()
        worker.stop()
        async with asyncio.timeout(5):
            await runner
    assert acked - finished[0] < 0.5  # no timer waits for more successes


async def test_one_flush_at_a_time_while_the_next_batch_builds_up(stub):
    stub.offer_batch = True
    stub.batch_delay = 0.2
    ids = stub.add_jobs(*(job_json("ok") for _ in range(150)))
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: {}}, wait_secs=0, concurrency=150, batch_size=100)
        await run_until(worker, lambda: len(stub.batch_acked()) == 150 and worker.held == 0)
    batches = stub.batches()
    assert stub.max_batches_in_flight == 1
    assert all(1 <= len(batch) <= 100 for batch in batches)
    assert 2 <= len(batches) <= 6, [len(batch) for batch in batches]  # a handful of calls for 150 jobs
    assert sorted(stub.batch_acked()) == sorted(ids)  # each job once
    assert stub.calls("complete") == []


async def test_each_item_is_answered_as_the_per_job_route_would_be(stub, caplog):
    stub.offer_batch = True
    done, lost, gone, busy = stub.add_jobs(job_json("ok"), job_json("ok"), job_json("ok"), job_json("ok"))
    busy_answers = [503]
    answers = {lost: lambda: 409, gone: lambda: 404, busy: lambda: busy_answers.pop() if busy_answers else 204}
    stub.item_status = lambda job_id: answers.get(job_id, lambda: 204)()
    caplog.set_level(logging.WARNING, "unofficial_queueflow_client.worker")
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: {}}, wait_secs=0, concurrency=4, backoff=FAST)
        await run_until(worker, lambda: stub.batch_acked().count(busy) == 2 and worker.held == 0)
    acked = stub.batch_acked()
    assert [acked.count(job_id) for job_id in (done, lost, gone, busy)] == [1, 1, 1, 2]
    # a lost or gone job is logged, not retried, not resent per job, not turned into a failure
    assert stub.calls("complete") == [] and stub.calls("fail") == []
    assert f"job {lost}: complete rejected: HTTP 409" in caplog.text
    assert f"job {gone}: complete rejected: HTTP 404" in caplog.text


@pytest.mark.parametrize("status", [404, 405])
async def test_a_server_without_the_route_after_all_gets_one_call_per_job_for_good(stub, status, caplog):
    stub.offer_batch = True  # /openapi.json lists the route, but the call is answered 404/405 (a proxy, a downgrade)
    stub.batch_answers = [lambda: error(status, "no such route")]
    first, later = stub.add_jobs(job_json("fast"), job_json("slow"))

    async def slow(ctx):
        await until(stub.batches)  # done once the first job's batch call went out
        return {"slow": True}

    caplog.set_level(logging.WARNING, "unofficial_queueflow_client.worker")
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"fast": lambda ctx: {"fast": True}, "slow": slow}, wait_secs=0, concurrency=2)
        await run_until(worker, lambda: len(stub.calls("complete")) == 2 and worker.held == 0)
    assert [[item["id"] for item in batch] for batch in stub.batches()] == [[first]]
    assert [c["result"] for c in stub.calls("complete", first)] == [{"fast": True}]  # resent per job, once
    assert stub.calls("complete", later)[0]["result"] == {"slow": True}  # never tried as a batch
    assert stub.probes() == 1
    assert "one call per job from now on" in caplog.text


async def test_a_job_stays_held_and_heartbeated_while_its_acknowledgement_meets_an_outage(stub):
    stub.offer_batch = True
    outage = [lambda: error(503, "draining")] * 3 + [lambda: web.Response(status=502, text="bad gateway")] * 3
    stub.batch_answers = list(outage)
    [job_id] = stub.add_jobs(job_json("ok"))
    held_during_outage = []

    def done() -> bool:
        if 0 < len(stub.batches()) < 7:
            held_during_outage.append(worker.held)
        return len(stub.batches()) == 7 and worker.held == 0

    async with Client(stub.url, "t") as qf:
        # each retry waits 0.15 s: the outage lasts about 0.9 s, past the first heartbeat (0.5 s)
        worker = Worker(
            qf,
            "q",
            {"ok": lambda ctx: {"r": 1}},
            lease_secs=1,
            wait_secs=0,
            backoff=Backoff(initial=0.15, maximum=0.15, jitter=0),
        )
        await run_until(worker, done)
    assert stub.batch_acked() == [job_id] * 7  # retried through the batch route, not per job
    assert stub.calls("complete") == []
    assert held_during_outage and set(held_during_outage) == {1}
    assert len(stub.calls("heartbeat", job_id)) >= 1  # the handler had returned at once: it was waiting


@pytest.mark.parametrize("trouble", ["503", "timeout"])
async def test_a_probe_without_an_answer_is_asked_again_at_the_next_flush(stub, trouble):
    stub.offer_batch = True

    async def unanswered(request: web.Request) -> web.Response:
        stub.routes.pop(("GET", "/openapi.json"))
        if trouble == "timeout":
            await asyncio.sleep(1.0)  # past the client's timeout: a TransportError
        return error(503, "starting")

    stub.routes[("GET", "/openapi.json")] = unanswered
    early, late = stub.add_jobs(job_json("fast"), job_json("slow"))

    async def slow(ctx):
        await until(lambda: stub.calls("complete", early))  # done once the first flush went per job
        return {}

    async with Client(stub.url, "t", timeout=0.5) as qf:
        worker = Worker(qf, "q", {"fast": lambda ctx: {}, "slow": slow}, wait_secs=0, concurrency=2, backoff=FAST)
        await run_until(worker, lambda: stub.batches() and worker.held == 0)
    assert stub.probes() == 2
    assert len(stub.calls("complete", early)) == 1 and early not in stub.batch_acked()  # that flush: per job
    assert stub.batch_acked() == [late] and stub.calls("complete", late) == []


@pytest.mark.parametrize(
    "answer",
    [lambda: error(404, "not found"), lambda: error(401, "who are you"), lambda: web.Response(text="<html>")],
    ids=["404", "401", "not-json"],
)
async def test_any_other_answer_to_the_probe_settles_it(stub, answer):
    stub.offer_batch = True  # the route would work, but the server did not say so
    stub.openapi_answers = [answer]
    first, second = stub.add_jobs(job_json("fast"), job_json("slow"))

    async def slow(ctx):
        await asyncio.sleep(0.2)
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"fast": lambda ctx: {}, "slow": slow}, wait_secs=0, concurrency=2)
        await run_until(worker, lambda: len(stub.calls("complete")) == 2 and worker.held == 0)
    assert stub.probes() == 1 and stub.batches() == []


async def test_a_server_that_does_not_list_the_route_is_never_sent_a_batch(stub):
    ids = stub.add_jobs(*(job_json("ok") for _ in range(5)))  # offer_batch is off: /openapi.json lacks it
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: {}}, wait_secs=0, concurrency=5)
        await run_until(worker, lambda: len(stub.calls("complete")) == 5 and worker.held == 0)
    assert stub.batches() == [] and stub.probes() == 1
    assert all(len(stub.calls("complete", job_id)) == 1 for job_id in ids)


async def test_stop_flushes_the_buffer_before_returning(stub):
    stub.offer_batch = True
    stub.batch_delay = 0.3
    ids = stub.add_jobs(job_json("ok"), job_json("ok"), job_json("ok"))
    finished = asyncio.Event()
    count = 0

    def ok(ctx):
        nonlocal count
        count += 1
        if count == 3:
            finished.set()
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": ok}, wait_secs=0, concurrency=3)
        runner = asyncio.create_task(worker.run())
        async with asyncio.timeout(5):
            await finished.wait()
        await asyncio.sleep(0)  # the last handler's report reaches the buffer
        waiting = worker.held
        worker.stop()
        async with asyncio.timeout(5):
            await runner
    assert waiting == 3  # all three were still waiting for their acknowledgement at stop()
    assert sorted(stub.batch_acked()) == sorted(ids) and worker.held == 0
    assert stub.calls("complete") == []


async def test_a_job_taken_back_while_it_waits_in_the_buffer_is_not_acknowledged(stub, caplog):
    stub.offer_batch = True
    stub.batch_delay = 1.2
    first, taken = stub.add_jobs(job_json("ok"), job_json("later"))
    stub.heartbeat_status[taken] = "cancelled"  # its first heartbeat (at 0.5 s) says so

    async def later(ctx: JobContext):
        await until(stub.batches)  # done while the first job's acknowledgement is in flight
        return {}

    caplog.set_level(logging.INFO, "unofficial_queueflow_client.worker")
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: {}, "later": later}, lease_secs=1, wait_secs=0, concurrency=2)
        await run_until(worker, lambda: stub.batches() and worker.held == 0)
    assert stub.batch_acked() == [first]
    assert stub.calls("complete") == [] and stub.calls("fail") == []
    assert f"job {taken}: not reporting complete (job is cancelled)" in caplog.text


async def test_the_drain_timeout_abandons_an_acknowledgement_stuck_in_an_outage(stub):
    stub.offer_batch = True
    stub.batch_answers = [lambda: error(503, "down")] * 1000
    stub.add_jobs(job_json("ok"))
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: {}}, wait_secs=0, drain_timeout=0.3, backoff=FAST)
        runner = asyncio.create_task(worker.run())
        await until(lambda: len(stub.batches()) >= 2)
        flusher = worker._flusher
        worker.stop()
        async with asyncio.timeout(5):
            await runner
        calls = len(stub.batches())
        await asyncio.sleep(0.2)
    assert worker.held == 0 and worker._flusher is None
    assert flusher is not None and flusher.done()
    # nothing goes on after run() returned (but for a call already on the wire when it was cancelled,
    # which the stub may log just after)
    assert len(stub.batches()) <= calls + 1
    assert stub.calls("complete") == []  # abandoned, unreported: the server redelivers it


def hold_batch_route(stub) -> tuple[asyncio.Event, asyncio.Event]:
    """Hold every batch acknowledgement call until the test sets `release`; `arrived` is set when the
    first one reaches the stub (it is logged as usual, and answered as usual once released)."""
    arrived, release = asyncio.Event(), asyncio.Event()

    async def held(request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return await stub.batch(request.method, await request.json())

    stub.offer_batch = True
    stub.routes[("POST", BATCH_ROUTE)] = held
    return arrived, release


async def test_a_handler_frees_its_slot_while_its_acknowledgement_is_in_flight(stub):
    """concurrency 2: once `fast` returned, its unanswered acknowledgement no longer takes a slot, so
    the loop leases `later` and runs it beside `slow` before that acknowledgement is answered."""
    arrived, release = hold_batch_route(stub)
    fast, slow, later = stub.add_jobs(job_json("fast"), job_json("slow"), job_json("later"))
    slow_may_end, later_ran = asyncio.Event(), asyncio.Event()

    async def slow_handler(ctx):
        await slow_may_end.wait()
        return {}

    def later_handler(ctx):
        later_ran.set()
        return {}

    handlers = {"fast": lambda ctx: {}, "slow": slow_handler, "later": later_handler}
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", handlers, wait_secs=0, concurrency=2, batch_size=2)
        runner = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(5):
                await later_ran.wait()  # leased and run: fast's acknowledgement did not hold the slot
                await arrived.wait()  # that acknowledgement is on the wire (later's may be in it), unanswered
            held = worker.held  # fast (being acknowledged), slow (running), later (done)
            leases = [call["max_jobs"] for call in stub.calls("lease")]
            first_batch = [item["id"] for item in stub.batches()[0]]
            release.set()
            slow_may_end.set()
            await until(lambda: len(stub.batch_acked()) == 3 and worker.held == 0)
        finally:
            release.set()
            slow_may_end.set()
            worker.stop()
            async with asyncio.timeout(5):
                await runner
    assert fast in first_batch and slow not in first_batch
    assert held == 3
    assert leases[:2] == [2, 1]  # the second lease asked for the one free slot
    assert sorted(stub.batch_acked()) == sorted([fast, slow, later])
    assert stub.calls("complete") == []


async def test_the_loop_leases_nothing_while_batch_size_finished_jobs_await_their_answer(stub):
    """concurrency = batch_size = 2: both jobs of the first lease are done and their acknowledgement is
    unanswered, so both slots are free but the loop leases the third job only after that answer."""
    arrived, release = hold_batch_route(stub)
    first, second, third = stub.add_jobs(job_json("ok"), job_json("ok"), job_json("ok"))
    finished: list[str] = []
    answered: set[str] = set()
    unanswered_at_lease: list[int] = []

    async with Client(stub.url, "t") as qf:
        lease, complete_many = qf.lease, qf.complete_many

        async def noting_lease(*args, **kwargs):
            unanswered_at_lease.append(len(set(finished) - answered))  # when the loop decides to lease
            return await lease(*args, **kwargs)

        async def noting_complete_many(items, *args, **kwargs):
            answer = await complete_many(items, *args, **kwargs)
            answered.update(item.id for item in items)
            return answer

        qf.lease = noting_lease
        qf.complete_many = noting_complete_many
        worker = Worker(qf, "q", {"ok": lambda ctx: finished.append(ctx.job.id)}, wait_secs=0, concurrency=2)
        runner = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(5):
                # Both handlers returned (and woke the loop) before the probe and this call went out.
                await arrived.wait()
            leases_before_answer = len(unanswered_at_lease)
            held, left = worker.held, len(stub.queue)
            release.set()
            await until(lambda: len(stub.batch_acked()) == 3 and worker.held == 0)
        finally:
            release.set()
            worker.stop()
            async with asyncio.timeout(5):
                await runner
    assert leases_before_answer == 1 and held == 2 and left == 1
    assert [item["id"] for item in stub.batches()[0]] == [first, second]
    assert unanswered_at_lease[:2] == [0, 0]  # the second lease waited for both answers
    assert max(unanswered_at_lease) < 2
    assert stub.batch_acked() == [first, second, third]
