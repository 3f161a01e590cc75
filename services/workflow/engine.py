"""Advancing one workflow, inside the advancer's transaction, under the workflow's row lock.

An outbox row says what happened (the workflow was created or retried, a step's job or child
workflow finished); `advance` records it on the step (merging a result into the context before the
step counts as completed), then schedules every step that became ready exactly once, and settles
the workflow when every step is terminal.

Failure policies (shared/reference/README.md): `halt` cancels every unfinished step, running jobs
and sub-workflows included, and fails the workflow; `skip` skips the failed step's transitive
dependents and lets unrelated branches run; `continue` still runs the dependents. A false `when`
skips the step (`condition not met`) and its dependents proceed. A finished workflow with a failed,
cancelled or policy-skipped step is `partially_failed`, or `failed` when no step completed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import asyncpg
import structlog

from services.workflow.conditions import holds, lookup
from shared.db import jobs as jobs_db
from shared.db import workflows as workflows_db
from shared.db.queries import Q
from shared.domain import MAX_FAN_OUT, TERMINAL_STEP_STATUSES, TERMINAL_WORKFLOW_STATUSES, resolve_config

log = structlog.get_logger("queueflow.workflow")

HALTED = "workflow halted by an upstream failure"


@dataclass
class Step:
    name: str
    definition: dict[str, Any]
    depends_on: list[str]
    on_failure: str
    status: str
    skip_kind: str | None
    attempt: int
    job_id: Any
    child_workflow_id: str | None
    fan_total: int | None
    fan_completed: int
    fan_failed: int

    @classmethod
    def of(cls, r: asyncpg.Record) -> Step:
        return cls(
            r["name"],
            r["definition"],
            list(r["depends_on"]),
            r["on_failure"],
            r["status"],
            r["skip_kind"],
            r["attempt"],
            r["job_id"],
            r["child_workflow_id"],
            r["fan_total"],
            r["fan_completed"],
            r["fan_failed"],
        )

    @property
    def satisfied(self) -> bool:
        """May its dependents run?"""
        return (
            self.status == "completed"
            or (self.status == "skipped" and self.skip_kind == "condition")
            or (self.status == "failed" and self.on_failure == "continue")
        )

    @property
    def problem(self) -> bool:
        return self.status in ("failed", "cancelled") or (
            self.status == "skipped" and self.skip_kind == "policy"
        )


class Advancement:
    """One workflow's state while its row lock is held."""

    def __init__(
        self, conn: asyncpg.Connection, row: asyncpg.Record, steps: list[asyncpg.Record], default_queue: str
    ) -> None:
        self.conn = conn
        self.row = row
        self.id: str = row["id"]
        self.context: dict[str, Any] = dict(row["context"])
        self.halted: bool = row["halted"]
        self.steps = {r["name"]: Step.of(r) for r in steps}
        self.default_queue = default_queue

    @classmethod
    async def load(cls, conn: asyncpg.Connection, wf_id: str, default_queue: str) -> Advancement | None:
        row = await conn.fetchrow(Q.lock_workflow, wf_id)
        if row is None or row["status"] in TERMINAL_WORKFLOW_STATUSES:
            return None
        return cls(conn, row, await conn.fetch(Q.workflow_steps, wf_id), default_queue)

    # -- events ---------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.conn.execute(Q.set_workflow_running, self.id)

    async def job_finished(self, event: Mapping[str, Any]) -> None:
        step = self.steps.get(event["step_name"])
        if step is None or step.status != "running" or step.attempt != event["step_attempt"]:
            return  # stale: the step was cancelled, retried or already settled
        outcome = event["outcome"]
        if step.fan_total is not None:
            if outcome == "completed":
                step.fan_completed += 1
            else:
                step.fan_failed += 1
            await self.conn.execute(
                Q.step_fan_progress, self.id, step.name, step.fan_completed, step.fan_failed
            )
            if step.fan_completed + step.fan_failed == step.fan_total:
                await self._finish_fan_out(step)
            return
        if event["job_id"] != step.job_id:
            return
        if outcome == "completed":
            await self._complete(step, event["result"] or {})
        else:
            error = event["error_message"] if outcome == "failed" else None
            await self._fail(step, error or f"step job {outcome}")

    async def child_finished(self, event: Mapping[str, Any]) -> None:
        step = self.steps.get(event["step_name"])
        if step is None or step.status != "running" or step.child_workflow_id != event["child_workflow_id"]:
            return
        if event["outcome"] == "completed":
            child = await self.conn.fetchrow(Q.lock_workflow, event["child_workflow_id"])
            result = {k: v for k, v in (child["context"] if child else {}).items() if k != "_parent"}
            await self._complete(step, result)
        else:
            await self._fail(step, f"sub-workflow {event['child_workflow_id']} ended {event['outcome']}")

    async def reconcile(self) -> None:
        """Heal: re-derive running steps from their jobs and children, for an outcome whose
        outbox row never arrived (rows are written by the outcome's own transaction, so this is
        a safety net, not a path the engine relies on)."""
        for step in list(self.steps.values()):
            if step.status != "running":
                continue
            if step.child_workflow_id is not None:
                child = await self.conn.fetchrow(Q.lock_workflow, step.child_workflow_id)
                if child is not None and child["status"] in TERMINAL_WORKFLOW_STATUSES:
                    await self.child_finished(
                        {"step_name": step.name, "child_workflow_id": child["id"], "outcome": child["status"]}
                    )
            elif step.fan_total is not None:
                rows = await self.conn.fetch(Q.fan_out_results, self.id, step.name, step.attempt)
                step.fan_completed = sum(r["status"] == "completed" for r in rows)
                step.fan_failed = sum(r["status"] in ("failed", "cancelled") for r in rows)
                await self.conn.execute(
                    Q.step_fan_progress, self.id, step.name, step.fan_completed, step.fan_failed
                )
                if step.fan_completed + step.fan_failed == step.fan_total:
                    await self._finish_fan_out(step)
            elif step.job_id is not None:
                job = await self.conn.fetchrow(Q.job_outcome, step.job_id)
                if job is not None and job["status"] in ("completed", "failed", "cancelled"):
                    await self.job_finished(
                        {
                            "step_name": step.name,
                            "step_attempt": step.attempt,
                            "job_id": step.job_id,
                            "outcome": job["status"],
                            "result": job["result"],
                            "error_message": job["error_message"],
                        }
                    )

    # -- scheduling -----------------------------------------------------------------------------

    async def evaluate(self) -> None:
        """Schedule or skip every step whose dependencies are all terminal, to a fixpoint; then
        settle the workflow if nothing is left to run."""
        progressed = True
        while progressed and not self.halted:
            progressed = False
            tasks: list[Step] = []  # plain task steps ready in this pass: scheduled together
            for step in self.steps.values():
                if step.status != "pending":
                    continue
                deps = [self.steps[d] for d in step.depends_on]
                if any(d.status not in TERMINAL_STEP_STATUSES for d in deps):
                    continue
                progressed = True
                blocker = next((d for d in deps if not d.satisfied), None)
                if blocker is not None:
                    await self._finish(
                        step, "skipped", f"dependency '{blocker.name}' did not complete", "policy"
                    )
                elif "when" in step.definition and not holds(step.definition["when"], self.context):
                    await self._finish(step, "skipped", "condition not met", "condition")
                elif "workflow" in step.definition or "fan_out" in step.definition:
                    await self._schedule(step)
                else:
                    step.status = "running"  # its job is inserted with the rest of this pass
                    tasks.append(step)
                if self.halted:
                    break
            if tasks:
                await self._schedule_tasks(tasks)
        if all(s.status in TERMINAL_STEP_STATUSES for s in self.steps.values()):
            await self._settle()

    async def _schedule(self, step: Step) -> None:
        attempt = step.attempt + 1
        if "workflow" in step.definition:
            await self._spawn_child(step, attempt)
        else:
            await self._fan_out(step, attempt)

    async def _schedule_tasks(self, steps: list[Step]) -> None:
        """One job per step, inserted by one statement, and the steps marked in one round trip."""
        ids = await jobs_db.insert_jobs(
            self.conn, self.row["tenant_id"], [self._job(s, s.attempt + 1) for s in steps]
        )
        for step, job_id in zip(steps, ids, strict=True):
            step.attempt += 1
            step.job_id, step.child_workflow_id, step.fan_total = jobs_db.parse_id(job_id), None, None
            step.fan_completed = step.fan_failed = 0
        await self.conn.executemany(
            Q.step_scheduled, [(self.id, s.name, s.attempt, s.job_id, None, None) for s in steps]
        )

    def _job(
        self, step: Step, attempt: int, extra: dict[str, Any] | None = None, index: int | None = None
    ) -> jobs_db.NewJob:
        d = step.definition
        payload = {**d.get("payload", {}), **(extra or {})}
        if self.context:
            payload["_context"] = self.context
        return jobs_db.NewJob(
            task_name=d["task_name"],
            queue=d.get("queue") or self.default_queue,
            config=resolve_config(**d.get("config", {})),
            payload=payload,
            metadata=d.get("metadata", {}),
            workflow_id=self.id,
            workflow_step=step.name,
            step_index=index,
            step_attempt=attempt,
        )

    async def _fan_out(self, step: Step, attempt: int) -> None:
        spec = step.definition["fan_out"]
        items = lookup(self.context, spec["path"])
        limit = spec.get("max_items") if spec.get("max_items") is not None else MAX_FAN_OUT
        if not isinstance(items, list):
            await self._fail(step, f"fan_out path '{spec['path']}' is not an array in the context")
            return
        if len(items) > limit:
            await self._fail(
                step, f"fan_out path '{spec['path']}' has {len(items)} elements, more than max_items {limit}"
            )
            return
        key = spec.get("item_key") or "item"
        jobs = [self._job(step, attempt, {key: item, "_index": i}, index=i) for i, item in enumerate(items)]
        ids = await jobs_db.insert_jobs(self.conn, self.row["tenant_id"], jobs) if jobs else []
        await self._mark_scheduled(step, attempt, job_id=ids[0] if ids else None, fan_total=len(items))
        if not items:
            await self._complete(step, {"results": []})

    async def _finish_fan_out(self, step: Step) -> None:
        if step.fan_failed:
            await self._fail(step, f"{step.fan_failed} of {step.fan_total} fan-out children failed")
            return
        rows = await self.conn.fetch(Q.fan_out_results, self.id, step.name, step.attempt)
        await self._complete(
            step, {"results": [r["result"] if r["result"] is not None else {} for r in rows]}
        )

    async def _spawn_child(self, step: Step, attempt: int) -> None:
        definition = step.definition["workflow"]
        context = {
            **definition.get("context", {}),
            **step.definition.get("payload", {}),
            "_parent": self.context,
        }
        child_id = await workflows_db.insert_workflow(
            self.conn,
            self.row["tenant_id"],
            definition,
            context,
            parent=(self.id, step.name),
            depth=self.row["depth"] + 1,
        )
        await self._mark_scheduled(step, attempt, child_id=child_id)
        child = await Advancement.load(self.conn, child_id, self.default_queue)
        if child is not None:
            await child.start()
            await child.evaluate()

    async def _mark_scheduled(
        self,
        step: Step,
        attempt: int,
        job_id: str | None = None,
        child_id: str | None = None,
        fan_total: int | None = None,
    ) -> None:
        step.status, step.attempt, step.child_workflow_id, step.fan_total = (
            "running",
            attempt,
            child_id,
            fan_total,
        )
        step.job_id = jobs_db.parse_id(job_id) if job_id else None
        step.fan_completed = step.fan_failed = 0
        await self.conn.execute(
            Q.step_scheduled, self.id, step.name, attempt, step.job_id, child_id, fan_total
        )

    # -- outcomes -------------------------------------------------------------------------------

    async def _finish(
        self, step: Step, status: str, error: str | None = None, skip_kind: str | None = None
    ) -> None:
        step.status, step.skip_kind = status, skip_kind
        await self.conn.execute(Q.step_finished, self.id, step.name, status, skip_kind, error)

    async def _complete(self, step: Step, result: dict[str, Any]) -> None:
        # The result is in the context before the step counts as completed: a join never sees less.
        self.context = await self.conn.fetchval(Q.complete_step, self.id, step.name, result)
        step.status, step.skip_kind = "completed", None

    async def _fail(self, step: Step, error: str) -> None:
        await self._finish(step, "failed", error)
        log.info("workflow_step_failed", workflow_id=self.id, step=step.name, policy=step.on_failure)
        if step.on_failure == "halt":
            message = f"step '{step.name}' failed: {error}"
            self.halted = True
            await self.conn.execute(Q.mark_halted, self.id, message)
            await workflows_db.cancel_below(self.conn, self.id, HALTED)
            for other in self.steps.values():
                if other.status not in TERMINAL_STEP_STATUSES:
                    other.status = "cancelled"

    async def _settle(self) -> None:
        steps = list(self.steps.values())
        problems = [s for s in steps if s.problem]
        if self.halted:
            status, error = "failed", None  # the halt recorded its reason
        elif not problems:
            status, error = "completed", None
        else:
            names = ", ".join(s.name for s in problems)
            status = "partially_failed" if any(s.status == "completed" for s in steps) else "failed"
            error = f"steps did not complete: {names}"
        if await workflows_db.finish_workflow(self.conn, self.row, status, error):
            log.info("workflow_settled", workflow_id=self.id, status=status)


async def advance(conn: asyncpg.Connection, event: asyncpg.Record, default_queue: str) -> None:
    """Apply one outbox event to its workflow (the caller holds the transaction)."""
    state = await Advancement.load(conn, event["workflow_id"], default_queue)
    if state is None:
        return  # unknown or already terminal: nothing to do
    kind = event["kind"]
    if kind == "start":
        await state.start()
    elif kind == "job":
        await state.job_finished(event)
    elif kind == "child":
        await state.child_finished(event)
    elif kind == "heal":
        await state.reconcile()
    await state.evaluate()
