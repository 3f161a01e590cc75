"""Workflow repository: creation, reads, cancellation, retry and time-outs for the API and the
janitor, and the advancer's persistence: taking outbox rows, loading a locked workflow with its
steps, and writing each step and workflow change back.

Advancing itself (which step runs next, how a workflow ends) is decided by the domain rules
(shared/domain/workflows.py), applied by shared/runtime/advance.py; everything
here only reads and writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta

import asyncpg
import msgspec
import structlog

from shared import metrics
from shared.db import audit
from shared.db.listing import fetch_page
from shared.db.pool import Connection, Executor, Pool, record
from shared.db.queries import Q
from shared.domain.errors import Conflict, NotFound
from shared.domain.jobs import JobStatus, Object
from shared.domain.paging import ListQuery, Page
from shared.domain.traces import TraceContext
from shared.domain.workflows import (
    CANCELLED_BY_USER,
    FanOutProgress,
    OutboxEvent,
    OutboxKind,
    StepRun,
    StepStatus,
    Workflow,
    WorkflowDefinition,
    WorkflowLimits,
    WorkflowRun,
    WorkflowStatus,
    WorkflowStep,
    WorkflowStepState,
    check_running_quota,
    steps_to_rerun,
)

log = structlog.get_logger("queueflow.workflow")

# An outbox row whose application raised this many times is left aside and its workflow failed.
OUTBOX_ATTEMPTS = 5
# Failures that say nothing about the row: the connection or the server, or a transaction that
# lost a race. They do not count as an attempt.
_NOT_THE_ROWS_FAULT = (
    OSError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
)

_steps_type = list[WorkflowStep]


def to_workflow(r: asyncpg.Record) -> Workflow:
    return record(Workflow, r)


def to_step_state(r: asyncpg.Record) -> WorkflowStepState:
    fan = None
    if r["fan_total"] is not None:
        fan = FanOutProgress(total=r["fan_total"], completed=r["fan_completed"], failed=r["fan_failed"])
    return WorkflowStepState(
        name=r["name"],
        status=StepStatus(r["status"]),
        job_id=r["job_id"],
        error=r["error"],
        started_at=r["started_at"],
        completed_at=r["completed_at"],
        child_workflow_id=r["child_workflow_id"],
        fan_out=fan,
        # (only while it runs: a sleep that completed at once keeps its row's wake_at)
        wake_at=r["wake_at"] if r["status"] == StepStatus.RUNNING else None,
        event_key=r["event_key"] if r["status"] == StepStatus.RUNNING else None,
    )


def to_step_run(r: asyncpg.Record) -> StepRun:
    return record(StepRun, r)


# --- the API's operations ------------------------------------------------------------------------


async def insert_workflow(
    conn: Connection,
    tenant: str | None,
    definition: WorkflowDefinition,
    context: Object,
    parent: tuple[str, str] | None = None,
    depth: int = 0,
    trace: TraceContext | None = None,
) -> str:
    """Store a validated, normalised workflow and its steps with status `created`, with the trace
    context its steps' jobs inherit. The caller owns the transaction and decides who starts it."""
    wf_id = str(uuid.uuid4())
    await conn.execute(
        Q.insert_workflow,
        wf_id,
        definition.name,
        context,
        definition.metadata or {},
        tenant,
        definition.steps,
        definition.timeout_secs,
        parent[0] if parent else None,
        parent[1] if parent else None,
        depth,
        trace.traceparent if trace else None,
        trace.tracestate if trace else None,
    )
    await conn.executemany(
        Q.insert_step,
        [(wf_id, s.name, i, s, s.dependencies, s.policy) for i, s in enumerate(definition.steps)],
    )
    metrics.WORKFLOWS_CREATED.inc()
    return wf_id


async def get_workflow(db: Executor, tenant: str, wf_id: str) -> Workflow:
    row = await db.fetchrow(Q.get_workflow, wf_id, tenant)
    if row is None:
        raise NotFound("workflow", wf_id)
    return to_workflow(row)


async def list_workflows(db: Executor, tenant: str, query: ListQuery) -> Page[Workflow]:
    return await fetch_page(
        db, "workflows", "text", tenant, query.page, to_workflow, {"status": query.status}
    )


async def step_states(db: Executor, wf_id: str) -> list[WorkflowStepState]:
    return [to_step_state(r) for r in await db.fetch(Q.workflow_steps, wf_id)]


async def cancel_workflow(pool: Pool, tenant: str, wf_id: str) -> None:
    """Cancel a live workflow, its unfinished steps, live jobs and sub-workflows."""
    async with audit.change(pool, atomic=True) as conn:
        row = await conn.fetchrow(Q.lock_tenant_workflow, wf_id, tenant)
        if row is None:
            raise NotFound("workflow", wf_id)
        if WorkflowStatus(row["status"]).terminal:
            raise Conflict(f"workflow is already {row['status']}")
        await cancel_below(conn, wf_id, CANCELLED_BY_USER)
        await finish_workflow(conn, _head(row), WorkflowStatus.CANCELLED, CANCELLED_BY_USER)


async def running_workflows(conn: Connection, tenant: str, up_to: int) -> int:
    """How many of the tenant's top-level workflows are unfinished, counted up to `up_to`, under
    the tenant's quota lock (held to the end of the caller's transaction)."""
    await conn.execute(Q.lock_tenant_workflow_quota, tenant)
    return int(await conn.fetchval(Q.count_running_workflows, tenant, up_to))


async def retry_workflow(pool: Pool, tenant: str, wf_id: str, limits: WorkflowLimits) -> None:
    """Re-run what did not complete (the domain's `steps_to_rerun`); completed upstream steps keep
    their results. A top-level workflow's retry counts against the running-workflows quota."""
    async with audit.change(pool, atomic=True) as conn:
        row = await conn.fetchrow(Q.lock_tenant_workflow, wf_id, tenant)
        if row is None:
            raise NotFound("workflow", wf_id)
        if not WorkflowStatus(row["status"]).retryable:
            raise Conflict(
                f"workflow is {row['status']}; only a failed, partially_failed or cancelled workflow can be retried"
            )
        if limits.max_running and row["parent_workflow_id"] is None:
            check_running_quota(await running_workflows(conn, tenant, limits.max_running), limits)
        names = steps_to_rerun(to_step_run(r) for r in await conn.fetch(Q.workflow_steps, wf_id))
        await conn.execute(Q.reset_steps_for_retry, wf_id, names)
        await conn.execute(Q.restart_workflow, wf_id, names)
        await conn.execute(Q.insert_outbox, wf_id, OutboxKind.RETRY, None, None, None)


# --- the janitor's -------------------------------------------------------------------------------


async def time_out_expired(pool: Pool, batch: int) -> int:
    """A live workflow past its deadline has its unfinished steps cancelled and ends failed with
    `workflow timed out after <secs>s`."""
    count = 0
    async with pool.acquire() as conn, conn.transaction():
        for r in await conn.fetch(Q.expired_workflows, batch):
            count += await fail_workflow(conn, r["id"], f"workflow timed out after {r['timeout_secs']}s")
    return count


HealCursor = tuple[datetime, str] | None  # where the last pass of the stalled-workflow sweep ended


async def heal_stalled(
    pool: Pool, older_than_secs: float, scan: int, after: HealCursor
) -> tuple[int, HealCursor]:
    """Queue a re-evaluation (a `heal` outbox row) for live workflows that nothing could move
    forward any more: no outbox row, no live job, no live child, no sleep or wait armed. One pass
    looks at the next `scan` live workflows after `after` (None: from the first); returns how many
    it healed and where the next pass starts (None again once it has looked at the last)."""
    at, wf_id = after if after is not None else (None, None)
    async with pool.acquire() as conn, conn.transaction():
        # The planner prices the pass's per-row probes as if each read the jobs table (a cost far
        # above jit_above_cost), and JIT compiling it took a third of a second of a core on every
        # pass beside a million sleeping workflows, for a statement that runs in milliseconds.
        await conn.execute(Q.no_jit)
        row = await conn.fetchrow(Q.stalled_workflows, older_than_secs, scan, OUTBOX_ATTEMPTS, at, wf_id)
    assert row is not None
    ended = row["scanned"] < scan
    return row["healed"], None if ended else (row["last_at"], row["last_id"])


# --- the advancer's ------------------------------------------------------------------------------

Apply = Callable[[Connection, OutboxEvent], Awaitable[None]]
# A batch: its events in outbox order, and the live workflows among theirs, locked and loaded.
ApplyMany = Callable[[Connection, Sequence[OutboxEvent], Mapping[str, WorkflowRun]], Awaitable[None]]


async def consume_outbox(pool: Pool, apply: Apply, row_id: int | None = None) -> bool:
    """Take one outbox row (SKIP LOCKED; `row_id`: that one) and `apply` it in the same
    transaction that deletes it; False when there was none. A row whose application raises is
    counted as a failed attempt; at the last attempt its workflow fails, naming the error, instead
    of staying live with nothing left to move it. Connection and concurrency failures are not the
    row's fault: they propagate and the row is taken again."""
    event: OutboxEvent | None = None
    async with pool.acquire() as conn:
        try:
            async with conn.transaction():
                row = await conn.fetchrow(Q.take_outbox, OUTBOX_ATTEMPTS, row_id)
                if row is None:
                    return False
                event = msgspec.convert(dict(row), OutboxEvent, strict=False)
                await apply(conn, event)
                await conn.execute(Q.delete_outbox, event.id)
        except _NOT_THE_ROWS_FAULT:
            raise
        except Exception as err:
            if event is None:
                raise
            await _failed_attempt(conn, event, err)
    return True


async def consume_outbox_batch(pool: Pool, apply_one: Apply, apply_many: ApplyMany, limit: int) -> int:
    """Take up to `limit` outbox rows (SKIP LOCKED), lock and load their workflows with two
    statements, `apply_many` them and delete them, all in one transaction: one commit and a few
    round trips for the batch instead of eight per row. Returns how many rows were taken (0: none).

    When applying raises, the batch rolls back and its rows are taken again one at a time
    (`consume_outbox` with `apply_one`), so a row that keeps failing is counted and set aside
    alone while the rest go through. Connection and concurrency failures propagate, as there."""
    taken: list[int] = []
    try:
        async with pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(Q.take_outbox_batch, OUTBOX_ATTEMPTS, limit)
            events = [msgspec.convert(dict(r), OutboxEvent, strict=False) for r in rows]
            taken = [e.id for e in events]
            if not events:
                return 0
            runs = await load_runs(conn, sorted({e.workflow_id for e in events}))
            await apply_many(conn, events, runs)
            await conn.execute(Q.delete_outbox_rows, taken)
    except _NOT_THE_ROWS_FAULT:
        raise
    except Exception as err:
        if not taken:
            raise
        log.warning("advance_batch_failed", rows=len(taken), error=f"{type(err).__name__}: {err}"[:500])
        for row_id in taken:
            await consume_outbox(pool, apply_one, row_id)
    return len(taken)


async def _failed_attempt(conn: Connection, event: OutboxEvent, err: Exception) -> None:
    error = f"{type(err).__name__}: {err}"[:500]
    log.error(
        "advance_event_failed", outbox_id=event.id, workflow_id=event.workflow_id, error=error, exc_info=err
    )
    attempts = await conn.fetchval(Q.outbox_failed, event.id, error, event.attempts)
    if attempts is not None and attempts >= OUTBOX_ATTEMPTS:
        async with conn.transaction():
            failed = await fail_workflow(conn, event.workflow_id, f"workflow advancement failed: {error}")
        log.error(
            "workflow_advancement_abandoned",
            workflow_id=event.workflow_id,
            outbox_id=event.id,
            workflow_failed=failed,
        )


async def load_run(conn: Connection, wf_id: str) -> WorkflowRun | None:
    """Lock a live workflow and read it with its steps; None when it is unknown or finished."""
    row = await conn.fetchrow(Q.lock_workflow, wf_id)
    if row is None or WorkflowStatus(row["status"]).terminal:
        return None
    run = _head(row)
    run.steps = {s.name: s for s in map(to_step_run, await conn.fetch(Q.workflow_steps, wf_id))}
    return run


async def load_runs(conn: Connection, wf_ids: Sequence[str]) -> dict[str, WorkflowRun]:
    """`load_run` for several workflows with two statements (locked in id order); the map holds
    the live ones."""
    runs = {
        row["id"]: _head(row)
        for row in await conn.fetch(Q.lock_workflows, list(wf_ids))
        if not WorkflowStatus(row["status"]).terminal
    }
    await _load_steps(conn, runs)
    return runs


async def _load_steps(conn: Connection, runs: Mapping[str, WorkflowRun]) -> None:
    """The step rows of `runs`' workflows, into their `steps` (one statement)."""
    if runs:
        for r in await conn.fetch(Q.workflows_steps, list(runs)):
            step = to_step_run(r)
            runs[r["workflow_id"]].steps[step.name] = step


def _head(row: asyncpg.Record) -> WorkflowRun:
    # A `SELECT *` row's `steps` column holds the definitions; the run's `steps` are the step rows.
    return record(WorkflowRun, row, without=("steps",))


async def child_status(conn: Connection, child_id: str) -> tuple[WorkflowStatus, Object] | None:
    """A sub-workflow's status and context (locked), or None when it is gone."""
    row = await conn.fetchrow(Q.lock_workflow, child_id)
    return None if row is None else (WorkflowStatus(row["status"]), row["context"])


async def set_running(conn: Connection, wf_id: str) -> None:
    await conn.execute(Q.set_workflow_running, wf_id)


async def mark_scheduled(conn: Connection, wf_id: str, steps: Sequence[StepRun]) -> None:
    """Write back steps that were just scheduled (their attempt, job or child, fan-out size)."""
    await conn.executemany(
        Q.step_scheduled,
        [(wf_id, s.name, s.attempt, s.job_id, s.child_workflow_id, s.fan_total) for s in steps],
    )


async def record_fan_progress(conn: Connection, wf_id: str, step: StepRun) -> None:
    await conn.execute(Q.step_fan_progress, wf_id, step.name, step.fan_completed, step.fan_failed)


async def finish_step(conn: Connection, wf_id: str, step: StepRun, error: str | None) -> None:
    """Write a step's terminal status (other than completed) with its skip kind and error."""
    await conn.execute(Q.step_finished, wf_id, step.name, step.status, step.skip_kind, error)


async def complete_step(conn: Connection, wf_id: str, step_name: str, result: Object) -> Object:
    """Merge the result into the context and mark the step completed, in one statement (no reader
    ever sees the step completed without its result); returns the new context."""
    context: Object = await conn.fetchval(Q.complete_step, wf_id, step_name, result)
    return context


async def arm_step(
    conn: Connection,
    wf_id: str,
    step: StepRun,
    *,
    wake_at: datetime | None = None,
    wake_in_secs: int | None = None,
    event_key: str | None = None,
) -> tuple[datetime | None, datetime]:
    """Start a sleep or a wait (the step runs no job): its wake-up (an instant, or seconds from the
    database's now) and the key it waits for. Returns the wake-up as stored and the database's
    clock."""
    row = await conn.fetchrow(Q.arm_step, wf_id, step.name, step.attempt, wake_at, event_key, wake_in_secs)
    assert row is not None
    return row["wake_at"], row["now"]


async def apply_due_wake_ups(pool: Pool, apply_many: ApplyMany, limit: int) -> int:
    """Take up to `limit` due wake-ups with their workflows (`take_due_wake_ups`: locked, not
    written, the workflows' heads read with them) and `apply_many` them as `timer` events in the same
    transaction: no outbox row written, taken and deleted for each, and each step row written once,
    by its own completion or failure. A wake-up that applying let pass (its step still running) is
    then cleared (`clear_taken_wake_ups`), so it is not taken again. Returns how many were taken.
    When applying raises, the transaction rolls back and the error propagates; the wake-ups are
    still due, for `fire_due_timers` (the outbox, with its counted attempts) to take."""
    async with pool.acquire() as conn, conn.transaction():
        rows = await conn.fetch(Q.take_due_wake_ups, limit)
        if not rows:
            return 0
        events = [
            OutboxEvent(
                id=0,  # never stored
                workflow_id=r["workflow_id"],
                kind=OutboxKind.TIMER,
                step_name=r["name"],
                step_attempt=r["attempt"],
                result={"wake_at": r["wake_at"]},
            )
            for r in rows
        ]
        heads = {r["workflow_id"]: r for r in rows if not WorkflowStatus(r["w_status"]).terminal}
        runs = {wf_id: _taken_head(r) for wf_id, r in heads.items()}
        await _load_steps(conn, runs)
        await apply_many(conn, events, runs)
        passed = [r for r in rows if _still_running(runs, r["workflow_id"], r["name"])]
        if passed:
            await conn.execute(
                Q.clear_taken_wake_ups,
                [r["workflow_id"] for r in passed],
                [r["name"] for r in passed],
                [r["wake_at"] for r in passed],
            )
    return len(rows)


def _taken_head(row: asyncpg.Record) -> WorkflowRun:
    return WorkflowRun(
        id=row["workflow_id"],
        tenant_id=row["tenant_id"],
        status=WorkflowStatus(row["w_status"]),
        context=row["context"],
        halted=row["halted"],
        depth=row["depth"],
        parent_workflow_id=row["parent_workflow_id"],
        parent_step_name=row["parent_step_name"],
        name=row["w_name"],
        traceparent=row["traceparent"],
        tracestate=row["tracestate"],
    )


def _still_running(runs: Mapping[str, WorkflowRun], wf_id: str, step_name: str) -> bool:
    """Whether a taken wake-up's step may still be running after applying: its workflow was not
    loaded (ended), or the step is running in the state applying left (a workflow's later event in
    the batch reloads it, so this state can be older, never newer: a step it shows ended did end)."""
    run = runs.get(wf_id)
    step = None if run is None else run.steps.get(step_name)
    return step is None or step.status is StepStatus.RUNNING


async def fire_due_timers(pool: Pool, batch: int) -> int:
    """Turn due wake-ups into `timer` outbox rows (each exactly once, across processes)."""
    return len(await pool.fetch(Q.fire_due_timers, batch))


async def seconds_until_next_wake_up(db: Executor) -> float | None:
    """Seconds until the next sleeping or waiting step wakes (0 when one is due); None for none."""
    row = await db.fetchrow(Q.next_wake_up)
    if row is None or row["at"] is None:
        return None
    wait: timedelta = row["at"] - row["now"]
    return max(0.0, wait.total_seconds())


async def mark_halted(conn: Connection, wf_id: str, message: str) -> None:
    await conn.execute(Q.mark_halted, wf_id, message)


async def fan_out_children(
    conn: Connection, wf_id: str, step_name: str, attempt: int
) -> list[tuple[JobStatus, Object | None]]:
    """Each child job of a fan-out step's attempt, by index: its status and result."""
    rows = await conn.fetch(Q.fan_out_results, wf_id, step_name, attempt)
    return [(JobStatus(r["status"]), r["result"]) for r in rows]


async def job_outcome(
    conn: Connection, job_id: uuid.UUID
) -> tuple[JobStatus, Object | None, str | None] | None:
    row = await conn.fetchrow(Q.job_outcome, job_id)
    return None if row is None else (JobStatus(row["status"]), row["result"], row["error_message"])


async def cancel_below(conn: Connection, wf_id: str, reason: str) -> None:
    """Cancel this workflow's unfinished steps and live jobs, and every live sub-workflow below it.
    The workflow's own status is the caller's to set."""
    await conn.execute(Q.cancel_steps, wf_id, reason)
    await conn.execute(Q.cancel_workflow_jobs, wf_id)
    await conn.execute(Q.cancel_descendants, wf_id, reason)


async def finish_workflow(
    conn: Connection, run: WorkflowRun, status: WorkflowStatus, error: str | None
) -> bool:
    """Guarded terminal write; tells the parent (a `child` outbox row) when this is a sub-workflow.
    False when the workflow was already terminal."""
    if await conn.fetchval(Q.settle_workflow, run.id, status, error) is None:
        return False
    _count_settled(status)
    if run.parent_workflow_id is not None:
        await conn.execute(
            Q.insert_outbox, run.parent_workflow_id, OutboxKind.CHILD, run.parent_step_name, status, run.id
        )
    return True


def _count_settled(status: WorkflowStatus) -> None:
    if status is WorkflowStatus.COMPLETED:
        metrics.WORKFLOWS_COMPLETED.inc()
    elif status in (WorkflowStatus.FAILED, WorkflowStatus.PARTIALLY_FAILED):
        metrics.WORKFLOWS_FAILED.inc()


class PendingWrites:
    """The two writes that end most advancements (a step completed with its result merged into the
    context; a workflow settled), held back during an advancer batch and written for the whole
    batch by one statement (`flush`: each workflow's row once, with its context and settlement),
    instead of two round trips per workflow.

    The holder must flush before any other read or write of the transaction, so nothing ever reads
    past a pending write; held back, these two commute with each other across workflows (each
    touches only its own workflow's rows, locked by the batch), and within one workflow the
    completions are written before the settlement, as they were made."""

    def __init__(self) -> None:
        self._completed: dict[str, tuple[Object, list[str]]] = {}
        self._settled: dict[str, tuple[WorkflowStatus, str | None]] = {}

    def __bool__(self) -> bool:
        return bool(self._completed or self._settled)

    def complete_step(self, run: WorkflowRun, step_name: str, result: Object) -> Object:
        """`complete_step`, held back; returns the context as it will be (merged here exactly as
        jsonb `||` merges: the step's result under its name, replacing a previous one)."""
        assert run.id not in self._settled, "a settled workflow's steps do not change"
        patch, names = self._completed.setdefault(run.id, ({}, []))
        patch[step_name] = result
        names.append(step_name)
        return {**run.context, step_name: result}

    def finish_workflow(self, run: WorkflowRun, status: WorkflowStatus, error: str | None) -> None:
        """`finish_workflow`, held back (the holder has the workflow locked and live)."""
        self._settled[run.id] = (status, error)

    async def flush(self, conn: Connection) -> None:
        """Write what is held back: one statement for every workflow's row and steps, and one
        for the parents of the sub-workflows that settled."""
        completed, settled = self._completed, self._settled
        if not (completed or settled):
            return
        self._completed, self._settled = {}, {}
        doc: dict[str, dict[str, object]] = {}
        for w, (patch, names) in completed.items():
            doc[w] = {"w": w, "p": patch, "s": names}
        for w, (status, error) in settled.items():
            doc.setdefault(w, {"w": w}).update(st=status, e=error)
        parents: list[tuple[str, str | None, str, str]] = []
        for row in await conn.fetch(Q.write_back, list(doc.values())):
            if not row["settles"]:
                continue
            _count_settled(WorkflowStatus(row["status"]))
            if row["parent_workflow_id"] is not None:
                parents.append((row["parent_workflow_id"], row["parent_step_name"], row["status"], row["id"]))
        if parents:
            await conn.execute(Q.insert_child_outbox, *map(list, zip(*parents, strict=True)))


async def fail_workflow(conn: Connection, wf_id: str, reason: str) -> bool:
    """End a live workflow failed with `reason`, its unfinished steps and sub-workflows cancelled.
    Reads none of its JSON, so it works on a workflow whose context cannot be processed."""
    row = await conn.fetchrow(Q.lock_workflow_head, wf_id)
    if row is None or WorkflowStatus(row["status"]).terminal:
        return False
    await cancel_below(conn, wf_id, reason)
    return await finish_workflow(conn, _head(row), WorkflowStatus.FAILED, reason)
