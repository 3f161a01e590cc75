"""Sub-workflow steps: the child's context and ids, the step's result, and how the child's outcome
and the parent's cancellation or halt travel between them."""

from __future__ import annotations

from tests.support.waiting import eventually
from tests.workflow.helpers import (
    create,
    fail,
    get,
    job,
    lease,
    lease_step,
    manual,
    post,
    run_step,
    step,
    steps,
    wait_status,
    wait_step_job,
    workflow,
)


async def _child_id(client, wf_id: str, name: str = "sub") -> str:
    async def spawned() -> str | None:
        return (await steps(client, wf_id))[name].get("child_workflow_id")

    return await eventually(spawned, timeout=20)


def _child(steps_: list[dict], **fields) -> dict:
    return {"name": "child", "steps": steps_, **fields}


async def test_sub_workflow_result_is_the_childs_final_context_without_parent(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("prep", payload={"prepared": True}),
            step(
                "sub",
                None,
                after=["prep"],
                payload={"p": 2},
                workflow=_child(
                    [step("inner", payload={"x": 1}), manual("inner2", after=["inner"])],
                    context={"c": 1},
                    metadata={"kind": "child"},
                ),
            ),
            manual("after", after=["sub"]),
        ],
        context={"root": 1},
    )
    child_id = await _child_id(client, wf_id)
    parent_context_then = {"root": 1, "prep": {"prepared": True, "echoed": True}}

    child = await workflow(client, child_id)
    assert child["parent_workflow_id"] == wf_id and child["parent_step_name"] == "sub"
    assert child["name"] == "child" and child["metadata"] == {"kind": "child"}
    assert child["tenant_id"] == (await workflow(client, wf_id))["tenant_id"]
    assert child["status"] == "running"
    sub_state = (await steps(client, wf_id))["sub"]
    assert sub_state["status"] == "running" and sub_state["child_workflow_id"] == child_id

    inner2 = await run_step(client, child_id, "inner2", {"y": 2})
    assert inner2["payload"]["_context"] == {
        "c": 1,
        "p": 2,
        "_parent": parent_context_then,
        "inner": {"x": 1, "echoed": True},
    }
    assert inner2["workflow_id"] == child_id

    child_done = await wait_status(client, child_id, "completed")
    expected = {"c": 1, "p": 2, "inner": {"x": 1, "echoed": True}, "inner2": {"y": 2}}
    assert child_done["context"] == {**expected, "_parent": parent_context_then}

    after = await run_step(client, wf_id, "after")
    assert after["payload"]["_context"]["sub"] == expected
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"]["sub"] == expected
    assert (await steps(client, wf_id))["sub"]["status"] == "completed"


async def test_failing_child_fails_the_parent_step_under_its_policy(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step(
                "sub",
                None,
                workflow=_child(
                    [
                        step("bad", "fail", payload={"permanent": True, "message": "deep"}),
                        step("never", after=["bad"]),
                    ]
                ),
            ),
            step("next", after=["sub"]),
        ],
    )
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"].startswith("step 'sub' failed: ")
    child_id = (await steps(client, wf_id))["sub"]["child_workflow_id"]
    child = await workflow(client, child_id)
    assert child["status"] == "failed" and child["error_message"] == "step 'bad' failed: deep"
    assert {n: s["status"] for n, s in (await steps(client, wf_id)).items()} == {
        "sub": "failed",
        "next": "cancelled",
    }


async def test_failing_child_under_continue_lets_the_parent_go_on(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step(
                "sub",
                None,
                on_failure="continue",
                workflow=_child([step("bad", "fail", payload={"permanent": True})]),
            ),
            step("next", after=["sub"]),
        ],
    )
    wf = await wait_status(client, wf_id, "partially_failed")
    assert {n: s["status"] for n, s in (await steps(client, wf_id)).items()} == {
        "sub": "failed",
        "next": "completed",
    }
    assert "sub" not in wf["context"]


async def test_cancelling_the_parent_cancels_the_child_and_its_jobs(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("sub", None, workflow=_child([manual("waits"), manual("later", after=["waits"])]))]
    )
    child_id = await _child_id(client, wf_id)
    child_job = await wait_step_job(client, child_id, "waits")
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204
    assert (await workflow(client, wf_id))["status"] == "cancelled"
    assert (await workflow(client, child_id))["status"] == "cancelled"
    assert (await job(client, child_job))["status"] == "cancelled"
    assert {s["status"] for s in (await steps(client, child_id)).values()} == {"cancelled"}
    assert (await steps(client, wf_id))["sub"]["status"] == "cancelled"
    assert await lease(client, max_jobs=10) == []


async def test_halt_in_the_parent_cancels_a_running_child(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("sub", None, workflow=_child([manual("slow")])),
            step("bad", "remote", queue="manual2"),
        ],
    )
    child_id = await _child_id(client, wf_id)
    running, token = await lease_step(client, child_id, "slow")
    failing, ftoken = await lease_step(client, wf_id, "bad", queue="manual2")
    await fail(client, failing["id"], ftoken, "parent broke")
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"] == "step 'bad' failed: parent broke"
    assert (await workflow(client, child_id))["status"] == "cancelled"
    status, body = await post(
        client, f"/api/v1/jobs/{running['id']}/heartbeat", {"lease_token": token, "extend_secs": 30}
    )
    assert status == 200 and body == {"status": "cancelled"}
    assert {n: s["status"] for n, s in (await steps(client, wf_id)).items()} == {
        "sub": "cancelled",
        "bad": "failed",
    }


async def test_sub_workflow_steps_keep_their_own_queue_and_nest(api):
    client = await api(mode="all")
    grandchild = {"name": "grandchild", "steps": [manual("leaf")]}
    wf_id = await create(
        client, [step("sub", None, workflow=_child([step("mid", None, workflow=grandchild)]))]
    )
    child_id = await _child_id(client, wf_id)
    grandchild_id = await _child_id(client, child_id, "mid")
    leaf = await run_step(client, grandchild_id, "leaf", {"leaf": True})
    assert leaf["queue_name"] == "manual"
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"]["sub"] == {"mid": {"leaf": {"leaf": True}}}
    status, body = await get(client, f"/api/v1/workflows/{grandchild_id}")
    assert status == 200 and body["parent_workflow_id"] == child_id and body["parent_step_name"] == "mid"


async def test_sub_workflow_step_with_a_false_condition_spawns_no_child(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("sub", None, when={"path": "go", "value": True}, workflow=_child([step("inner")])),
            step("next", after=["sub"]),
        ],
        context={"go": False},
    )
    wf = await wait_status(client, wf_id, "completed")
    states = await steps(client, wf_id)
    assert states["sub"]["status"] == "skipped" and "child_workflow_id" not in states["sub"]
    assert states["next"]["status"] == "completed"
    _status, body = await get(client, "/api/v1/workflows?include_total=true")
    assert body["total"] == 1 and "sub" not in wf["context"]


async def test_cancelling_the_child_directly_fails_the_parent_step(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("sub", None, workflow=_child([manual("waits")])), step("next", after=["sub"])]
    )
    child_id = await _child_id(client, wf_id)
    status, _ = await post(client, f"/api/v1/workflows/{child_id}/cancel")
    assert status == 204
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"].startswith("step 'sub' failed: ")
    assert {n: s["status"] for n, s in (await steps(client, wf_id)).items()} == {
        "sub": "failed",
        "next": "cancelled",
    }


async def test_retrying_the_parent_spawns_a_fresh_child(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("before"), step("sub", None, after=["before"], workflow=_child([manual("flaky")]))]
    )
    first_child = await _child_id(client, wf_id)
    failing, token = await lease_step(client, first_child, "flaky")
    await fail(client, failing["id"], token, "first try")
    await wait_status(client, wf_id, "failed")
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/retry")
    assert status == 204

    async def fresh_child() -> str | None:
        child = (await steps(client, wf_id))["sub"].get("child_workflow_id")
        return child if child not in (None, first_child) else None

    second_child = await eventually(fresh_child, timeout=20)
    await run_step(client, second_child, "flaky", {"second": True})
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"]["sub"] == {"flaky": {"second": True}}
    assert (await workflow(client, first_child))["status"] == "failed"
