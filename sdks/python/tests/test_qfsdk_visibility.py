"""Visibility (sdks/conformance/README.md, "Visibility"): the worker's id and info on lease, a
handler's progress and log lines (batched per job, flushed before the outcome, never changing it),
and the OpenTelemetry span each handler runs in; the per-job buffer's rules with a fake clock."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from datetime import UTC, datetime

import pytest
from conftest import FAST, error, job_json, run_until, until
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from unofficial_queueflow_client import Client, JobContext, PermanentError, Worker, __version__
from unofficial_queueflow_client._reports import MAX_BUFFERED_LINES, JobReports, check_progress, cut_message
from unofficial_queueflow_client.models import MAX_LOG_CALL_BYTES, ProgressReport

TS = datetime(2026, 1, 1, tzinfo=UTC)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def finished(stub, count: int = 1):
    """The stub saw `count` outcomes (complete or fail)."""
    return lambda: len(stub.calls("complete")) + len(stub.calls("fail")) >= count


def messages(calls: list[list[dict]]) -> list[str]:
    return [line["message"] for lines in calls for line in lines]


# --- the buffer's rules, with a fake clock ----------------------------------------------------------


def test_a_steady_logger_is_posted_once_a_second_from_the_handlers_start():
    reports = JobReports(started=100.0)
    assert reports.logs_due() is None  # nothing buffered, nothing due
    posted: list[int] = []
    for tenth in range(30):  # 10 lines a second for 3 s; the loop posts whenever a call is due
        now = 100 + tenth / 10
        reports.log(f"line {tenth}", "info", TS)
        due = reports.logs_due()
        assert due is not None
        if due <= now:
            reports.logs_at = now
            posted.append(len(reports.take_lines()))
    assert posted == [11, 10]  # at 101.0 and 102.0: not one call per line
    assert len(reports.take_lines()) == 9  # the handler's end sends the rest


def test_calls_take_at_most_100_lines_and_64_kib():
    reports = JobReports(started=0.0)
    for n in range(250):
        reports.log(f"line {n}", "info", TS)
    assert [len(reports.take_lines()) for _ in range(3)] == [100, 100, 50]
    assert not reports.has_lines
    big = "x" * (30 * 1024)
    for _ in range(3):
        reports.log(big, "info", TS)
    assert [len(reports.take_lines()) for _ in range(2)] == [2, 1]  # 60 KiB fit, 90 do not


def test_a_message_past_64_kib_is_cut_at_a_character_boundary():
    message = "€" * 30_000  # 3 bytes each: 90,000 bytes
    cut, size = cut_message(message)
    assert size == len(cut.encode()) == 65_535  # 21,845 whole characters; the split one goes
    assert message.startswith(cut)
    assert cut_message("a\x00b") == ("a\ufffdb", 5)  # PostgreSQL cannot store a NUL
    assert cut_message("ok") == ("ok", 2)


def test_the_buffer_drops_its_newest_lines_past_10000():
    reports = JobReports(started=0.0)
    for n in range(MAX_BUFFERED_LINES + 5):
        reports.log(f"line {n}", "info", TS)
    assert reports.dropped == 5
    sent = []
    while reports.has_lines:
        sent.extend(line.message for line in reports.take_lines())
    assert sent[0] == "line 0" and sent[-1] == f"line {MAX_BUFFERED_LINES - 1}"


def test_a_new_progress_report_is_due_a_second_after_the_last_heartbeat():
    reports = JobReports(started=10.0)
    assert reports.progress_due() is None and reports.progress_to_send() is None
    reports.progress(ProgressReport(percent=10))
    reports.progress(ProgressReport(percent=20, message="m"))
    assert reports.progress_due() == 11.0
    report, version = reports.progress_to_send() or (None, 0)
    assert report == ProgressReport(percent=20, message="m")
    reports.beat_at = 11.0
    reports.progress(ProgressReport(percent=30))  # newer than the one in flight
    reports.progress_sent(version)
    assert reports.progress_due() == 12.0
    assert reports.progress_to_send() == (ProgressReport(percent=30), version + 1)
    reports.progress_sent(version + 1)
    assert reports.progress_due() is None


@pytest.mark.parametrize(
    ("percent", "message"), [(-1, None), (100.5, None), (float("nan"), None), (True, None), (50, "m" * 1025)]
)
def test_progress_out_of_range_is_an_argument_error(percent, message):
    with pytest.raises(ValueError):
        check_progress(percent, message)


def test_a_context_without_a_worker_buffers_and_checks_its_arguments():
    ctx = JobContext(job=None, lease_token="t", client=None)  # type: ignore[arg-type]
    ctx.progress(0)
    ctx.progress(100, "m" * 1024)
    ctx.log("hello")
    with pytest.raises(ValueError):
        ctx.log("bad level", "not a level")
    with pytest.raises(ValueError):
        ctx.log("too long a level", "x" * 17)
    with pytest.raises(ValueError):
        ctx.progress(101)
    assert ctx._reports is not None
    assert [line.message for line in ctx._reports.take_lines()] == ["hello"]
    assert ctx._reports.progress_to_send() == (ProgressReport(percent=100, message="m" * 1024), 2)


# --- the worker loop ---------------------------------------------------------------------------------


async def test_a_burst_of_250_lines_costs_three_calls_sent_before_the_report(stub):
    [job_id] = stub.add_jobs(job_json("chatty"))

    async def chatty(ctx: JobContext):
        for n in range(1, 251):
            ctx.log(f"line {n}", "warn" if n == 250 else "info")
            await asyncio.sleep(0)  # the loop gets a turn after every line, all within the first second
        return {"ok": True}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"chatty": chatty}, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    calls = stub.log_calls(job_id)
    assert [len(lines) for lines in calls] == [100, 100, 50]
    assert messages(calls) == [f"line {n}" for n in range(1, 251)]
    assert {line["level"] for lines in calls for line in lines[:-1]} == {"info"} and calls[-1][-1]["level"] == "warn"
    assert all(datetime.fromisoformat(line["ts"]).tzinfo is not None for lines in calls for line in lines)
    assert stub.order(job_id) == ["logs", "logs", "logs", "complete"]  # every line before the outcome
    assert all(headers["Authorization"] == "Bearer t" for _, path, headers, _ in stub.requests if "/logs" in path)
    assert stub.calls("logs")[0]["lease_token"] == stub.calls("complete")[0]["lease_token"]


async def test_a_handler_that_logs_for_3_seconds_costs_about_one_call_a_second(stub):
    [job_id] = stub.add_jobs(job_json("steady"))

    ran = []

    async def steady(ctx: JobContext):
        started = asyncio.get_running_loop().time()
        for n in range(30):  # 10 lines a second
            ctx.log(f"line {n}")
            await asyncio.sleep(0.1)
        ran.append(asyncio.get_running_loop().time() - started)
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"steady": steady}, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    calls = stub.log_calls(job_id)
    # about one a second while it ran (3 s, more on a busy machine), then the rest: not one a line
    assert 2 <= len(calls) <= ran[0] + 2, (ran, [len(lines) for lines in calls])
    assert messages(calls) == [f"line {n}" for n in range(30)]
    assert stub.order(job_id)[-1] == "complete"


async def test_calls_split_at_64_kib_and_a_longer_message_is_cut(stub):
    [job_id] = stub.add_jobs(job_json("big"))
    long = "€" * 30_000  # 90,000 bytes
    chunk = "x" * (30 * 1024)

    def big(ctx: JobContext):
        ctx.log(long)
        for _ in range(3):
            ctx.log(chunk)
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"big": big}, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    calls = stub.log_calls(job_id)
    sizes = [sum(len(line["message"].encode()) for line in lines) for lines in calls]
    assert [len(lines) for lines in calls] == [1, 2, 1]
    assert all(size <= MAX_LOG_CALL_BYTES for size in sizes)
    first = calls[0][0]["message"]
    assert long.startswith(first) and len(first.encode()) == 65_535


async def test_a_rejected_logs_call_never_changes_the_outcome(stub, caplog):
    ok_id, fail_id = stub.add_jobs(job_json("ok"), job_json("boom"))
    stub.logs_answer = lambda job_id: error(409, "lease is no longer held")

    def ok(ctx: JobContext):
        for n in range(150):
            ctx.log(f"line {n}")
        return {"done": True}

    def boom(ctx: JobContext):
        ctx.log("failing on purpose", "error")
        raise PermanentError("invalid input")

    caplog.set_level(logging.INFO, "unofficial_queueflow_client.worker")
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": ok, "boom": boom}, wait_secs=0, concurrency=2, backoff=FAST)
        await run_until(worker, finished(stub, 2))
    assert stub.calls("complete", ok_id)[0]["result"] == {"done": True}
    assert stub.calls("fail", ok_id) == []
    assert stub.calls("fail", fail_id)[0] | {"lease_token": ""} == {
        "lease_token": "",
        "error": "invalid input",
        "retryable": False,
    }
    assert len(stub.log_calls(ok_id)) == 1  # a 409 says no later call can succeed: the rest is given up
    assert "log line(s) not stored" in caplog.text


async def test_an_outage_of_the_logs_route_does_not_hold_the_outcome_back(stub):
    [job_id] = stub.add_jobs(job_json("ok"))
    stub.logs_answer = lambda job_id: error(503, "database unavailable")

    def ok(ctx: JobContext):
        for n in range(1000):
            ctx.log(f"line {n}")
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": ok}, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    assert len(stub.calls("logs", job_id)) == 1  # not 10: the first failure gives the rest up
    assert len(stub.calls("complete", job_id)) == 1


async def test_a_full_buffer_drops_the_newest_lines_and_says_so(stub, caplog):
    [job_id] = stub.add_jobs(job_json("flood"))

    def flood(ctx: JobContext):
        for n in range(MAX_BUFFERED_LINES + 50):
            ctx.log(f"line {n}")
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"flood": flood}, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub), timeout=30)
    assert len(stub.logs[job_id]) == MAX_BUFFERED_LINES
    assert stub.logs[job_id][-1]["message"] == f"line {MAX_BUFFERED_LINES - 1}"
    assert "50 log line(s) dropped" in caplog.text


async def test_progress_comes_early_on_a_heartbeat_and_the_last_report_before_the_outcome(stub):
    [job_id] = stub.add_jobs(job_json("slow"))
    seen_early = asyncio.Event()

    ran = []

    async def slow(ctx: JobContext):
        started = asyncio.get_running_loop().time()
        ctx.progress(10, "starting")
        for step in range(1, 21):  # a report every 0.1 s: at most one early heartbeat a second
            await asyncio.sleep(0.1)
            ctx.progress(10 + step, f"step {step}")
        await until(lambda: stub.calls("heartbeat"), timeout=5)
        seen_early.set()
        ran.append(asyncio.get_running_loop().time() - started)
        ctx.progress(100, "done")
        return {}

    async with Client(stub.url, "t") as qf:
        # lease_secs 60: the regular heartbeat is 30 s away, so any heartbeat seen is an early one
        worker = Worker(qf, "q", {"slow": slow}, lease_secs=60, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    assert seen_early.is_set()
    beats = stub.calls("heartbeat", job_id)
    # about one a second while it ran (2 s, more on a busy machine), and the last one: not 21
    assert 2 <= len(beats) <= ran[0] + 2, (ran, beats)
    assert all(beat["extend_secs"] == 60 and "progress" in beat for beat in beats)
    assert beats[0]["progress"]["percent"] >= 10
    assert beats[-1]["progress"] == {"percent": 100, "message": "done"}
    assert stub.order(job_id)[-2:] == ["heartbeat", "complete"]


async def test_no_last_heartbeat_when_the_server_has_the_latest_report(stub):
    [job_id] = stub.add_jobs(job_json("once"))

    async def once(ctx: JobContext):
        ctx.progress(50)
        await until(lambda: stub.calls("heartbeat"), timeout=5)
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"once": once}, lease_secs=60, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    assert [beat["progress"] for beat in stub.calls("heartbeat", job_id)] == [{"percent": 50}]


async def test_a_refused_last_progress_report_does_not_change_the_outcome(stub):
    [job_id] = stub.add_jobs(job_json("ok"))
    stub.heartbeat_answer = lambda jid: error(409, "lease is no longer held")

    def ok(ctx: JobContext):
        ctx.progress(100, "done")
        return {"r": 1}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": ok}, lease_secs=60, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    assert len(stub.calls("heartbeat", job_id)) == 1
    assert stub.calls("complete", job_id)[0]["result"] == {"r": 1}


async def test_a_handlers_thread_may_log_and_report_progress(stub):
    [job_id] = stub.add_jobs(job_json("threaded"))

    def work(ctx: JobContext) -> None:
        for n in range(5):
            ctx.log(f"from a thread {n}")
        ctx.progress(100)

    async def threaded(ctx: JobContext):
        await asyncio.to_thread(work, ctx)
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"threaded": threaded}, lease_secs=60, wait_secs=0, backoff=FAST)
        await run_until(worker, finished(stub))
    assert messages(stub.log_calls(job_id)) == [f"from a thread {n}" for n in range(5)]
    assert stub.calls("heartbeat", job_id)[-1]["progress"] == {"percent": 100}


async def test_leases_name_the_worker_and_say_what_it_is_until_one_succeeded(stub):
    stub.lease_answers = [lambda: error(503, "database unavailable")]
    stub.add_jobs(job_json("b"), job_json("a"))
    async with Client(stub.url, "t") as qf:
        worker = Worker(
            qf, "q", {"b": lambda ctx: {}, "a": lambda ctx: {}}, wait_secs=0, worker_id="box-1:42", backoff=FAST
        )
        await run_until(worker, lambda: finished(stub, 2)() and len(stub.calls("lease")) >= 4)
    leases = stub.calls("lease")
    info = {"hostname": socket.gethostname(), "sdk": "python", "version": __version__, "tasks": ["a", "b"]}
    assert leases[0]["worker_id"] == leases[1]["worker_id"] == "box-1:42"
    assert leases[0]["worker"] == leases[1]["worker"] == info  # the first lease failed: said again
    assert all(lease["worker_id"] == "box-1:42" and "worker" not in lease for lease in leases[2:])


def test_the_worker_id_defaults_to_host_and_pid_and_is_checked():
    client = Client("http://x", "t")
    worker = Worker(client, "q", {})
    assert worker.worker_id == f"{socket.gethostname()}:{os.getpid()}"
    for bad in ("", "has space", "x" * 129, "é"):
        with pytest.raises(ValueError):
            Worker(client, "q", {}, worker_id=bad)
    assert Worker(client, "q", {}, worker_id="x" * 128).worker_id == "x" * 128


# --- the handler's span ------------------------------------------------------------------------------


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


async def test_the_handler_runs_in_a_consumer_span_continuing_the_jobs_trace(stub, spans):
    provider, exporter = spans
    ok_id, boom_id = stub.add_jobs(job_json("ok", delivery_count=3), job_json("boom"))
    stub.traces[ok_id] = {"traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE"}
    current = {}

    async def ok(ctx: JobContext):
        current[ctx.job.id] = trace.get_current_span().get_span_context()
        with provider.get_tracer("app").start_as_current_span("child"):
            pass
        return {}

    async def boom(ctx: JobContext):
        raise ValueError("boom")

    outer = provider.get_tracer("app")
    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": ok, "boom": boom}, wait_secs=0, backoff=FAST, tracer_provider=provider)
        with outer.start_as_current_span("the application's"):  # not the parent of a job without context
            await run_until(worker, finished(stub, 2))

    finished_spans = exporter.get_finished_spans()
    by_job = {span.attributes["messaging.message.id"]: span for span in finished_spans if span.name == "process q"}
    span = by_job[ok_id]
    assert span.kind is SpanKind.CONSUMER
    assert span.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert span.parent is not None and span.parent.span_id == 0x00F067AA0BA902B7 and span.parent.is_remote
    assert span.context.trace_state.get("congo") == "t61rcWkgMzE"
    assert dict(span.attributes) == {
        "messaging.system": "queueflow",
        "messaging.operation": "process",
        "messaging.destination.name": "q",
        "messaging.message.id": ok_id,
        "queueflow.task.name": "ok",
        "queueflow.job.attempt": 3,
    }
    assert span.status.status_code is StatusCode.UNSET
    assert current[ok_id].span_id == span.context.span_id  # current while the handler ran
    [child] = [s for s in finished_spans if s.name == "child"]
    assert child.parent.span_id == span.context.span_id

    failed = by_job[boom_id]
    assert failed.parent is None  # a root span: the job has no trace context
    assert failed.status.status_code is StatusCode.ERROR and failed.status.description == "boom"
    assert [event.name for event in failed.events] == ["exception"]
    assert failed.attributes["queueflow.job.attempt"] == 1
    assert failed.end_time is not None and span.end_time is not None


async def test_without_an_sdk_the_span_is_the_apis_no_op(stub):
    [job_id] = stub.add_jobs(job_json("ok"))
    stub.traces[job_id] = {"traceparent": TRACEPARENT}
    seen = []

    def ok(ctx: JobContext):
        seen.append(trace.get_current_span())
        return {}

    async with Client(stub.url, "t") as qf:
        worker = Worker(qf, "q", {"ok": ok}, wait_secs=0, backoff=FAST, tracer_provider=trace.NoOpTracerProvider())
        await run_until(worker, finished(stub))
    assert not seen[0].is_recording()
    assert stub.calls("complete", job_id)
