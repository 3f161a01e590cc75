"""The janitor's self-heal: a live workflow that nothing can move any more (no pending outbox row,
no live job, no live child) is re-evaluated and runs to completion. The states are built with SQL
while no advancer runs, as a crash or a lost event would leave them."""

from __future__ import annotations

from tests.support.api import database_of
from tests.workflow.helpers import (
    create,
    lease,
    lease_step,
    manual,
    post,
    step,
    step_jobs,
    steps,
    wait_status,
    wait_step_job,
)


async def _stall(pool, wf_id: str) -> None:
    """No outbox row left for the workflow, and old enough for the stalled-workflow sweep."""
    await pool.execute("DELETE FROM queueflow.workflow_outbox WHERE workflow_id = $1", wf_id)
    await pool.execute(
        "UPDATE queueflow.workflows SET created_at = now() - interval '10 minutes' WHERE id = $1", wf_id
    )


async def test_janitor_advances_a_stalled_workflow_whose_dependents_were_never_enqueued(api):
    client = await api()  # API only: the root step is scheduled, nothing advances after that
    pool = database_of(client).pool
    wf_id = await create(client, [step("a"), step("b", after=["a"]), step("c", after=["b"])])
    # As if step a's job completed and the process died before its outcome reached the advancer.
    await pool.execute(
        """UPDATE queueflow.jobs SET status = 'completed', completed_at = now(), result = '{"done": true}'"""
        " WHERE workflow_id = $1",
        wf_id,
    )
    await pool.execute(
        """UPDATE queueflow.workflows SET context = '{"a": {"done": true}}'::jsonb WHERE id = $1""", wf_id
    )
    await pool.execute(
        "UPDATE queueflow.workflow_steps SET status = 'completed', completed_at = now()"
        " WHERE workflow_id = $1 AND name = 'a'",
        wf_id,
    )
    await _stall(pool, wf_id)

    await api(mode="all", janitor_interval_secs=0.2)
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"] == {"a": {"done": True}, "b": {"echoed": True}, "c": {"echoed": True}}
    assert [j["workflow_step_id"] for j in await step_jobs(client, wf_id)] == ["a", "b", "c"]


async def test_janitor_heals_a_finished_step_job_whose_outcome_was_never_applied(api):
    client = await api()
    advancer = await api(mode="workflow")
    pool = database_of(client).pool
    wf_id = await create(client, [manual("a"), step("b", after=["a"])])
    await wait_step_job(client, wf_id, "a")
    await advancer.close()  # the advancer goes away ...
    job, token = await lease_step(client, wf_id, "a")
    status = await pool.execute(
        "UPDATE queueflow.jobs SET status = 'completed', result = '{\"r\": 1}'::jsonb, completed_at = now(),"
        " locked_until = NULL WHERE id = $1::uuid AND lease_token = $2::uuid",
        job["id"],
        token,
    )
    assert status == "UPDATE 1"
    await _stall(pool, wf_id)  # ... and the outcome's event is lost with it
    assert (await steps(client, wf_id))["a"]["status"] == "running"

    await api(mode="all", janitor_interval_secs=0.2)
    wf = await wait_status(client, wf_id, "completed", timeout=10)
    assert wf["context"] == {"a": {"r": 1}, "b": {"echoed": True}}
    assert {n: s["status"] for n, s in (await steps(client, wf_id)).items()} == {
        "a": "completed",
        "b": "completed",
    }


async def test_an_event_that_can_never_be_applied_fails_its_workflow_after_five_attempts(api):
    """A poison outbox row (here: a stored condition nested far deeper than any request may be, so
    reading it raises RecursionError) is retried five times, then its workflow ends failed, naming
    the error; it never blocks the outbox for other workflows."""
    client = await api()  # API only: root steps are scheduled, nothing advances after that
    pool = database_of(client).pool
    poisoned = await create(
        client, [manual("a"), step("b", after=["a"], when={"path": "x", "op": "exists"})], name="poisoned"
    )
    deep = '{"not": ' * 3000 + '{"path": "x", "op": "exists"}' + "}" * 3000
    await pool.execute(
        "UPDATE queueflow.workflow_steps SET definition = jsonb_set(definition, '{when}', $2::text::jsonb)"
        " WHERE workflow_id = $1 AND name = 'b'",
        poisoned,
        deep,
    )
    healthy = await create(client, [step("a"), step("b", after=["a"])], name="healthy")

    await api(mode="all")
    # a's outcome is the event that cannot be applied. (Leased straight off its queue: the API
    # cannot read this workflow's steps either, with that definition stored.)
    [(job, token)] = await lease(client, wait_secs=5)
    status, _ = await post(client, f"/api/v1/jobs/{job['id']}/complete", {"lease_token": token})
    assert status == 204
    wf = await wait_status(client, poisoned, "failed")
    assert wf["error_message"].startswith("workflow advancement failed: RecursionError"), wf["error_message"]
    assert (await wait_status(client, healthy, "completed"))["context"] == {
        "a": {"echoed": True},
        "b": {"echoed": True},
    }
    # (Read with SQL: the API cannot decode that stored condition either.)
    rows = await pool.fetch(
        "SELECT name, status FROM queueflow.workflow_steps WHERE workflow_id = $1", poisoned
    )
    assert {r["name"]: r["status"] for r in rows} == {"a": "cancelled", "b": "cancelled"}
    left_aside = await pool.fetch(
        "SELECT attempts, last_error FROM queueflow.workflow_outbox WHERE workflow_id = $1", poisoned
    )
    assert [(r["attempts"], r["last_error"].split(":")[0]) for r in left_aside] == [(5, "RecursionError")]
