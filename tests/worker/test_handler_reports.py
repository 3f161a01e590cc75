"""In-process handlers report progress and log lines through their context (`ctx.progress`,
`ctx.log`): written in batches at most once a second per job, and before the job's outcome; bad
arguments are the handler's own error; a report never changes an outcome."""

from __future__ import annotations

import asyncio
import math
import time
import types
import uuid
from typing import Any

import pytest

from services.worker import notes
from services.worker.registry import JobContext
from services.worker.runtime import default_registry
from shared.domain.visibility import MAX_LOG_CALL_BYTES, NewLogLine
from tests.protocol.helpers import AUTH, cancel, create_job, finished, get_job, reaches
from tests.support.waiting import eventually


@pytest.fixture
def log_calls(monkeypatch) -> list[int]:
    """The number of lines of each log statement the runtime makes."""
    calls: list[int] = []
    append = notes.visibility_db.append_logs

    async def counted(db, job_id, token, lines, max_bytes):
        calls.append(len(lines))
        return await append(db, job_id, token, lines, max_bytes)

    monkeypatch.setattr(notes.visibility_db, "append_logs", counted)
    return calls


async def logs_of(client, job_id: str) -> list[dict[str, Any]]:
    resp = await client.get(f"/api/v1/jobs/{job_id}/logs?limit=1000", headers=AUTH)
    assert resp.status == 200, await resp.text()
    return list((await resp.json())["lines"])


def progress_of(job: dict[str, Any]) -> dict[str, Any] | None:
    progress = job.get("progress")
    return None if progress is None else {k: v for k, v in progress.items() if k != "updated_at"}


async def test_progress_and_lines_are_written_in_calls_of_100_before_the_outcome(worker_app, log_calls):
    async def chatty(ctx: JobContext) -> dict:
        ctx.progress(30, "loading")
        for n in range(1, 251):
            ctx.log(f"line {n}", "warn" if n == 2 else "info")
        ctx.progress(100, "done")
        return {"ok": True}

    registry = default_registry()
    registry.register("chatty", chatty)
    client = await worker_app(registry)
    job_id = await create_job(client, "chatty")

    job = await finished(client, job_id)
    assert job["status"] == "completed"
    # Both were written before the completion: nothing is left to arrive after it.
    assert progress_of(job) == {"percent": 100, "message": "done"}
    lines = await logs_of(client, job_id)
    assert [line["message"] for line in lines] == [f"line {n}" for n in range(1, 251)]
    assert [line["seq"] for line in lines] == list(range(1, 251))
    assert {line["attempt"] for line in lines} == {1}
    assert lines[1]["level"] == "warn" and lines[0]["level"] == "info"
    assert log_calls == [100, 100, 50]


async def test_a_sync_handler_reports_from_its_thread(worker_app):
    def steady(ctx: JobContext) -> dict:
        ctx.log("from a thread")
        ctx.progress(55.5)
        return {}

    registry = default_registry()
    registry.register("steady", steady)
    client = await worker_app(registry)
    job_id = await create_job(client, "steady")

    job = await finished(client, job_id)
    assert job["status"] == "completed"
    assert progress_of(job) == {"percent": 55.5}
    assert [line["message"] for line in await logs_of(client, job_id)] == ["from a thread"]


async def test_a_handler_logging_for_seconds_writes_about_once_a_second(worker_app, log_calls):
    async def talker(ctx: JobContext) -> dict:
        for n in range(120):
            ctx.log(f"tick {n}")
            await asyncio.sleep(0.02)
        return {}

    registry = default_registry()
    registry.register("talker", talker)
    client = await worker_app(registry)
    began = time.monotonic()
    job_id = await create_job(client, "talker")
    await finished(client, job_id)
    elapsed = time.monotonic() - began

    assert sum(log_calls) == 120
    assert len(await logs_of(client, job_id)) == 120
    # One write a second while it ran (the first at once), plus the one when it ended.
    assert 2 <= len(log_calls) <= math.ceil(elapsed / notes.FLUSH_SECS) + 1, (log_calls, elapsed)


@pytest.mark.parametrize(
    ("report", "complaint"),
    [
        (lambda ctx: ctx.progress(101), "progress percent must be a number from 0 to 100"),
        (lambda ctx: ctx.progress(True), "progress percent must be a number from 0 to 100"),
        (lambda ctx: ctx.progress(5, "x" * 1025), "a progress message is a string of at most 1024"),
        (lambda ctx: ctx.log("hello", "two words"), "a log level is 1 to 16 letters"),
        (lambda ctx: ctx.log(42), "a log message is a string, not int"),
    ],
)
async def test_a_bad_report_is_the_handler_s_own_error(worker_app, report, complaint):
    async def wrong(ctx: JobContext) -> dict:
        report(ctx)
        return {}

    registry = default_registry()
    registry.register("wrong", wrong)
    client = await worker_app(registry)
    job_id = await create_job(client, "wrong", max_retries=0)

    job = await finished(client, job_id)
    assert job["status"] == "failed"
    assert complaint in job["error_message"]


async def test_lines_of_a_cancelled_job_are_kept_and_nothing_is_reported_for_it(worker_app):
    async def patient(ctx: JobContext) -> dict:
        ctx.log("before the cancel")
        ctx.progress(10)
        await asyncio.Event().wait()  # until cancelled
        return {}

    registry = default_registry()
    registry.register("patient", patient)
    client = await worker_app(registry)
    job_id = await create_job(client, "patient")
    await reaches(client, job_id, "running")

    async def logged() -> bool:
        return len(await logs_of(client, job_id)) == 1

    await eventually(logged, message="the periodic write stored the line")
    assert await cancel(client, job_id) == 204
    job = await finished(client, job_id)
    assert job["status"] == "cancelled"
    assert progress_of(await get_job(client, job_id)) == {"percent": 10}
    follower = await create_job(client, "echo")  # the runtime goes on
    assert (await finished(client, follower))["status"] == "completed"


async def test_messages_are_stored_as_postgresql_can_hold_them(worker_app):
    long = "é" * MAX_LOG_CALL_BYTES  # two bytes each: twice what a call takes

    async def odd(ctx: JobContext) -> dict:
        ctx.log("nul\x00inside")
        ctx.log(long)
        return {}

    registry = default_registry()
    registry.register("odd", odd)
    client = await worker_app(registry)
    job_id = await create_job(client, "odd")
    await finished(client, job_id)

    first, second = await logs_of(client, job_id)
    assert first["message"] == "nul\ufffdinside"
    assert second["message"] == "é" * (MAX_LOG_CALL_BYTES // 2)


def test_lines_are_cut_into_calls_by_count_and_by_bytes():
    def lines(*sizes: int) -> list[NewLogLine]:
        return [NewLogLine(message="x" * size) for size in sizes]

    assert [len(c) for c in notes.log_calls(lines(*[1] * 250))] == [100, 100, 50]
    half = MAX_LOG_CALL_BYTES // 2
    assert [len(c) for c in notes.log_calls(lines(half, half, 1, MAX_LOG_CALL_BYTES))] == [2, 1, 1]
    assert notes.log_calls([]) == []


async def test_what_is_noted_while_a_pass_writes_is_written_by_the_next_pass(monkeypatch):
    """The writer is woken when the first report arrives into an empty buffer; a report that arrives
    while a pass is writing, with other jobs' reports still waiting in it, is written by the next
    pass, a second later, not left until its handler ends."""
    written: list[str] = []
    a, b, c, token = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    writer = notes.JobNotes(types.SimpleNamespace(pool=None), 1024)  # type: ignore[arg-type]

    async def append(db, job_id, tok, lines, max_bytes):
        written.extend(line.message for line in lines)
        if job_id == a:  # another handler reports while this pass writes, c's still waiting
            writer.note_line(b, token, NewLogLine(message="from b"))

    monkeypatch.setattr(notes.visibility_db, "append_logs", append)
    monkeypatch.setattr(notes, "FLUSH_SECS", 0.01)
    writer.start()  # (its task first runs at the next await: both lines are noted by then)
    writer.note_line(a, token, NewLogLine(message="from a"))
    writer.note_line(c, token, NewLogLine(message="from c"))
    try:
        await eventually(lambda: len(written) == 3, message="b's line written by the loop", timeout=2)
        assert written == ["from a", "from c", "from b"]
    finally:
        writer._pending.clear()  # (stop() would write what is left: the assertion is the loop's)
        await writer.stop()


async def test_the_outcome_waits_for_a_write_of_the_job_already_under_way(worker_app, monkeypatch):
    """A handler that ends while the periodic pass is writing its lines: the outcome is written
    after that write, and after what the handler noted since."""
    in_write, release = asyncio.Event(), asyncio.Event()
    append = notes.visibility_db.append_logs

    async def slow_append(db, job_id, token, lines, max_bytes):
        in_write.set()
        await release.wait()
        return await append(db, job_id, token, lines, max_bytes)

    monkeypatch.setattr(notes.visibility_db, "append_logs", slow_append)

    async def reporter(ctx: JobContext) -> dict:
        ctx.log("first")
        await in_write.wait()  # the periodic pass has taken "first" and is writing it
        ctx.progress(100, "done")
        return {}

    registry = default_registry()
    registry.register("reporter", reporter)
    client = await worker_app(registry)
    job_id = await create_job(client, "reporter")
    await in_write.wait()
    await asyncio.sleep(0.3)
    assert (await get_job(client, job_id))["status"] == "running"  # held for the write under way
    release.set()

    job = await finished(client, job_id)
    assert job["status"] == "completed"
    assert progress_of(job) == {"percent": 100, "message": "done"}
    assert [line["message"] for line in await logs_of(client, job_id)] == ["first"]
