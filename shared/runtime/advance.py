"""Advancing one workflow, inside a transaction, under the workflow's row lock: the workflow
service's advancer applies every outbox event with it, and the API uses it to create a workflow and
schedule its root steps before it answers.

An outbox event says what happened (the workflow was created or retried, a step's job or child
workflow finished, the janitor asks for a re-check); `advance` records it on the step (merging a
result into the context before the step counts as completed), then schedules every step that
became ready exactly once, and settles the workflow when every step has ended. The rules (which
step may run, what a failure policy does, how a workflow ends) are the domain's
(shared/domain/workflows.py); this module applies them and writes through the db layer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import msgspec
import structlog

from shared.db import audit
from shared.db import events as events_db
from shared.db import jobs as jobs_db
from shared.db import queues as queues_db
from shared.db import workflows as workflows_db
from shared.db.pool import Connection, Pool
from shared.db.workflows import PendingWrites
from shared.domain.jobs import JobStatus, NewJob, Object, resolve_partial, utc_text
from shared.domain.traces import TraceContext
from shared.domain.workflows import (
    CONDITION_NOT_MET,
    EVENT_TIMEOUT,
    HALTED,
    FailurePolicy,
    OutboxEvent,
    OutboxKind,
    SkipKind,
    StepRun,
    StepStatus,
    WorkflowDefinition,
    WorkflowLimits,
    WorkflowRun,
    WorkflowStatus,
    blocker,
    check_budget,
    check_running_quota,
    fan_out_limit,
    holds,
    later_queues,
    lookup,
    normalise,
    ready,
    resolve_event_key,
    settlement,
    validate,
)
from shared.tracing import Tracer

log = structlog.get_logger("queueflow.workflow")

# Jobs are inserted in statements of at most this many jobs and about this many payload bytes, so
# that only one statement's rows are ever encoded at once (a fan-out of 10,000 children, or many
# steps that each carry a large `_context`, would otherwise be encoded whole).
INSERT_CHUNK_JOBS = 1_000
INSERT_CHUNK_BYTES = 8 * 1024 * 1024


class Advancement:
    """One workflow's state while its row lock is held."""

    def __init__(
        self,
        conn: Connection,
        run: WorkflowRun,
        default_queue: str,
        limits: WorkflowLimits,
        pending: PendingWrites | None = None,
    ) -> None:
        self._conn = conn
        self.run = run
        self.steps = run.steps
        self.default_queue = default_queue
        self.limits = limits
        self.pending = pending  # an advancer batch's held-back writes (None: every write at once)

    @classmethod
    async def load(
        cls,
        conn: Connection,
        wf_id: str,
        default_queue: str,
        limits: WorkflowLimits,
        pending: PendingWrites | None = None,
    ) -> Advancement | None:
        if pending:
            await pending.flush(conn)
        run = await workflows_db.load_run(conn, wf_id)
        return None if run is None else cls(conn, run, default_queue, limits, pending)

    async def _db(self) -> Connection:
        """The connection, for any read or write but the two that may be held back: those are
        written first, so nothing reads past them."""
        if self.pending:
            await self.pending.flush(self._conn)
        return self._conn

    # -- events ---------------------------------------------------------------------------------

    async def start(self) -> None:
        await workflows_db.set_running(await self._db(), self.run.id)
        self.run.status = WorkflowStatus.RUNNING

    async def job_finished(
        self,
        step_name: str | None,
        attempt: int | None,
        job_id: object,
        outcome: str | None,
        result: Object | None,
        error: str | None,
    ) -> None:
        step = self.steps.get(step_name or "")
        if step is None or step.status is not StepStatus.RUNNING or step.attempt != attempt:
            return  # stale: the step was cancelled, retried or already settled
        if step.fan_total is not None:
            if outcome == JobStatus.COMPLETED:
                step.fan_completed += 1
            else:
                step.fan_failed += 1
            await workflows_db.record_fan_progress(await self._db(), self.run.id, step)
            if step.fan_completed + step.fan_failed == step.fan_total:
                await self._finish_fan_out(step)
            return
        if job_id != step.job_id:
            return
        if outcome == JobStatus.COMPLETED:
            await self._complete(step, result or {})
        else:
            reason = error if outcome == JobStatus.FAILED else None
            await self._fail(step, reason or f"step job {outcome}")

    async def child_finished(self, step_name: str | None, child_id: str | None, outcome: str | None) -> None:
        step = self.steps.get(step_name or "")
        if (
            step is None
            or step.status is not StepStatus.RUNNING
            or child_id is None
            or step.child_workflow_id != child_id
        ):
            return
        if outcome == WorkflowStatus.COMPLETED:
            child = await workflows_db.child_status(await self._db(), child_id)
            context = child[1] if child else {}
            await self._complete(step, {k: v for k, v in context.items() if k != "_parent"})
        else:
            await self._fail(step, f"sub-workflow {child_id} ended {outcome}")

    async def woke(self, step_name: str | None, attempt: int | None, result: Object | None) -> None:
        """A sleeping step's end, or a waiting step's time-out, came (a `timer` row)."""
        step = self.steps.get(step_name or "")
        if step is None or step.status is not StepStatus.RUNNING or step.attempt != attempt:
            return  # stale: it ended (an event came first, a cancel) or was retried
        if step.definition.sleeps:
            await self._complete(step, {"slept_until": _instant((result or {}).get("wake_at"))})
        elif step.definition.wait_for_event is not None:
            await self._fail(step, EVENT_TIMEOUT)

    async def event_arrived(self, step_name: str | None, attempt: int | None, payload: Object | None) -> None:
        """An event came for a waiting step (an `event` row): the payload is its result."""
        step = self.steps.get(step_name or "")
        if step is None or step.status is not StepStatus.RUNNING or step.attempt != attempt:
            return
        if step.definition.wait_for_event is not None:
            await self._complete(step, payload or {})

    async def reconcile(self) -> None:
        """Heal: re-derive running steps from their jobs and children, for an outcome whose outbox
        row never arrived (rows are written by the outcome's own transaction, so this is a safety
        net, not a path the engine relies on)."""
        for step in list(self.steps.values()):
            if step.status is not StepStatus.RUNNING:
                continue
            if step.child_workflow_id is not None:
                child = await workflows_db.child_status(await self._db(), step.child_workflow_id)
                if child is not None and child[0].terminal:
                    await self.child_finished(step.name, step.child_workflow_id, child[0])
            elif step.fan_total is not None:
                children = await workflows_db.fan_out_children(
                    await self._db(), self.run.id, step.name, step.attempt
                )
                step.fan_completed = sum(status is JobStatus.COMPLETED for status, _ in children)
                step.fan_failed = sum(
                    status in (JobStatus.FAILED, JobStatus.CANCELLED) for status, _ in children
                )
                await workflows_db.record_fan_progress(await self._db(), self.run.id, step)
                if step.fan_completed + step.fan_failed == step.fan_total:
                    await self._finish_fan_out(step)
            elif step.job_id is not None:
                outcome = await workflows_db.job_outcome(await self._db(), step.job_id)
                if outcome is not None and outcome[0].terminal:
                    status, result, error = outcome
                    await self.job_finished(step.name, step.attempt, step.job_id, status, result, error)

    def _halted(self) -> bool:
        """Whether a `halt` policy stopped the workflow (a call: any await may have changed it)."""
        return self.run.halted

    # -- scheduling -----------------------------------------------------------------------------

    async def evaluate(self) -> None:
        """Schedule or skip every step whose dependencies have all ended, to a fixpoint; then
        settle the workflow if nothing is left to run."""
        progressed = True
        while progressed and not self._halted():
            progressed = False
            tasks: list[StepRun] = []  # plain task steps ready in this pass: scheduled together
            for step in self.steps.values():
                if not ready(step, self.steps):
                    continue
                progressed = True
                stop = blocker(step, self.steps)
                if stop is not None:
                    await self._finish(
                        step,
                        StepStatus.SKIPPED,
                        f"dependency '{stop.name}' did not complete",
                        SkipKind.POLICY,
                    )
                elif step.definition.when is not None and not holds(step.definition.when, self.run.context):
                    await self._finish(step, StepStatus.SKIPPED, CONDITION_NOT_MET, SkipKind.CONDITION)
                elif step.definition.workflow is not None:
                    await self._spawn_child(step, step.attempt + 1)
                elif step.definition.fan_out is not None:
                    await self._fan_out(step, step.attempt + 1)
                elif step.definition.sleeps:
                    await self._sleep(step, step.attempt + 1)
                elif step.definition.wait_for_event is not None:
                    await self._wait(step, step.attempt + 1)
                else:
                    step.status = StepStatus.RUNNING  # its job is inserted with the rest of this pass
                    tasks.append(step)
                if self._halted():
                    break
            if tasks:
                await self._schedule_tasks(tasks)
        if all(s.status.terminal for s in self.steps.values()):
            await self._settle()

    async def _schedule_tasks(self, steps: list[StepRun]) -> None:
        """One job per step, inserted by as few statements as their size allows (usually one), and
        the steps marked in one round trip."""
        context = _size(self.run.context) if self.run.context else 0
        ids = await self._insert(
            (self._job(s, s.attempt + 1), context + _size(s.definition.payload)) for s in steps
        )
        for step, job_id in zip(steps, ids, strict=True):
            step.scheduled(step.attempt + 1, job_id=job_id)
        await workflows_db.mark_scheduled(await self._db(), self.run.id, steps)

    async def _insert(self, jobs: Iterable[tuple[NewJob, int]]) -> list[uuid.UUID]:
        """Insert `jobs` (each with its payload's size in bytes, about) in chunks of at most
        INSERT_CHUNK_JOBS jobs and INSERT_CHUNK_BYTES bytes; their ids in order. `jobs` may be
        lazy: a chunk's jobs are made only when it is about to be written."""
        ids: list[uuid.UUID] = []
        chunk: list[NewJob] = []
        size = 0
        for job, nbytes in jobs:
            if chunk and (len(chunk) >= INSERT_CHUNK_JOBS or size + nbytes > INSERT_CHUNK_BYTES):
                ids += await jobs_db.insert_jobs(await self._db(), self.run.tenant_id, chunk)
                chunk, size = [], 0
            chunk.append(job)
            size += nbytes
        if chunk:
            ids += await jobs_db.insert_jobs(await self._db(), self.run.tenant_id, chunk)
        return ids

    def _job(
        self, step: StepRun, attempt: int, extra: Object | None = None, fan: tuple[int, int] | None = None
    ) -> NewJob:
        """The job of one scheduling of `step`. A step's job carries the workflow context under
        `_context` (upstream's contract); a fan-out child carries its element instead (`extra`) and
        its (index, total), not the context: one copy of the context per child is what made a
        fan-out's cost its width times the context's size."""
        d = step.definition
        payload = {**(d.payload or {}), **(extra or {})}
        if self.run.context and fan is None:
            payload["_context"] = self.run.context
        metadata = dict(d.metadata or {})
        index = None
        if fan is not None:
            index = fan[0]
            metadata.update(fan_out_index=fan[0], fan_out_total=fan[1])
        return NewJob(
            task_name=d.task_name or "",
            queue=d.queue or self.default_queue,
            config=resolve_partial(d.config),
            payload=payload,
            metadata=metadata,
            workflow_id=self.run.id,
            workflow_step=step.name,
            step_index=index,
            step_attempt=attempt,
            trace=self.run.trace,
        )

    async def _fan_out(self, step: StepRun, attempt: int) -> None:
        spec = step.definition.fan_out
        assert spec is not None
        items = lookup(self.run.context, spec.path)
        if not isinstance(items, list):
            await self._fail(step, f"fan_out path '{spec.path}' is not an array in the context")
            return
        limit = fan_out_limit(spec, self.limits)
        if len(items) > limit:
            bound = (
                f"max_items {limit}"
                if spec.max_items is not None and spec.max_items <= self.limits.max_fan_out
                else f"this server's limit of {limit} children a fan-out (--workflow-max-fan-out)"
            )
            await self._fail(step, f"fan_out path '{spec.path}' has {len(items)} elements, more than {bound}")
            return
        key, total = spec.item_key or "item", len(items)
        base = _size(step.definition.payload) + len(key) + 16
        ids = await self._insert(
            (self._job(step, attempt, {key: item, "_index": i}, (i, total)), base + _size(item))
            for i, item in enumerate(items)
        )
        step.scheduled(attempt, job_id=ids[0] if ids else None, fan_total=total)
        await workflows_db.mark_scheduled(await self._db(), self.run.id, [step])
        if not items:
            await self._complete(step, {"results": []})

    async def _finish_fan_out(self, step: StepRun) -> None:
        if step.fan_failed:
            await self._fail(step, f"{step.fan_failed} of {step.fan_total} fan-out children failed")
            return
        children = await workflows_db.fan_out_children(await self._db(), self.run.id, step.name, step.attempt)
        await self._complete(
            step, {"results": [result if result is not None else {} for _, result in children]}
        )

    async def _sleep(self, step: StepRun, attempt: int) -> None:
        """Arm the step's wake-up; a wake-up already past (a `sleep_until` in the past) completes
        it at once."""
        d = step.definition
        step.scheduled(attempt)
        wake, now = await workflows_db.arm_step(
            await self._db(), self.run.id, step, wake_at=d.sleep_until, wake_in_secs=d.sleep_secs
        )
        if wake is not None and wake <= now:
            await self._complete(step, {"slept_until": _instant(wake)})

    async def _wait(self, step: StepRun, attempt: int) -> None:
        """Wait for the step's event: a kept one completes it at once; otherwise the step waits,
        with its time-out armed when it has one."""
        spec = step.definition.wait_for_event
        assert spec is not None
        step.scheduled(attempt)
        try:
            key = resolve_event_key(spec.key, self.run.context)
        except ValueError as err:
            await workflows_db.arm_step(await self._db(), self.run.id, step)
            await self._fail(step, str(err))
            return
        tenant = self.run.tenant_id or ""
        kept = await events_db.latest_kept_event(await self._db(), tenant, key)
        if kept is not None:
            await workflows_db.arm_step(await self._db(), self.run.id, step)
            await self._complete(step, kept)
            return
        await workflows_db.arm_step(
            await self._db(), self.run.id, step, wake_in_secs=step.definition.timeout_secs, event_key=key
        )

    async def _spawn_child(self, step: StepRun, attempt: int) -> None:
        definition = step.definition.workflow
        assert definition is not None
        context = {
            **(definition.context or {}),
            **(step.definition.payload or {}),
            "_parent": self.run.context,
        }
        child_id = await workflows_db.insert_workflow(
            await self._db(),
            self.run.tenant_id,
            definition,
            context,
            parent=(self.run.id, step.name),
            depth=self.run.depth + 1,
            trace=self.run.trace,
        )
        step.scheduled(attempt, child_workflow_id=child_id)
        await workflows_db.mark_scheduled(await self._db(), self.run.id, [step])
        child = await Advancement.load(self._conn, child_id, self.default_queue, self.limits, self.pending)
        if child is not None:
            await child.start()
            await child.evaluate()

    # -- outcomes -------------------------------------------------------------------------------

    async def _finish(
        self, step: StepRun, status: StepStatus, error: str | None = None, skip_kind: SkipKind | None = None
    ) -> None:
        step.status, step.skip_kind = status, skip_kind
        await workflows_db.finish_step(await self._db(), self.run.id, step, error)

    async def _complete(self, step: StepRun, result: Object) -> None:
        # The result is in the context before the step counts as completed: a join never sees less.
        if self.pending is not None:
            self.run.context = self.pending.complete_step(self.run, step.name, result)
        else:
            self.run.context = await workflows_db.complete_step(self._conn, self.run.id, step.name, result)
        step.status, step.skip_kind = StepStatus.COMPLETED, None

    async def _fail(self, step: StepRun, error: str) -> None:
        await self._finish(step, StepStatus.FAILED, error)
        log.info("workflow_step_failed", workflow_id=self.run.id, step=step.name, policy=step.on_failure)
        if step.on_failure is FailurePolicy.HALT:
            self.run.halted = True
            await workflows_db.mark_halted(
                await self._db(), self.run.id, f"step '{step.name}' failed: {error}"
            )
            await workflows_db.cancel_below(await self._db(), self.run.id, HALTED)
            for other in self.steps.values():
                if not other.status.terminal:
                    other.status = StepStatus.CANCELLED

    async def _settle(self) -> None:
        status, error = settlement(self.steps.values(), self.run.halted)
        if self.pending is not None:
            self.pending.finish_workflow(self.run, status, error)  # live and locked: it will settle
        elif not await workflows_db.finish_workflow(self._conn, self.run, status, error):
            return
        self.run.status = status
        # A mass of completions (sleeps falling due together) must not be a mass of log lines.
        settled = log.debug if status is WorkflowStatus.COMPLETED else log.info
        settled("workflow_settled", workflow_id=self.run.id, status=status)


def _size(value: object) -> int:
    """About how many bytes `value` takes as JSON (for sizing insert chunks)."""
    return 0 if value is None else len(msgspec.json.encode(value))


def _instant(value: object) -> str:
    """An instant as the API writes it (RFC 3339, UTC, `Z`), from a datetime or the ISO text a
    jsonb copy of a timestamptz holds."""
    return utc_text(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))


async def create_workflow(
    pool: Pool,
    tenant: str,
    definition: WorkflowDefinition,
    default_queue: str,
    parent: TraceContext | None = None,
    tracer: Tracer | None = None,
    *,
    limits: WorkflowLimits,
) -> tuple[str, WorkflowStatus]:
    """Validate and store a workflow, start it and schedule its root steps, in one transaction:
    when this returns, the workflow is `running` (or already finished, if nothing could run) and
    each root step's job exists. Returns its id and status. The workflow keeps the trace context
    `parent` (the caller's), or with a `tracer` that of its creation's span, a child of it.

    A definition that asks for more than `limits` allow is refused (InvalidWorkflow), and so is a
    tenant at its running-workflows quota (QuotaExceeded), before anything is written."""
    validate(definition)
    check_budget(definition, limits)
    if tracer is None:
        async with audit.change(pool, atomic=True) as conn:
            wf_id, status = await _admit(conn, tenant, definition, default_queue, limits, parent)
            audit.made(wf_id)
        return wf_id, status
    with tracer.create_workflow(parent, tenant, definition.name) as span:
        async with audit.change(pool, atomic=True) as conn:
            wf_id, status = await _admit(conn, tenant, definition, default_queue, limits, span.context)
            audit.made(wf_id)
        span.workflow_created(wf_id)
    return wf_id, status


async def _admit(
    conn: Connection,
    tenant: str,
    definition: WorkflowDefinition,
    default_queue: str,
    limits: WorkflowLimits,
    trace: TraceContext | None,
) -> tuple[str, WorkflowStatus]:
    if limits.max_running:
        check_running_quota(await workflows_db.running_workflows(conn, tenant, limits.max_running), limits)
    return await _start(conn, tenant, definition, default_queue, limits, trace)


async def start_workflow(
    conn: Connection,
    tenant: str | None,
    definition: WorkflowDefinition,
    default_queue: str,
    trace: TraceContext | None = None,
    *,
    limits: WorkflowLimits,
) -> tuple[str, WorkflowStatus]:
    """Start a workflow in the caller's transaction: a cron occurrence's, whose definition was
    checked against the limits when its schedule was created (a refusal here would stop the
    janitor's firing on every pass). Its fan-outs are still bounded by `limits` as they run. A
    workflow whose queues would take the tenant past its queue cap is refused (TooManyQueues)."""
    validate(definition)
    return await _start(conn, tenant, definition, default_queue, limits, trace)


async def _start(
    conn: Connection,
    tenant: str | None,
    definition: WorkflowDefinition,
    default_queue: str,
    limits: WorkflowLimits,
    trace: TraceContext | None,
) -> tuple[str, WorkflowStatus]:
    stored = normalise(definition)
    queues = later_queues(stored, default_queue)
    if queues is not None:  # (its root steps' jobs are checked as they are written)
        await queues_db.check_room(conn, tenant, queues)
    wf_id = await workflows_db.insert_workflow(conn, tenant, stored, stored.context or {}, trace=trace)
    state = await Advancement.load(conn, wf_id, default_queue, limits)
    assert state is not None  # inserted by this transaction
    await state.start()
    await state.evaluate()
    return wf_id, state.run.status


async def advance(
    conn: Connection,
    event: OutboxEvent,
    default_queue: str,
    tracer: Tracer | None = None,
    *,
    limits: WorkflowLimits,
) -> None:
    """Apply one outbox event to its workflow (the caller holds the transaction); with a `tracer`,
    in a span that is a child of the workflow's trace context."""
    state = await Advancement.load(conn, event.workflow_id, default_queue, limits)
    if state is not None:  # None: unknown or already terminal, nothing to do
        await _apply(state, event, tracer)


async def advance_many(
    conn: Connection,
    events: Sequence[OutboxEvent],
    runs: Mapping[str, WorkflowRun],
    default_queue: str,
    tracer: Tracer | None = None,
    *,
    limits: WorkflowLimits,
) -> None:
    """Apply a batch of outbox events in order, in the caller's transaction, which has locked and
    loaded their live workflows (`runs`). The result is the same as one transaction per event: a
    workflow's first event starts from its loaded state, and any later read of a workflow goes to
    the database (a second event of the same workflow; and every event after a halt, which writes to
    other workflows: it cancels the sub-workflows below). Step completions and settlements are held
    back and written for the whole batch at once (PendingWrites), before any other statement. With
    a `tracer`, each event is applied in a span of its own, a child of its workflow's context."""
    fresh = dict(runs)
    pending = PendingWrites()
    for event in events:
        run = fresh.pop(event.workflow_id, None)
        if run is not None:
            state: Advancement | None = Advancement(conn, run, default_queue, limits, pending)
        else:
            state = await Advancement.load(conn, event.workflow_id, default_queue, limits, pending)
        if state is None:
            continue
        await _apply(state, event, tracer)
        if state.run.halted:
            fresh.clear()
    await pending.flush(conn)


async def _apply(state: Advancement, event: OutboxEvent, tracer: Tracer | None) -> None:
    if tracer is None:
        await _dispatch(state, event)
        return
    run = state.run
    with tracer.advance(run.trace, run.id, run.name, run.tenant_id, str(event.kind), event.step_name):
        await _dispatch(state, event)


async def _dispatch(state: Advancement, event: OutboxEvent) -> None:
    if event.kind is OutboxKind.START:
        await state.start()
    elif event.kind is OutboxKind.JOB:
        await state.job_finished(
            event.step_name,
            event.step_attempt,
            event.job_id,
            event.outcome,
            event.result,
            event.error_message,
        )
    elif event.kind is OutboxKind.CHILD:
        await state.child_finished(event.step_name, event.child_workflow_id, event.outcome)
    elif event.kind is OutboxKind.HEAL:
        await state.reconcile()
    elif event.kind is OutboxKind.TIMER:
        await state.woke(event.step_name, event.step_attempt, event.result)
    elif event.kind is OutboxKind.EVENT:
        await state.event_arrived(event.step_name, event.step_attempt, event.result)
    await state.evaluate()
