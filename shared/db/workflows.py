"""Workflow repository: creation, reads, cancellation, retry and time-outs.

Advancement itself (evaluating the DAG, scheduling steps) is the workflow service's job
(services/workflow/engine.py); everything here is what the API and the janitor need as well.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

import asyncpg

from shared import dag, metrics, wire
from shared.db.queries import Q
from shared.domain import TERMINAL_WORKFLOW_STATUSES

CANCELLED_BY_USER = "workflow cancelled"


def to_workflow(r: asyncpg.Record) -> wire.Workflow:
    return wire.Workflow(
        id=r["id"],
        name=r["name"],
        status=r["status"],
        steps=r["steps"],
        created_at=r["created_at"],
        context=r["context"],
        metadata=r["metadata"],
        retry_count=r["retry_count"],
        started_at=r["started_at"],
        completed_at=r["completed_at"],
        tenant_id=r["tenant_id"],
        timeout_secs=r["timeout_secs"],
        deadline_at=r["deadline_at"],
        error_message=r["error_message"],
        parent_workflow_id=r["parent_workflow_id"],
        parent_step_name=r["parent_step_name"],
    )


def to_step_state(r: asyncpg.Record) -> wire.WorkflowStepState:
    fan = None
    if r["fan_total"] is not None:
        fan = wire.FanOutProgress(total=r["fan_total"], completed=r["fan_completed"], failed=r["fan_failed"])
    return wire.WorkflowStepState(
        name=r["name"],
        status=r["status"],
        job_id=None if r["job_id"] is None else str(r["job_id"]),
        error=r["error"],
        started_at=r["started_at"],
        completed_at=r["completed_at"],
        child_workflow_id=r["child_workflow_id"],
        fan_out=fan,
    )


async def insert_workflow(
    conn: asyncpg.Connection,
    tenant: str | None,
    definition: dict[str, Any],
    context: dict[str, Any],
    parent: tuple[str, str] | None = None,
    depth: int = 0,
) -> str:
    """Store a (validated, normalised) workflow and its steps with status 'created'. The caller
    owns the transaction and decides who starts it."""
    wf_id = str(uuid.uuid4())
    await conn.execute(
        Q.insert_workflow,
        wf_id,
        definition["name"],
        context,
        definition["metadata"],
        tenant,
        definition["steps"],
        definition.get("timeout_secs"),
        parent[0] if parent else None,
        parent[1] if parent else None,
        depth,
    )
    await conn.executemany(
        Q.insert_step,
        [
            (wf_id, s["name"], i, s, s["depends_on"], s["on_failure"])
            for i, s in enumerate(definition["steps"])
        ],
    )
    metrics.WORKFLOWS_CREATED.inc()
    return wf_id


async def create_workflow(pool: asyncpg.Pool, tenant: str, request: wire.CreateWorkflowRequest) -> str:
    """Validate, store, and hand the new workflow to the advancer (a 'start' outbox row)."""
    dag.validate(request)
    definition = dag.normalise_request(request)
    async with pool.acquire() as conn, conn.transaction():
        wf_id = await insert_workflow(conn, tenant, definition, definition["context"])
        await conn.execute(Q.insert_outbox, wf_id, "start", None, None, None)
    return wf_id


async def get_workflow(db: Any, tenant: str, wf_id: str) -> wire.Workflow | None:
    row = await db.fetchrow(Q.get_workflow, wf_id, tenant)
    return None if row is None else to_workflow(row)


async def step_states(db: Any, wf_id: str) -> list[wire.WorkflowStepState]:
    return [to_step_state(r) for r in await db.fetch(Q.workflow_steps, wf_id)]


async def cancel_below(conn: asyncpg.Connection, wf_id: str, reason: str) -> None:
    """Cancel this workflow's unfinished steps and live jobs, and every live sub-workflow below it.
    The workflow's own status is the caller's to set."""
    await conn.execute(Q.cancel_steps, wf_id, reason)
    await conn.execute(Q.cancel_workflow_jobs, wf_id)
    await conn.execute(Q.cancel_descendants, wf_id, reason)


async def finish_workflow(
    conn: asyncpg.Connection, row: asyncpg.Record, status: str, error: str | None
) -> bool:
    """Guarded terminal write; tells the parent (a 'child' outbox row) when this is a sub-workflow.
    False when the workflow was already terminal."""
    if await conn.fetchval(Q.settle_workflow, row["id"], status, error) is None:
        return False
    if status == "completed":
        metrics.WORKFLOWS_COMPLETED.inc()
    elif status in ("failed", "partially_failed"):
        metrics.WORKFLOWS_FAILED.inc()
    if row["parent_workflow_id"] is not None:
        await conn.execute(
            Q.insert_outbox, row["parent_workflow_id"], "child", row["parent_step_name"], status, row["id"]
        )
    return True


# An outbox row whose application raised this many times is left aside and its workflow failed.
OUTBOX_ATTEMPTS = 5


async def fail_workflow(conn: asyncpg.Connection, wf_id: str, reason: str) -> bool:
    """End a live workflow failed with `reason`, its unfinished steps and sub-workflows cancelled.
    Reads none of its JSON, so it works on a workflow whose context cannot be processed."""
    row = await conn.fetchrow(Q.lock_workflow_head, wf_id)
    if row is None or row["status"] in TERMINAL_WORKFLOW_STATUSES:
        return False
    await cancel_below(conn, wf_id, reason)
    return await finish_workflow(conn, row, "failed", reason)


async def cancel_workflow(
    pool: asyncpg.Pool, tenant: str, wf_id: str
) -> tuple[Literal["cancelled", "missing", "conflict"], str | None]:
    """('cancelled', None), ('missing', None) or ('conflict', the terminal status it has)."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(Q.lock_tenant_workflow, wf_id, tenant)
        if row is None:
            return "missing", None
        if row["status"] in TERMINAL_WORKFLOW_STATUSES:
            return "conflict", str(row["status"])
        await cancel_below(conn, wf_id, CANCELLED_BY_USER)
        await finish_workflow(conn, row, "cancelled", CANCELLED_BY_USER)
    return "cancelled", None


async def retry_workflow(
    pool: asyncpg.Pool, tenant: str, wf_id: str
) -> tuple[Literal["retried", "missing", "conflict"], str | None]:
    """Re-run what did not complete: failed and cancelled steps, steps a failure policy skipped, and
    everything downstream of them; completed upstream steps keep their results."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(Q.lock_tenant_workflow, wf_id, tenant)
        if row is None:
            return "missing", None
        if row["status"] not in ("failed", "partially_failed", "cancelled"):
            return "conflict", str(row["status"])
        steps = await conn.fetch(Q.workflow_steps, wf_id)
        rerun = {
            s["name"]
            for s in steps
            if s["status"] in ("failed", "cancelled")
            or (s["status"] == "skipped" and s["skip_kind"] == "policy")
        }
        grew = True
        while grew:  # plus everything downstream
            grew = False
            for s in steps:
                if s["name"] not in rerun and rerun.intersection(s["depends_on"]):
                    rerun.add(s["name"])
                    grew = True
        names = sorted(rerun)
        await conn.execute(Q.reset_steps_for_retry, wf_id, names)
        await conn.execute(Q.restart_workflow, wf_id, names)
        await conn.execute(Q.insert_outbox, wf_id, "retry", None, None, None)
    return "retried", None


async def time_out_expired(pool: asyncpg.Pool, batch: int) -> int:
    """The janitor's sweep: a live workflow past its deadline has its unfinished steps cancelled
    and ends failed with `workflow timed out after <secs>s`."""
    count = 0
    async with pool.acquire() as conn, conn.transaction():
        for r in await conn.fetch(Q.expired_workflows, batch):
            count += await fail_workflow(conn, r["id"], f"workflow timed out after {r['timeout_secs']}s")
    return count
