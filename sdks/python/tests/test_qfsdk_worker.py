"""The worker loop against a stub server: outcomes, heartbeats, cancellation, auth, outages, drain."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiohttp import web
from conftest import FAST, error, job_json, run_until

from unofficial_queueflow_client import Backoff, Client, Forbidden, JobContext, PermanentError, Unauthorized, Worker


async def test_results_and_failures_are_reported(stub):
    ids = stub.add_jobs(
        job_json("ok", {"n": 1}),
        job_json("none"),
        job_json("boom"),
        job_json("perm"),
        job_json("flagged"),
        job_json("unknown"),
    )

    class Flagged(Exception):
        retryable = False

    async def boom(ctx):
        raise ValueError("boom")

    async def perm(ctx):
        raise PermanentError("invalid input")

    def flagged(ctx):  # plain functions work too
        raise Flagged("nope")

    handlers = {"ok": lambda ctx: ctx.payload, "none": lambda ctx: None, "boom": boom, "perm": perm, "flagged": flagged}
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", handlers, wait_secs=0, concurrency=3, backoff=FAST)
        await run_until(worker, lambda: len(stub.calls("complete")) + len(stub.calls("fail")) == 6)
    assert stub.calls("complete", ids[0])[0]["result"] == {"n": 1}
    assert stub.calls("complete", ids[1])[0]["result"] == {}
    assert stub.calls("fail", ids[2])[0] | {"lease_token": ""} == {
        "lease_token": "",
        "error": "boom",
        "retryable": True,
    }
    assert stub.calls("fail", ids[3])[0]["retryable"] is False
    assert stub.calls("fail", ids[3])[0]["error"] == "invalid input"
    assert stub.calls("fail", ids[4])[0]["retryable"] is False
    assert stub.calls("fail", ids[5])[0]["error"] == "no worker handler for task 'unknown'"
    assert stub.calls("fail", ids[5])[0]["retryable"] is False


async def test_every_held_job_is_heartbeated_while_waiting_its_turn(stub):
    ids = stub.add_jobs(job_json("slow"), job_json("slow"), job_json("slow"))

    async def slow(ctx):
        await asyncio.sleep(0.8)
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"slow": slow}, lease_secs=1, wait_secs=0, concurrency=1, batch_size=3)
        await run_until(worker, lambda: len(stub.calls("complete")) == 3)
    leases = stub.calls("lease")
    assert leases[0]["max_jobs"] == 3
    # the last job waited 1.6 s for its turn: it was heartbeated (every 0.5 s) meanwhile
    assert len(stub.calls("heartbeat", ids[2])) >= 2
    assert all(b["extend_secs"] == 1 for b in stub.calls("heartbeat"))


@pytest.mark.parametrize("answer", ["cancelled", "conflict"])
async def test_a_lost_job_cancels_its_handler_and_reports_nothing(stub, answer):
    [job_id] = stub.add_jobs(job_json("long"))
    if answer == "cancelled":
        stub.heartbeat_status[job_id] = "cancelled"
    else:
        stub.heartbeat_answer = lambda jid: error(409, "lease is no longer held")
    observed = asyncio.Event()

    async def long(ctx: JobContext):
        await ctx.cancelled.wait()
        observed.set()
        return {"too": "late"}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"long": long}, lease_secs=1, wait_secs=0)
        await run_until(worker, observed.is_set)
    assert stub.calls("complete") == [] and stub.calls("fail") == []


async def test_a_handler_that_ignores_the_signal_is_cancelled_after_the_grace(stub):
    [job_id] = stub.add_jobs(job_json("stubborn"))
    stub.heartbeat_status[job_id] = "completed"
    cancelled = asyncio.Event()

    async def stubborn(ctx):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"stubborn": stubborn}, lease_secs=1, wait_secs=0, cancel_grace=0.1)
        await run_until(worker, cancelled.is_set)
    assert stub.calls("complete") == [] and stub.calls("fail") == []


@pytest.mark.parametrize(("status", "cls"), [(401, Unauthorized), (403, Forbidden)])
async def test_auth_errors_stop_the_loop(stub, status, cls):
    stub.lease_answers = [lambda: error(status, "no")] * 3
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {}, wait_secs=0)
        with pytest.raises(cls) as caught:
            async with asyncio.timeout(5):
                await worker.run()
    assert caught.value.status == status and caught.value.body.error == "no"
    assert len(stub.calls("lease")) == 1


async def test_outages_back_off_and_the_loop_recovers(stub, caplog):
    [job_id] = stub.add_jobs(job_json("ok"))
    stub.lease_answers = [
        lambda: error(503, "database unavailable"),
        lambda: error(500, "oops"),
        lambda: web.Response(status=502, text="bad gateway"),
    ]
    delays = []

    class Recording(Backoff):
        def next(self):
            delay = super().next()
            delays.append(delay)
            return delay

    caplog.set_level(logging.WARNING, "unofficial_queueflow_client.worker")
    async with Client(stub.url, "t") as qf:
        worker = Worker(
            qf,
            "q",
            {"ok": lambda ctx: {"done": True}},
            wait_secs=0,
            backoff=Recording(initial=0.01, maximum=0.03, jitter=0.5),
        )
        await run_until(worker, lambda: bool(stub.calls("complete")))
    assert stub.calls("complete", job_id)[0]["result"] == {"done": True}
    assert len(delays) == 3 and all(0.005 <= d <= 0.03 for d in delays)
    assert worker.backoff.attempts == 0  # reset after the successful lease
    assert "retrying in" in caplog.text


async def test_transport_errors_back_off_until_the_server_returns(stub):
    async with Client(stub.url.rsplit(":", 1)[0] + ":1", "t") as qf:  # nothing listens on port 1
        worker = Worker(qf, "q", {}, wait_secs=0, backoff=Backoff(initial=0.01, maximum=0.02))
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.3)
        assert not task.done() and worker.backoff.attempts >= 3
        worker.stop()
        async with asyncio.timeout(2):
            await task


async def test_a_rejected_report_is_logged_not_turned_into_a_failure(stub, caplog):
    stub.add_jobs(job_json("ok"))
    stub.report_answer = lambda kind, jid: error(409, "lease is no longer held")
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: {}}, wait_secs=0, backoff=FAST)
        await run_until(worker, lambda: bool(stub.calls("complete")))
    assert len(stub.calls("complete")) == 1 and stub.calls("fail") == []
    assert "complete rejected" in caplog.text


async def test_a_report_that_meets_an_outage_is_retried(stub):
    stub.add_jobs(job_json("ok"))
    answers = [error(503, "draining"), web.Response(status=500)]
    stub.report_answer = lambda kind, jid: answers.pop(0) if answers else None
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": lambda ctx: {"r": 1}}, wait_secs=0, backoff=FAST)
        await run_until(worker, lambda: len(stub.calls("complete")) == 3 and worker.held == 0)
    assert all(c["result"] == {"r": 1} for c in stub.calls("complete")) and stub.calls("fail") == []


async def test_stop_drains_in_flight_jobs_and_leases_no_more(stub):
    stub.add_jobs(job_json("slow"), job_json("slow"))
    started = asyncio.Event()

    async def slow(ctx):
        started.set()
        await asyncio.sleep(0.3)
        return {"finished": True}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"slow": slow}, wait_secs=0, concurrency=2)
        task = asyncio.create_task(worker.run())
        await started.wait()
        leases = len(stub.calls("lease"))
        worker.stop()
        async with asyncio.timeout(5):
            await task
    assert len(stub.calls("complete")) == 2 and worker.held == 0
    assert len(stub.calls("lease")) <= leases + 1  # at most the lease already in flight


async def test_the_drain_timeout_abandons_jobs_without_reporting(stub):
    stub.add_jobs(job_json("forever"))
    started = asyncio.Event()
    seen = []

    async def forever(ctx: JobContext):
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            seen.append(ctx.cancel_reason)

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"forever": forever}, wait_secs=0, drain_timeout=0.1)
        task = asyncio.create_task(worker.run())
        await started.wait()
        worker.stop()
        async with asyncio.timeout(5):
            await task
    assert seen == ["worker shut down before the job finished"]
    assert stub.calls("complete") == [] and stub.calls("fail") == []


def test_options_are_validated():
    client = Client("http://x", "t")
    for kwargs in ({"lease_secs": 0}, {"wait_secs": 31}, {"concurrency": 0}, {"batch_size": 101}):
        with pytest.raises(ValueError):
            Worker(client, "q", {}, **kwargs)
    assert Worker(client, "q", {}, concurrency=4).batch_size == 4
