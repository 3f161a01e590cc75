"""Workflow deadlines (timeout_secs, enforced by the janitor) and POST /workflows/{id}/retry."""

from __future__ import annotations

import asyncio

from tests.support.waiting import eventually
from tests.workflow.helpers import (
    complete,
    create,
    fail,
    heartbeat,
    job,
    lease,
    lease_step,
    manual,
    post,
    run_step,
    statuses,
    step,
    step_jobs,
    steps,
    wait_status,
    wait_step_job,
    workflow,
)

# --- timeouts ------------------------------------------------------------------------------------


async def test_workflow_past_its_timeout_fails_and_its_step_job_is_cancelled(api):
    client = await api(mode="all", janitor_interval_secs=0.2)
    wf_id = await create(
        client,
        [step("quick"), manual("stuck", after=["quick"]), manual("never", after=["stuck"])],
        timeout_secs=1,
    )
    created = await workflow(client, wf_id)
    assert created["timeout_secs"] == 1 and "deadline_at" in created
    stuck, token = await lease_step(client, wf_id, "stuck")  # leased, and never finished
    wf = await wait_status(client, wf_id, "failed", timeout=20)
    assert wf["error_message"] == "workflow timed out after 1s"
    assert (await job(client, stuck["id"]))["status"] == "cancelled"
    assert statuses(await steps(client, wf_id)) == {
        "quick": "completed",
        "stuck": "cancelled",
        "never": "cancelled",
    }
    status, body = await heartbeat(client, stuck["id"], token)
    assert status == 200 and body == {"status": "cancelled"}
    assert await lease(client, max_jobs=10) == []


async def test_timeout_cancels_a_pending_step_job_and_a_running_child(api):
    client = await api(mode="all", janitor_interval_secs=0.2)
    wf_id = await create(
        client,
        [
            manual("waiting"),
            step(
                "sub", None, workflow={"name": "child", "steps": [step("inner", "remote", queue="manual2")]}
            ),
        ],
        timeout_secs=1,
    )
    pending_job = await wait_step_job(client, wf_id, "waiting")
    wf = await wait_status(client, wf_id, "failed", timeout=20)
    assert wf["error_message"] == "workflow timed out after 1s"
    assert (await job(client, pending_job))["status"] == "cancelled"
    child_id = (await steps(client, wf_id))["sub"]["child_workflow_id"]
    assert (await workflow(client, child_id))["status"] == "cancelled"
    assert await lease(client, max_jobs=10) == [] and await lease(client, "manual2", max_jobs=10) == []


async def test_a_workflow_finishing_within_its_timeout_completes(api):
    client = await api(mode="all", janitor_interval_secs=0.2)
    wf_id = await create(client, [step("a"), step("b", after=["a"])], timeout_secs=60)
    wf = await wait_status(client, wf_id, "completed")
    assert "error_message" not in wf


# --- retry ---------------------------------------------------------------------------------------


async def test_retry_reruns_the_failed_step_and_downstream_but_not_completed_upstream(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("upstream", payload={"u": 1}),
            manual("flaky", after=["upstream"]),
            step("downstream", after=["flaky"]),
        ],
    )
    first, token = await lease_step(client, wf_id, "flaky")
    await fail(client, first["id"], token, "transient outage")
    failed = await wait_status(client, wf_id, "failed")
    assert failed["error_message"] == "step 'flaky' failed: transient outage"
    assert statuses(await steps(client, wf_id)) == {
        "upstream": "completed",
        "flaky": "failed",
        "downstream": "cancelled",
    }

    status, body = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 204, body
    retried = await workflow(client, wf_id)
    assert retried["status"] == "running" and retried["retry_count"] == 1
    assert "error_message" not in retried and "completed_at" not in retried
    assert retried["context"] == {"upstream": {"u": 1, "echoed": True}}

    second, token2 = await lease_step(client, wf_id, "flaky")
    assert second["id"] != first["id"]
    assert second["payload"]["_context"] == {"upstream": {"u": 1, "echoed": True}}
    await complete(client, second["id"], token2, {"fixed": True})
    done = await wait_status(client, wf_id, "completed")
    assert done["retry_count"] == 1
    assert done["context"] == {
        "upstream": {"u": 1, "echoed": True},
        "flaky": {"fixed": True},
        "downstream": {"echoed": True},
    }
    counts = {name: len(await step_jobs(client, wf_id, name)) for name in ("upstream", "flaky", "downstream")}
    assert counts == {"upstream": 1, "flaky": 2, "downstream": 1}


async def test_retry_of_a_running_or_completed_workflow_is_409(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a")])
    await wait_step_job(client, wf_id, "a")
    status, body = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 409, body
    assert body["error"].startswith("conflict: ")
    await run_step(client, wf_id, "a")
    await wait_status(client, wf_id, "completed")
    status, body = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 409, body
    wf = await workflow(client, wf_id)
    assert wf["status"] == "completed" and wf["retry_count"] == 0


async def test_retry_of_partially_failed_reruns_policy_skipped_steps_only(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("ok"),
            manual("bad", after=["ok"], on_failure="skip"),
            step("dep", after=["bad"]),
            step("cond", when={"path": "never"}),
            step("side", after=["ok"]),
        ],
    )
    first, token = await lease_step(client, wf_id, "bad")
    await fail(client, first["id"], token, "bad data")
    await wait_status(client, wf_id, "partially_failed")
    assert statuses(await steps(client, wf_id)) == {
        "ok": "completed",
        "bad": "failed",
        "dep": "skipped",
        "cond": "skipped",
        "side": "completed",
    }
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 204
    await run_step(client, wf_id, "bad", {"good": True})
    wf = await wait_status(client, wf_id, "completed")
    assert wf["retry_count"] == 1
    states = await steps(client, wf_id)
    assert statuses(states) == {
        "ok": "completed",
        "bad": "completed",
        "dep": "completed",
        "cond": "skipped",
        "side": "completed",
    }
    assert states["cond"]["error"] == "condition not met"
    counts = {
        name: len(await step_jobs(client, wf_id, name)) for name in ("ok", "bad", "dep", "cond", "side")
    }
    assert counts == {"ok": 1, "bad": 2, "dep": 1, "cond": 0, "side": 1}


async def test_retry_of_a_cancelled_workflow_reruns_the_cancelled_steps(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("done"), manual("waits", after=["done"]), step("last", after=["waits"])]
    )
    old_job = await wait_step_job(client, wf_id, "waits")
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 409  # still running
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 204
    rerun = await run_step(client, wf_id, "waits", {"again": True})
    assert rerun["id"] != old_job
    assert (await job(client, old_job))["status"] == "cancelled"
    wf = await wait_status(client, wf_id, "completed")
    assert wf["retry_count"] == 1
    assert len(await step_jobs(client, wf_id, "done")) == 1


async def test_retry_of_a_failed_fan_out_ignores_the_previous_attempts_children(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("fan", fan_out={"path": "xs"})], context={"xs": [10, 20, 30]})

    async def three() -> list | None:
        got.extend(await lease(client, max_jobs=10))
        return got if len(got) == 3 else None

    got: list = []
    children = sorted(await eventually(three), key=lambda c: c[0]["payload"]["_index"])
    await fail(client, children[0][0]["id"], children[0][1], "no")
    await asyncio.gather(*(complete(client, j["id"], t, {"old": True}) for j, t in children[1:]))
    await wait_status(client, wf_id, "failed")

    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 204
    got = []
    fresh = sorted(await eventually(three), key=lambda c: c[0]["payload"]["_index"])
    assert {j["id"] for j, _ in fresh}.isdisjoint({j["id"] for j, _ in children})
    await asyncio.gather(*(complete(client, j["id"], t, {"new": j["payload"]["item"]}) for j, t in fresh))
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"]["fan"] == {"results": [{"new": 10}, {"new": 20}, {"new": 30}]}
    assert (await steps(client, wf_id))["fan"]["fan_out"] == {"total": 3, "completed": 3, "failed": 0}


async def test_retry_after_a_timeout_rearms_the_deadline(api):
    client = await api(mode="all", janitor_interval_secs=0.2)
    wf_id = await create(client, [manual("stuck")], timeout_secs=2)
    timed_out = await wait_status(client, wf_id, "failed", timeout=20)
    assert timed_out["error_message"] == "workflow timed out after 2s"
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 204
    retried = await workflow(client, wf_id)
    assert retried["retry_count"] == 1 and retried["deadline_at"] > timed_out["deadline_at"]
    # The re-armed deadline fires again for a step that still never finishes.
    again = await wait_status(client, wf_id, "failed", timeout=20)
    assert again["error_message"] == "workflow timed out after 2s"
    assert [j["status"] for j in await step_jobs(client, wf_id, "stuck")] == ["cancelled", "cancelled"]
