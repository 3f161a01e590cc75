"""The Python SDK's conformance runner (sdks/conformance/README.md): `runner.py <scenario.json>`.

Built on the SDK's public API only. Events go to stdout as JSON lines; commands come on stdin.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from unofficial_queueflow_client import (
    ApiError,
    Client,
    CreateJobRequest,
    CreateWorkflowRequest,
    JobConfigRequest,
    JobContext,
    PermanentError,
    UniquePolicy,
    Worker,
    WorkflowStep,
    sleep_step,
    wait_for_event_step,
)
from unofficial_queueflow_client.models import to_builtins

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def body_ok(err: ApiError) -> bool:
    """The error exposes the server's body with string `error` and `timestamp` fields."""
    raw = err.raw if isinstance(err.raw, dict) else {}
    return (
        err.body is not None
        and isinstance(err.body.error, str)
        and isinstance(raw.get("error"), str)
        and isinstance(raw.get("timestamp"), str)
    )


async def read_command() -> str:
    line = await asyncio.to_thread(sys.stdin.readline)
    return line.strip()


# --- loop mode ---------------------------------------------------------------------------------------


def make_handler(behaviour: str, on_finished: Any):
    async def handler(ctx: JobContext) -> dict[str, Any] | None:
        job_id = ctx.job.id
        emit("handler_started", job_id=job_id)
        outcome = "ok"
        try:
            if behaviour == "return_payload":
                return ctx.payload
            if behaviour == "sleep_200ms_then_return_payload":
                await asyncio.sleep(0.2)
                return ctx.payload
            if behaviour == "sleep_1500ms_then_return_payload":
                await asyncio.sleep(1.5)
                return ctx.payload
            if behaviour == "fail_retryable":
                outcome = "error"
                raise RuntimeError("boom")
            if behaviour == "fail_permanent":
                outcome = "error"
                raise PermanentError("invalid input")
            if behaviour == "wait_for_cancel":
                try:
                    async with asyncio.timeout(20):
                        await ctx.cancelled.wait()
                except TimeoutError:
                    outcome = "error"
                    raise RuntimeError("no cancellation signal within 20 s") from None
                emit("handler_observed_cancel", job_id=job_id)
                outcome = "cancelled"
                return None
            if behaviour == "report_progress_and_logs":
                ctx.progress(40, "loading")
                for n in range(1, 121):
                    ctx.log(f"line {n}", "info")
                current = trace.get_current_span().get_span_context()
                emit(
                    "handler_span",
                    job_id=job_id,
                    trace_id=trace.format_trace_id(current.trace_id),
                    span_id=trace.format_span_id(current.span_id),
                )
                ctx.progress(100, "done")
                return ctx.payload
            if behaviour == "log_then_fail_retryable":
                ctx.log("failing on purpose", "error")
                outcome = "error"
                raise RuntimeError("boom")
            outcome = "error"
            raise RuntimeError(f"unknown behaviour {behaviour!r}")
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            emit("job_done", job_id=job_id, outcome=outcome)
            on_finished()

    return handler


async def run_loop(spec: dict[str, Any], env: dict[str, str]) -> None:
    concurrency = int(spec.get("concurrency", 1))
    stop_after = int(spec["stop_after_jobs"])
    finished = 0
    worker: Worker | None = None

    def on_finished() -> None:
        nonlocal finished
        finished += 1
        if finished >= stop_after and worker is not None:
            worker.stop()

    handlers = {task: make_handler(behaviour, on_finished) for task, behaviour in spec["handlers"].items()}
    spans = install_tracing() if spec.get("tracing") else None
    async with Client(env["base"], env["tenant"], worker_token=env["worker"]) as client:
        worker = Worker(
            client,
            env["queue"],
            handlers,
            lease_secs=int(spec.get("lease_secs", 30)),
            wait_secs=1,
            concurrency=concurrency,
            batch_size=spec.get("batch_size"),
            drain_timeout=30,
            worker_id=spec.get("worker_id"),
        )
        await worker.run()
    if spans is not None:
        emit_worker_spans(spans)


def install_tracing() -> InMemorySpanExporter:
    """The OpenTelemetry SDK as the global tracer provider, its spans kept in memory as they end."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def emit_worker_spans(exporter: InMemorySpanExporter) -> None:
    """A `worker_span` event for each finished span the worker loop made (``process <queue>``)."""
    statuses = {trace.StatusCode.UNSET: "unset", trace.StatusCode.OK: "ok", trace.StatusCode.ERROR: "error"}
    for span in exporter.get_finished_spans():
        if not span.name.startswith("process "):
            continue
        attributes = dict(span.attributes or {})
        context = span.get_span_context()
        assert context is not None
        emit(
            "worker_span",
            job_id=attributes.get("messaging.message.id"),
            name=span.name,
            trace_id=trace.format_trace_id(context.trace_id),
            span_id=trace.format_span_id(context.span_id),
            parent_span_id="" if span.parent is None else trace.format_span_id(span.parent.span_id),
            kind=span.kind.name.lower(),
            status=statuses[span.status.status_code],
            attributes=attributes,
        )


# --- raw_stale_lease ---------------------------------------------------------------------------------


async def run_stale_lease(spec: dict[str, Any], env: dict[str, str]) -> None:
    async with Client(env["base"], env["tenant"], worker_token=env["worker"]) as client:
        leased = None
        for _ in range(30):
            leased = await client.lease(
                env["queue"], max_jobs=1, lease_secs=int(spec.get("lease_secs", 30)), wait_secs=1
            )
            if leased.jobs:
                break
        if leased is None or not leased.jobs:
            raise SystemExit("no job to lease")
        item = leased.jobs[0]
        emit("leased", job_id=item.job.id, lease_token=item.lease_token)
        command = await read_command()
        if command != "continue":
            raise SystemExit(f"expected 'continue', got {command!r}")
        statuses: dict[str, int | None] = {"heartbeat": None, "complete": None}
        ok = True
        try:
            await client.heartbeat(item.job.id, item.lease_token, extend_secs=30)
            ok = False
        except ApiError as err:
            statuses["heartbeat"] = err.status
            ok = ok and body_ok(err)
        try:
            await client.complete(item.job.id, item.lease_token, {"late": True})
            ok = False
        except ApiError as err:
            statuses["complete"] = err.status
            ok = ok and body_ok(err)
        emit(
            "stale_rejected",
            heartbeat_status=statuses["heartbeat"],
            complete_status=statuses["complete"],
            error_body_ok=ok,
        )


# --- auth_errors -------------------------------------------------------------------------------------


async def run_auth_errors(env: dict[str, str]) -> None:
    checks = [("loop_bad_token", "not-the-token"), ("loop_tenant_token", env["tenant"])]
    for name, worker_token in checks:
        async with Client(env["base"], env["tenant"], worker_token=worker_token) as client:
            worker = Worker(client, env["queue"], {}, lease_secs=10, wait_secs=1)
            try:
                async with asyncio.timeout(20):
                    await worker.run()
            except ApiError as err:
                emit(name, status=err.status, error_body_ok=body_ok(err))
            except TimeoutError:
                emit(name, status=None, error_body_ok=False, note="the loop did not stop")
            else:
                emit(name, status=None, error_body_ok=False, note="the loop returned")
    async with Client(env["base"], env["worker"]) as client:
        try:
            await client.create_job("conf.raw", {"a": 1}, config=JobConfigRequest(queue=env["queue"]))
        except ApiError as err:
            emit("raw_worker_token_on_tenant_route", status=err.status, error_body_ok=body_ok(err))
        else:
            emit("raw_worker_token_on_tenant_route", status=201, error_body_ok=False)


# --- raw_calls ---------------------------------------------------------------------------------------


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def check(self, condition: bool, message: str) -> bool:
        if not condition:
            self.failures.append(message)
        return condition

    async def expect_error(self, status: int, what: str, call: Any) -> None:
        try:
            await call
        except ApiError as err:
            self.check(err.status == status, f"{what}: status {err.status}, expected {status}")
            self.check(body_ok(err), f"{what}: error body not exposed ({err.raw!r})")
        else:
            self.failures.append(f"{what}: succeeded, expected HTTP {status}")


async def raw_calls(client: Client, queue: str, c: Checks) -> None:
    # 1. whoami
    me = await client.whoami()
    c.check(me.tenant == "conformance" and me.access == "read_write", f"whoami: {me}")

    # 2. create with an idempotency key, twice
    config = JobConfigRequest(queue=queue, priority=5)
    first = await client.create_job("conf.raw", {"a": 1}, config=config, idempotency_key="raw-1")
    again = await client.create_job("conf.raw", {"a": 1}, config=config, idempotency_key="raw-1")
    c.check(first.job_id == again.job_id, f"idempotency: {first.job_id} != {again.job_id}")

    # 3. get
    job = await client.get_job(first.job_id)
    c.check(job.task_name == "conf.raw", f"get: task_name {job.task_name}")
    c.check(job.payload == {"a": 1}, f"get: payload {job.payload}")
    c.check(job.queue_name == queue, f"get: queue_name {job.queue_name}")
    c.check(job.status == "pending", f"get: status {job.status}")
    c.check(job.config.get("priority") == 5, f"get: config {job.config}")

    # 4. batch
    batch = await client.create_jobs(
        [
            CreateJobRequest(task_name="conf.raw", payload={"i": i}, config=JobConfigRequest(queue=queue))
            for i in range(3)
        ]
    )
    c.check(batch.count == 3 and len(batch.job_ids) == 3, f"batch: {batch}")

    # 5. list with a cursor
    page = await client.list_jobs(queue=queue, limit=2, include_total=True)
    c.check(
        len(page.jobs) == 2 and page.has_more and page.total == 4 and page.next_cursor is not None,
        f"list: {len(page.jobs)} jobs, has_more {page.has_more}, total {page.total}, cursor {page.next_cursor}",
    )
    if page.next_cursor:
        rest = await client.list_jobs(queue=queue, limit=2, cursor=page.next_cursor)
        seen = {j.id for j in page.jobs} | {j.id for j in rest.jobs}
        c.check(
            len(rest.jobs) == 2 and seen == {first.job_id, *batch.job_ids}, f"list page 2: {[j.id for j in rest.jobs]}"
        )

    # 6. cancel, twice
    await client.cancel_job(first.job_id)
    await c.expect_error(409, "cancel again", client.cancel_job(first.job_id))

    # 7. cancel by filter
    cancelled = await client.cancel_jobs(queue=queue)
    c.check(cancelled.cancelled == 3, f"cancel_jobs: {cancelled.cancelled}")

    # 8. unknown job
    await c.expect_error(404, "get unknown job", client.get_job(str(uuid.uuid4())))

    # 9. workflow
    steps = [
        WorkflowStep(name="a", task_name="conf.raw", queue=queue),
        WorkflowStep(name="b", task_name="conf.raw", depends_on=["a"], queue=queue),
    ]
    wf = await client.create_workflow("conf-wf", steps)
    got = await client.get_workflow(wf.workflow_id)
    c.check(got.status in ("created", "running"), f"workflow status {got.status}")
    states = await client.workflow_steps(wf.workflow_id)
    c.check([s.name for s in states.steps] == ["a", "b"], f"workflow steps {[s.name for s in states.steps]}")
    diagram = await client.workflow_diagram(wf.workflow_id)
    c.check(diagram.format == "mermaid" and "a --> b" in diagram.diagram, f"diagram {diagram}")
    await client.cancel_workflow(wf.workflow_id)
    await client.retry_workflow(wf.workflow_id)
    await client.cancel_workflow(wf.workflow_id)
    workflows = await client.list_workflows(limit=10)
    c.check(any(w.id == wf.workflow_id for w in workflows.workflows), "list_workflows: workflow missing")

    # 10. a cycle
    cycle = [
        WorkflowStep(name="a", task_name="conf.raw", depends_on=["b"], queue=queue),
        WorkflowStep(name="b", task_name="conf.raw", depends_on=["a"], queue=queue),
    ]
    await c.expect_error(400, "workflow with a cycle", client.create_workflow("conf-cycle", cycle))

    # 11. cron
    cron = await client.create_cron(name="conf-cron", cron_expr="*/5 * * * *", task_name="conf.raw", queue=queue)
    schedule = await client.get_cron(cron.cron_id)
    c.check(schedule.name == "conf-cron" and schedule.enabled, f"get_cron {schedule}")
    c.check(schedule.timezone is None and schedule.next_run_local is None, f"get_cron: a zone on {schedule}")
    zoned = await client.create_cron(
        name="conf-cron-tz", cron_expr="0 9 * * *", task_name="conf.raw", queue=queue, timezone="Europe/Berlin"
    )
    berlin = await client.get_cron(zoned.cron_id)
    local = berlin.next_run_local
    c.check(berlin.timezone == "Europe/Berlin", f"get_cron (zoned): timezone {berlin.timezone!r}")
    c.check(
        local is not None
        and (local.hour, local.minute, local.second) == (9, 0, 0)
        and local.utcoffset() in (timedelta(hours=1), timedelta(hours=2))
        and local == berlin.next_run_at,
        f"get_cron (zoned): next_run_local {local!r}, next_run_at {berlin.next_run_at!r}",
    )
    crons = await client.list_crons(limit=100)
    c.check(any(s.id == cron.cron_id for s in crons.crons), "list_crons: schedule missing")
    c.check(
        any(s.id == zoned.cron_id and s.timezone == "Europe/Berlin" and s.next_run_local == local for s in crons.crons),
        "list_crons: the zoned schedule is missing or has no local next run",
    )
    await client.delete_cron(zoned.cron_id)
    await client.pause_cron(cron.cron_id)
    c.check((await client.get_cron(cron.cron_id)).enabled is False, "pause_cron: still enabled")
    await client.resume_cron(cron.cron_id)
    c.check((await client.get_cron(cron.cron_id)).enabled is True, "resume_cron: not enabled")
    await client.delete_cron(cron.cron_id)
    await c.expect_error(404, "get deleted cron", client.get_cron(cron.cron_id))

    # 12. dlq, stats, queues, tasks
    dlq = await client.list_dead_letters(limit=5)
    c.check(isinstance(dlq.dead_letters, list), "dlq: not a list")
    stats = await client.stats()
    c.check(all(getattr(stats, f) >= 0 for f in stats.__struct_fields__), f"stats {stats}")
    queues = await client.list_queues()
    c.check(any(q.queue == queue for q in queues.queues), f"queues: {queue} not listed")
    paused = await client.pause_queue(queue)
    c.check(paused.paused is True and paused.queue == queue, f"pause_queue {paused}")
    resumed = await client.resume_queue(queue)
    c.check(resumed.paused is False, f"resume_queue {resumed}")
    tasks = await client.tasks()
    c.check(isinstance(tasks.tasks, list), "tasks: not a list")


async def run_raw_calls(env: dict[str, str]) -> None:
    checks = Checks()
    async with Client(env["base"], env["tenant"], worker_token=env["worker"]) as client:
        try:
            await raw_calls(client, env["queue"], checks)
        except Exception as err:  # an unexpected error ends the checks: report it as a failure
            checks.failures.append(f"unexpected {type(err).__name__}: {err}")
    emit("raw_calls_done", ok=not checks.failures, failures=checks.failures)


# --- raw_unique --------------------------------------------------------------------------------------


async def run_unique(spec: dict[str, Any], env: dict[str, str]) -> None:
    """Two creates with one unique key (the typed config, on_conflict left to the server's default)
    and different payloads, then the job read back."""
    policy = UniquePolicy(key=spec["unique_key"], window_secs=int(spec["window_secs"]))
    config = JobConfigRequest(queue=env["queue"], unique=policy)
    async with Client(env["base"], env["tenant"], worker_token=env["worker"]) as client:
        first = await client.create_job("conf.unique", {"n": 1}, config=config)
        second = await client.create_job("conf.unique", {"n": 2}, config=config)
        job = await client.get_job(first.job_id)
    held = job.unique
    emit(
        "unique_done",
        same=first.job_id == second.job_id,
        unique=None if held is None else to_builtins(held),
        payload=job.payload,
    )


# --- raw_durable_time --------------------------------------------------------------------------------

TERMINAL_WORKFLOW = ("completed", "failed", "partially_failed", "cancelled")


async def run_durable_time(spec: dict[str, Any], env: dict[str, str]) -> None:
    """A wait-for-event step (its key a context placeholder) and a sleep after it: see the step
    waiting, send its event, follow the workflow to its end, then read the event back."""
    steps = [
        wait_for_event_step("approve", spec["key_template"], timeout_secs=int(spec["timeout_secs"])),
        sleep_step("nap", int(spec["sleep_secs"]), depends_on=["approve"]),
    ]
    async with Client(env["base"], env["tenant"], worker_token=env["worker"]) as client:
        wf = await client.create_workflow("conf-durable", steps, context=spec["context"])
        waiting = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while loop.time() < deadline:
            states = await client.workflow_steps(wf.workflow_id)
            approve = next(s for s in states.steps if s.name == "approve")
            if approve.status == "running" and approve.event_key is not None:
                waiting = approve
                break
            await asyncio.sleep(0.1)
        sent = await client.send_event(spec["event_key"], spec["payload"])
        got = await client.get_workflow(wf.workflow_id)
        deadline = loop.time() + 20
        while got.status not in TERMINAL_WORKFLOW and loop.time() < deadline:
            await asyncio.sleep(0.2)
            got = await client.get_workflow(wf.workflow_id)
        listed = await client.list_events(key=spec["event_key"], limit=10)
    mine = next((e for e in listed.events if e.event_id == sent.event_id), None)
    nap = got.context.get("nap")
    emit(
        "durable_done",
        waiting_key=None if waiting is None else waiting.event_key,
        wake_at_set=waiting is not None and waiting.wake_at is not None,
        delivered=sent.delivered,
        status=got.status,
        approval=got.context.get("approve"),
        slept=isinstance(nap, dict) and isinstance(nap.get("slept_until"), str),
        listed=None if mine is None else {"key": mine.key, "delivered": mine.delivered, "payload": mine.payload},
    )


# --- raw_cron_workflow -------------------------------------------------------------------------------


def schedule_summary(schedule: Any, queue: str) -> dict[str, Any] | None:
    """A workflow schedule as this SDK decoded it, in the contract's summary shape."""
    if schedule is None:
        return None
    wf = schedule.workflow
    return {
        "task_name": schedule.task_name,
        "name": None if wf is None else wf.name,
        "context": None if wf is None else wf.context,
        "steps": None
        if wf is None
        else [
            {
                "name": step.name,
                "task_name": step.task_name,
                "depends_on": step.depends_on,
                "payload": step.payload,
                "sleep_secs": step.sleep_secs,
                "on_failure": step.on_failure,
                "our_queue": step.queue == queue,
            }
            for step in wf.steps
        ],
    }


async def run_cron_workflow(spec: dict[str, Any], env: dict[str, str]) -> None:
    """A schedule that starts a workflow beside a task schedule: get, list, see it fire, delete."""
    queue = env["queue"]
    definition = CreateWorkflowRequest(
        name=spec["name"],
        context=spec["context"],
        steps=[
            WorkflowStep(name="extract", task_name="conf.cron", payload=spec["payload"], queue=queue),
            sleep_step("nap", int(spec["sleep_secs"]), depends_on=["extract"]),
        ],
    )
    async with Client(env["base"], env["tenant"], worker_token=env["worker"]) as client:
        created = await client.create_cron(name=spec["name"], cron_expr=spec["cron_expr"], workflow=definition)
        task = await client.create_cron(
            name="conf-cron-task", cron_expr="0 0 1 1 *", task_name="conf.cron", queue=queue
        )
        got = await client.get_cron(created.cron_id)
        listed = await client.list_crons(limit=100)
        fired = None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while fired is None and loop.time() < deadline:
            workflows = await client.list_workflows(limit=100)
            fired = next((w for w in workflows.workflows if w.name.startswith(spec["name"] + "@")), None)
            if fired is None:
                await asyncio.sleep(0.2)
        await client.delete_cron(created.cron_id)
        await client.delete_cron(task.cron_id)
        gone_status = None
        try:
            await client.get_cron(created.cron_id)
        except ApiError as err:
            gone_status = err.status
    mine = next((c for c in listed.crons if c.id == created.cron_id), None)
    plain = next((c for c in listed.crons if c.id == task.cron_id), None)
    emit(
        "cron_workflow_done",
        got=schedule_summary(got, queue),
        listed=schedule_summary(mine, queue),
        plain=None if plain is None else {"task_name": plain.task_name, "has_workflow": plain.workflow is not None},
        fired_context=None if fired is None else fired.context,
        gone_status=gone_status,
    )


# --- main --------------------------------------------------------------------------------------------


async def main(scenario: dict[str, Any]) -> None:
    env = {
        "base": os.environ["QF_BASE_URL"],
        "tenant": os.environ["QF_TENANT_TOKEN"],
        "worker": os.environ["QF_WORKER_TOKEN"],
        "queue": os.environ["QF_QUEUE"],
    }
    spec = scenario["worker"]
    mode = spec["mode"]
    if mode == "loop":
        await run_loop(spec, env)
    elif mode == "raw_stale_lease":
        await run_stale_lease(spec, env)
    elif mode == "auth_errors":
        await run_auth_errors(env)
    elif mode == "raw_calls":
        await run_raw_calls(env)
    elif mode == "raw_unique":
        await run_unique(spec, env)
    elif mode == "raw_durable_time":
        await run_durable_time(spec, env)
    elif mode == "raw_cron_workflow":
        await run_cron_workflow(spec, env)
    else:
        raise SystemExit(f"unknown worker mode {mode!r}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: runner.py <scenario.json>")
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text())))
