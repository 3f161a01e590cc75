"""Real processes: the official client (`queueflow==0.5.0`) drives workflows against api, workflow
(advancer) and worker running as separate `queueflow serve` processes; and the advancer survives
SIGKILL midway through 200 diamonds without losing or repeating a step."""

from __future__ import annotations

import asyncio
import json

import asyncpg
from queueflow.facade import QueueFlow, wf

from tests.workflow.helpers import complete, create, lease, manual, wait_step_job

CRASH = "crash"


def _run_flows(base_url: str) -> dict:
    qf = QueueFlow(base_url, "dev", timeout=10)
    out: dict = {}

    child = wf("child").context(kind="child").step("inner", "echo", payload={"deep": True})
    order = (
        wf("order")
        .context(source="web", items=["x", "y", "z"])
        .metadata(owner="e2e")
        .timeout_secs(120)
        .step("validate", "echo", payload={"order_id": 42})
        .step("charge", "echo", after=["validate"], payload={"amount": 5})
        .step("ship", "echo", after=["validate"], when={"path": "validate.order_id", "op": "eq", "value": 42})
        .step("gift", "echo", after=["validate"], when={"not": {"path": "source", "value": "web"}})
        .step("pack", "echo", after=["charge", "ship", "gift"], fan_out={"path": "items", "item_key": "sku"})
        .sub_workflow("invoice", child, after=["pack"], payload={"invoice_no": 7})
        .step("notify", "echo", after=["invoice"])
    )
    created = qf.create_workflow(order)
    assert created.status in ("created", "running")
    done = qf.wait_for_workflow(created.id, timeout=60, interval=0.2)
    out["order"] = done
    out["order_steps"] = qf.workflow_steps(created.id)

    broken = (
        wf("broken")
        .step("first", "echo")
        .step(
            "bad",
            "fail",
            after=["first"],
            payload={"permanent": True, "message": "nope"},
            on_failure="continue",
        )
        .step("after_bad", "echo", after=["bad"])
    )
    created = qf.create_workflow(broken)
    out["broken"] = qf.wait_for_workflow(created.id, timeout=60, interval=0.2)
    out["broken_steps"] = qf.workflow_steps(created.id)
    out["retried"] = qf.retry_workflow(created.id)
    out["broken_again"] = qf.wait_for_workflow(created.id, timeout=60, interval=0.2)
    return out


async def test_workflow_process_exits_promptly_on_sigterm(api, database_url, service):
    client = await api()
    advancer = await service(database_url, mode="workflow", extra_args=["--shutdown-grace-secs", "5"])
    wf_id = await create(client, [manual("a")])
    await wait_step_job(client, wf_id, "a")
    # Idle now (parked on its wake-up hub). SIGTERM must stop it; terminate() raises if it has not
    # exited within the grace period.
    assert await advancer.terminate(grace=10) == 0


async def test_official_client_builder_against_separate_api_workflow_and_worker_processes(
    database_url, service
):
    api_proc = await service(database_url, mode="api")
    await service(database_url, mode="workflow")
    await service(database_url, mode="worker")
    out = await asyncio.to_thread(_run_flows, api_proc.base_url)

    done = out["order"]
    assert done.status == "completed", done
    assert done.error_message is None
    ctx = done.context
    assert ctx["source"] == "web"
    assert ctx["validate"] == {"order_id": 42, "echoed": True}
    assert ctx["charge"] == {"amount": 5, "echoed": True}
    assert ctx["ship"] == {"echoed": True}
    assert "gift" not in ctx
    assert ctx["pack"] == {"results": [{"sku": s, "_index": i, "echoed": True} for i, s in enumerate("xyz")]}
    assert ctx["invoice"] == {"kind": "child", "invoice_no": 7, "inner": {"deep": True, "echoed": True}}
    assert ctx["notify"] == {"echoed": True}
    assert done.metadata == {"owner": "e2e"} and done.timeout_secs == 120

    states = {s.name: s for s in out["order_steps"]}
    assert [s.name for s in out["order_steps"]] == [
        "validate",
        "charge",
        "ship",
        "gift",
        "pack",
        "invoice",
        "notify",
    ]
    assert {n: s.status for n, s in states.items()} == {
        "validate": "completed",
        "charge": "completed",
        "ship": "completed",
        "gift": "skipped",
        "pack": "completed",
        "invoice": "completed",
        "notify": "completed",
    }
    assert states["gift"].error == "condition not met"
    assert states["pack"].fan_out.total == 3 and states["pack"].fan_out.completed == 3
    assert states["invoice"].child_workflow_id
    assert states["validate"].job_id

    broken = out["broken"]
    assert broken.status == "partially_failed"
    assert {s.name: s.status for s in out["broken_steps"]} == {
        "first": "completed",
        "bad": "failed",
        "after_bad": "completed",
    }
    assert out["retried"].retry_count == 1
    assert out["broken_again"].status == "partially_failed" and out["broken_again"].retry_count == 1


# --- crash safety --------------------------------------------------------------------------------

DIAMOND = [manual("a"), manual("b", after=["a"]), manual("c", after=["a"]), manual("d", after=["b", "c"])]


async def _drain(client, finished: list[str], wait_secs: int = 0) -> int:
    """Lease and complete what is leasable on the crash queue (long-polling up to `wait_secs`
    for the first job); returns how many."""
    batch = await lease(client, CRASH, max_jobs=100, wait_secs=wait_secs)
    await asyncio.gather(*(complete(client, j["id"], t, {"step": j["workflow_step_id"]}) for j, t in batch))
    finished.extend(j["id"] for j, _ in batch)
    return len(batch)


async def test_advancer_killed_midway_through_200_diamonds_loses_and_repeats_nothing(
    api, database_url, service
):
    client = await api()  # API only: advancement happens in the separate workflow processes
    steps = [{**s, "queue": CRASH} for s in DIAMOND]
    wf_ids: list[str] = []
    for chunk in range(0, 200, 50):
        wf_ids += await asyncio.gather(
            *(create(client, steps, name=f"d{i}") for i in range(chunk, chunk + 50))
        )
    advancer = await service(database_url, mode="workflow")

    finished: list[str] = []
    async with asyncio.timeout(90):
        while len(finished) < 300:  # of 800 step jobs
            await _drain(client, finished, wait_secs=1)
        # Hundreds of outcomes were just reported: the advancer is in the middle of applying them.
        await advancer.kill()
        while await _drain(client, finished):
            pass

    conn = await asyncpg.connect(database_url)
    try:
        live = await conn.fetchval("SELECT count(*) FROM queueflow.workflows WHERE status = 'running'")
        assert live > 0, "the advancer was not killed midway"

        # Restart: two advancer processes now share the backlog.
        await service(database_url, mode="workflow")
        await service(database_url, mode="workflow")
        async with asyncio.timeout(120):
            while True:
                if not await _drain(client, finished):
                    done = await conn.fetchval(
                        "SELECT count(*) FROM queueflow.workflows WHERE status IN"
                        " ('completed', 'failed', 'partially_failed', 'cancelled')"
                    )
                    if done == len(wf_ids):
                        break
                    await _drain(client, finished, wait_secs=1)

        statuses = await conn.fetch("SELECT status, count(*) AS n FROM queueflow.workflows GROUP BY status")
        assert {r["status"]: r["n"] for r in statuses} == {"completed": 200}
        per_step = await conn.fetch(
            "SELECT workflow_id, workflow_step_id, count(*) AS n FROM queueflow.jobs"
            " GROUP BY workflow_id, workflow_step_id"
        )
        counts = {(r["workflow_id"], r["workflow_step_id"]): r["n"] for r in per_step}
        assert set(counts) == {(w, s) for w in wf_ids for s in "abcd"}
        assert {k: n for k, n in counts.items() if n != 1} == {}  # every join (and step) ran exactly once
        assert len(finished) == len(set(finished)) == 800
        contexts = await conn.fetch("SELECT context FROM queueflow.workflows")
        assert all(set(json.loads(r["context"])) == set("abcd") for r in contexts)
        step_states = await conn.fetch(
            "SELECT status, count(*) AS n FROM queueflow.workflow_steps GROUP BY status"
        )
        assert {r["status"]: r["n"] for r in step_states} == {"completed": 800}
        assert await conn.fetchval("SELECT count(*) FROM queueflow.workflow_outbox") == 0
    finally:
        await conn.close()
