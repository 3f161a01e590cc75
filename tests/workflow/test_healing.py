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
    poison_condition,
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
    await poison_condition(client, poisoned, "b")
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


async def test_the_stalled_sweep_walks_the_live_workflows_in_bounded_passes(api):
    """A pass looks at a bounded window of live workflows, in creation order from where the last
    ended, so its cost does not grow with a million sleeping workflows; the passes go round and
    heal every stalled one, sleeping ones never."""
    from shared.db.workflows import heal_stalled

    client = await api()  # API only: nothing advances, nothing sweeps but this test
    pool = database_of(client).pool
    stalled = []
    for i in range(5):
        wf_id = await create(client, [manual("a")], name=f"stalled-{i}")
        await pool.execute("UPDATE queueflow.jobs SET status = 'cancelled' WHERE workflow_id = $1", wf_id)
        stalled.append(wf_id)
    sleeping = await create(client, [{"name": "nap", "sleep_secs": 3600}], name="sleeping")
    for wf_id in [*stalled, sleeping]:
        await _stall(pool, wf_id)
    # creation order, one workflow a microsecond apart
    for i, wf_id in enumerate([*stalled[:3], sleeping, *stalled[3:]]):
        await pool.execute(
            "UPDATE queueflow.workflows SET created_at = now() - interval '10 minutes'"
            " + make_interval(secs => $2 / 1e6) WHERE id = $1",
            wf_id,
            i,
        )

    healed_per_pass = []
    cursor = None
    for _ in range(3):
        healed, cursor = await heal_stalled(pool, 30, 2, cursor)
        healed_per_pass.append(healed)
    assert healed_per_pass == [2, 1, 2]  # (s0, s1), (s2, the sleeper), (s3, s4)
    assert cursor is not None
    assert await heal_stalled(pool, 30, 2, cursor) == (0, None)  # past the last: start over
    rows = await pool.fetch("SELECT workflow_id FROM queueflow.workflow_outbox WHERE kind = 'heal'")
    assert sorted(r["workflow_id"] for r in rows) == sorted(stalled)
    # The next round finds them all queued for the advancer already: nothing twice.
    healed, cursor = await heal_stalled(pool, 30, 10, None)
    assert (healed, cursor) == (0, None)
