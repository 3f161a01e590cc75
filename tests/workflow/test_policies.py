"""Failure policies (halt, skip, continue), final statuses, and cancellation: of the workflow, of
one step's job directly, and of siblings by a halt."""

from __future__ import annotations

from tests.support.waiting import eventually
from tests.workflow.helpers import (
    complete,
    count_rows,
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
    wait_step,
    wait_step_job,
    workflow,
)


async def test_halt_fails_the_workflow_and_cancels_everything_unfinished(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("a"),
            manual("b", after=["a"]),
            manual("c", after=["b"]),
            manual("d", after=["c"]),
        ],
    )
    failing, token = await lease_step(client, wf_id, "b")
    await fail(client, failing["id"], token, "card declined")
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"] == "step 'b' failed: card declined"
    states = await steps(client, wf_id)
    assert statuses(states) == {"a": "completed", "b": "failed", "c": "cancelled", "d": "cancelled"}
    assert "card declined" in states["b"]["error"]
    assert [j["workflow_step_id"] for j in await step_jobs(client, wf_id)] == ["a", "b"]
    assert wf["context"] == {"a": {"echoed": True}}


async def test_halt_is_the_default_policy_and_applies_after_retries_run_out(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            manual("a", config={"max_retries": 1, "retry_delay_secs": 0, "jitter_factor": 0.0}),
            manual("b", after=["a"]),
        ],
    )
    first, token = await lease_step(client, wf_id, "a")
    await fail(client, first["id"], token, "transient", retryable=True)
    assert (await job(client, first["id"]))["status"] == "retrying"
    # A retryable failure is not the step's failure: the step is still in progress.
    assert (await steps(client, wf_id))["a"]["status"] == "running"
    assert (await workflow(client, wf_id))["status"] == "running"
    [(again, token2)] = await eventually(lambda: lease(client), timeout=10)
    assert again["id"] == first["id"] and again["retry_count"] == 1
    await fail(client, again["id"], token2, "still broken", retryable=True)
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"] == "step 'a' failed: still broken"
    assert statuses(await steps(client, wf_id)) == {"a": "failed", "b": "cancelled"}


async def test_halt_cancels_an_already_enqueued_sibling_job_which_never_runs(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [manual("a"), step("b", "remote", queue="manual2"), manual("c", after=["b"])]
    )
    sibling_job = await wait_step_job(client, wf_id, "b")
    first, token = await lease_step(client, wf_id, "a")
    assert (await job(client, sibling_job))["status"] == "pending"
    await fail(client, first["id"], token, "nope")
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"] == "step 'a' failed: nope"
    assert (await job(client, sibling_job))["status"] == "cancelled"
    assert await lease(client, "manual2", max_jobs=10) == []
    assert await lease(client, max_jobs=10) == []
    assert statuses(await steps(client, wf_id)) == {"a": "failed", "b": "cancelled", "c": "cancelled"}
    assert len(await step_jobs(client, wf_id)) == 2


async def test_halt_cancels_a_running_sibling_whose_next_heartbeat_answers_cancelled(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("slow"), manual("bad", after=["gate"]), step("gate")])
    slow, slow_token = await lease_step(client, wf_id, "slow")
    bad, bad_token = await lease_step(client, wf_id, "bad")
    status, body = await heartbeat(client, slow["id"], slow_token)
    assert status == 200 and body == {"status": "running"}
    await fail(client, bad["id"], bad_token, "kaput")
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"] == "step 'bad' failed: kaput"
    status, body = await heartbeat(client, slow["id"], slow_token)
    assert status == 200 and body == {"status": "cancelled"}
    assert (await job(client, slow["id"]))["status"] == "cancelled"
    states = await steps(client, wf_id)
    assert statuses(states) == {"slow": "cancelled", "bad": "failed", "gate": "completed"}
    # A late completion from the cancelled worker changes nothing.
    status, _ = await post(
        client, f"/api/v1/jobs/{slow['id']}/complete", {"lease_token": slow_token, "result": {}}
    )
    assert status in (204, 409)
    assert (await job(client, slow["id"]))["status"] == "cancelled"
    assert (await workflow(client, wf_id))["status"] == "failed"
    assert statuses(await steps(client, wf_id)) == statuses(states)


async def test_continue_runs_the_dependents_and_ends_partially_failed(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("a"),
            manual("b", after=["a"], on_failure="continue"),
            manual("c", after=["b"]),
            step("d", after=["c"]),
            step("x", after=["a"]),
        ],
    )
    failing, token = await lease_step(client, wf_id, "b")
    await fail(client, failing["id"], token, "soft error")
    dependent = await run_step(client, wf_id, "c", {"ran": True})
    # The dependent ran without a result of the failed step.
    assert "a" in dependent["payload"]["_context"] and "b" not in dependent["payload"]["_context"]
    wf = await wait_status(client, wf_id, "partially_failed")
    states = await steps(client, wf_id)
    assert statuses(states) == {
        "a": "completed",
        "b": "failed",
        "c": "completed",
        "d": "completed",
        "x": "completed",
    }
    assert "soft error" in states["b"]["error"]
    assert "b" not in wf["context"] and wf["context"]["c"] == {"ran": True}


async def test_skip_fails_the_step_skips_its_dependents_and_unrelated_branches_run(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("a"),
            manual("b", after=["a"], on_failure="skip"),
            step("c", after=["b"]),
            step("e", after=["c"]),
            step("f", after=["b", "x"]),
            manual("x", after=["a"]),
            step("y", after=["x"]),
        ],
    )
    failing, token = await lease_step(client, wf_id, "b")
    await fail(client, failing["id"], token, "bad input")
    for name in ("c", "e"):
        await wait_step(client, wf_id, name, "skipped")
    # The unrelated branch is still live, and runs to completion after the failure.
    assert (await workflow(client, wf_id))["status"] == "running"
    await run_step(client, wf_id, "x", {"x": 1})
    wf = await wait_status(client, wf_id, "partially_failed")
    assert wf["error_message"]  # names what did not complete
    states = await steps(client, wf_id)
    assert statuses(states) == {
        "a": "completed",
        "b": "failed",
        "c": "skipped",
        "e": "skipped",
        "f": "skipped",
        "x": "completed",
        "y": "completed",
    }
    for name in ("c", "e", "f"):
        assert "job_id" not in states[name]
    assert {j["workflow_step_id"] for j in await step_jobs(client, wf_id)} == {"a", "b", "x", "y"}


async def test_a_failed_workflow_is_failed_when_nothing_completed(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("only", "fail", payload={"permanent": True, "message": "x"}, on_failure="continue")]
    )
    wf = await wait_status(client, wf_id)
    assert wf["status"] == "failed"
    assert statuses(await steps(client, wf_id)) == {"only": "failed"}


async def test_builtin_fail_task_halts_with_its_message(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("ok"),
            step("boom", "fail", after=["ok"], payload={"permanent": True, "message": "exploded"}),
            step("after", after=["boom"]),
        ],
    )
    wf = await wait_status(client, wf_id)
    assert wf["status"] == "failed"
    assert wf["error_message"] == "step 'boom' failed: exploded"
    assert statuses(await steps(client, wf_id)) == {"ok": "completed", "boom": "failed", "after": "cancelled"}


# --- cancellation --------------------------------------------------------------------------------


async def test_cancel_workflow_cancels_its_pending_step_job_which_is_never_claimed(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a"), manual("b", after=["a"])])
    job_id = await wait_step_job(client, wf_id, "a")
    status, body = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204, body
    wf = await workflow(client, wf_id)
    assert wf["status"] == "cancelled" and "completed_at" in wf
    assert (await job(client, job_id))["status"] == "cancelled"
    assert await lease(client, max_jobs=10) == []
    assert statuses(await steps(client, wf_id)) == {"a": "cancelled", "b": "cancelled"}
    # The advancer processes the job's cancellation without reviving anything.
    await eventually(lambda: _outbox_empty(client), timeout=10)
    assert (await workflow(client, wf_id))["status"] == "cancelled"
    assert len(await step_jobs(client, wf_id)) == 1


async def _outbox_empty(client) -> bool:
    return await count_rows(client, "workflow_outbox") == 0


async def test_cancel_workflow_reaches_a_running_step_at_its_next_heartbeat(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a")])
    running, token = await lease_step(client, wf_id, "a")
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204
    status, body = await heartbeat(client, running["id"], token)
    assert status == 200 and body == {"status": "cancelled"}
    await post(
        client, f"/api/v1/jobs/{running['id']}/complete", {"lease_token": token, "result": {"late": 1}}
    )
    wf = await workflow(client, wf_id)
    assert wf["status"] == "cancelled" and "a" not in wf["context"]


async def test_cancelling_a_step_job_directly_settles_the_workflow_by_halt(api):
    client = await api(mode="all")
    wf_id = await create(client, [step("a"), manual("b", after=["a"]), manual("c", after=["b"])])
    job_id = await wait_step_job(client, wf_id, "b")
    status, _ = await post(client, f"/api/v1/jobs/{job_id}/cancel")
    assert status == 204
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"].startswith("step 'b' failed: ")
    assert statuses(await steps(client, wf_id)) == {"a": "completed", "b": "failed", "c": "cancelled"}
    assert await lease(client, max_jobs=10) == []


async def test_cancelling_a_step_job_directly_applies_the_continue_policy(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("a"), manual("b", after=["a"], on_failure="continue"), step("c", after=["b"])]
    )
    job_id = await wait_step_job(client, wf_id, "b")
    status, _ = await post(client, f"/api/v1/jobs/{job_id}/cancel")
    assert status == 204
    await wait_status(client, wf_id, "partially_failed")
    assert statuses(await steps(client, wf_id)) == {"a": "completed", "b": "failed", "c": "completed"}


async def test_cancelling_a_running_step_job_directly_applies_the_skip_policy(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("b", on_failure="skip"), step("c", after=["b"]), step("x")])
    running, token = await lease_step(client, wf_id, "b")
    status, _ = await post(client, f"/api/v1/jobs/{running['id']}/cancel")
    assert status == 204
    await wait_status(client, wf_id, "partially_failed")
    assert statuses(await steps(client, wf_id)) == {"b": "failed", "c": "skipped", "x": "completed"}
    status, body = await heartbeat(client, running["id"], token)
    assert status == 200 and body == {"status": "cancelled"}
    await complete_quietly(client, running["id"], token)
    assert statuses(await steps(client, wf_id))["b"] == "failed"


async def complete_quietly(client, job_id: str, token: str) -> None:
    status, _ = await post(client, f"/api/v1/jobs/{job_id}/complete", {"lease_token": token, "result": {}})
    assert status in (204, 409)


async def test_cancel_before_any_advancer_runs_cancels_the_scheduled_root_and_the_rest(api):
    client = await api()  # no advancer: only what the create itself scheduled exists
    wf_id = await create(client, [step("a"), step("b", after=["a"])])
    assert (await workflow(client, wf_id))["status"] == "running"
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204
    assert (await workflow(client, wf_id))["status"] == "cancelled"
    # An advancer and a worker that start afterwards never run anything of it.
    later = await api(mode="all")
    await eventually(lambda: _outbox_empty(later), timeout=10)
    assert [(j["workflow_step_id"], j["status"]) for j in await step_jobs(later, wf_id)] == [
        ("a", "cancelled")
    ]
    assert statuses(await steps(client, wf_id)) == {"a": "cancelled", "b": "cancelled"}


async def test_completed_result_of_a_finished_step_is_kept_after_cancel(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a"), manual("b", after=["a"])])
    first, token = await lease_step(client, wf_id, "a")
    await complete(client, first["id"], token, {"kept": True})
    await wait_step_job(client, wf_id, "b")
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204
    wf = await workflow(client, wf_id)
    assert wf["status"] == "cancelled" and wf["context"] == {"a": {"kept": True}}
    assert statuses(await steps(client, wf_id)) == {"a": "completed", "b": "cancelled"}
