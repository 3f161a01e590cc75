"""The advancer applies outbox rows a batch at a time (services/workflow/advancer.py): one
transaction locks and loads the batch's workflows, applies every row in order, and writes the step
completions and settlements of the whole batch with one statement. These tests pile rows up while
only the API runs (nothing advances), then start the workflow process, so the rows meet in batches,
and check that the outcome is what one transaction per row gives: every row applied exactly once,
two rows of one workflow both applied, sub-workflows telling their parents, and a row that cannot be
applied set aside alone while the rest of its batch goes through."""

from __future__ import annotations

import pytest

from services.workflow.advancer import BATCH
from tests.support.api import database_of
from tests.support.waiting import eventually
from tests.workflow.helpers import (
    MANUAL,
    complete,
    create,
    lease,
    manual,
    poison_condition,
    statuses,
    steps,
    wait_status,
    workflow,
)

pytestmark = pytest.mark.xdist_group("workflow-batched")


async def test_more_sleeps_than_a_batch_wake_at_once_and_each_schedules_its_next_step_once(api):
    client = await api()  # API only: the sleeps are armed, nothing wakes them yet
    pool = database_of(client).pool
    n = BATCH * 2 + 17
    body = [{"name": "nap", "sleep_secs": 3600}, manual("next", after=["nap"])]
    ids = [await create(client, body, name=f"sleeper-{i}") for i in range(n)]
    # A parent whose sub-workflow is one sleep: the child settles inside a batch and must tell it.
    parent = await create(
        client,
        [{"name": "child", "workflow": {"name": "inner", "steps": [{"name": "nap", "sleep_secs": 3600}]}}],
        name="parent",
    )
    await pool.execute("UPDATE queueflow.workflow_steps SET wake_at = now() WHERE wake_at IS NOT NULL")

    await api(mode="workflow")  # its timers find every wake-up due at start

    for wf_id in ids:
        await _wait_scheduled(client, wf_id, "next")
        assert statuses(await steps(client, wf_id)) == {"nap": "completed", "next": "running"}
    rows = await pool.fetch(
        "SELECT w.id, count(j.id) AS jobs, w.context ? 'nap' AS merged"
        " FROM queueflow.workflows w LEFT JOIN queueflow.jobs j ON j.workflow_id = w.id"
        " WHERE w.name LIKE 'sleeper-%' GROUP BY w.id"
    )
    assert len(rows) == n
    assert {(r["jobs"], r["merged"]) for r in rows} == {(1, True)}  # one next job each, result merged
    leased = await lease(client, MANUAL, max_jobs=100)
    assert leased and {job["workflow_step_id"] for job, _ in leased} == {"next"}
    job, _ = leased[0]
    assert "slept_until" in job["payload"]["_context"]["nap"]

    done = await wait_status(client, parent, "completed")
    assert "child" in done["context"]


async def test_two_outcomes_of_one_workflow_in_one_batch_both_apply(api):
    client = await api()
    wf_ids = [
        await create(client, [manual("a"), manual("b"), manual("c", after=["a", "b"])], name=f"pair-{i}")
        for i in range(5)
    ]
    leased = await lease(client, MANUAL, max_jobs=10)
    assert len(leased) == 10
    for job, token in leased:  # both outcomes of each workflow wait in the outbox together
        await complete(client, job["id"], token, {"from": job["workflow_step_id"]})

    await api(mode="workflow")

    for wf_id in wf_ids:
        await _wait_scheduled(client, wf_id, "c")
        wf = await workflow(client, wf_id)
        assert wf["context"] == {"a": {"from": "a"}, "b": {"from": "b"}}
        assert statuses(await steps(client, wf_id)) == {"a": "completed", "b": "completed", "c": "running"}


async def test_a_row_that_cannot_be_applied_is_set_aside_alone_and_its_batch_goes_through(api):
    client = await api()
    pool = database_of(client).pool
    poisoned = await create(
        client, [manual("a"), manual("b", after=["a"], when={"path": "x", "op": "exists"})], name="poisoned"
    )
    await poison_condition(client, poisoned, "b")
    healthy = [await create(client, [manual("a"), manual("b", after=["a"])], name=f"h{i}") for i in range(8)]
    for job, token in await lease(client, MANUAL, max_jobs=20):
        await complete(client, job["id"], token)
    outbox = await pool.fetchval("SELECT count(*) FROM queueflow.workflow_outbox")
    assert outbox == 9  # every outcome waits: they will be taken as one batch

    await api(mode="workflow")

    failed = await wait_status(client, poisoned, "failed")
    assert failed["error_message"].startswith("workflow advancement failed: RecursionError")
    for wf_id in healthy:
        await _wait_scheduled(client, wf_id, "b")
    left = await pool.fetch("SELECT workflow_id, attempts FROM queueflow.workflow_outbox")
    assert [(r["workflow_id"], r["attempts"]) for r in left] == [(poisoned, 5)]


async def _wait_scheduled(client, wf_id: str, name: str) -> None:
    async def scheduled() -> bool | None:
        return (await steps(client, wf_id))[name]["status"] == "running" or None

    await eventually(scheduled, timeout=20, interval=0.05, message=f"{name} of {wf_id} scheduled")


async def test_a_wake_up_that_cannot_be_applied_goes_through_the_outbox_and_the_rest_wake(api):
    """The timers apply due wake-ups in batches where they take them; a batch that raises rolls
    back and its wake-ups become `timer` outbox rows, where the bad one is counted and set aside
    alone."""
    client = await api()
    pool = database_of(client).pool
    nap = {"name": "nap", "sleep_secs": 3600}
    poisoned = await create(
        client, [nap, manual("b", after=["nap"], when={"path": "x", "op": "exists"})], name="poisoned-nap"
    )
    await poison_condition(client, poisoned, "b")
    healthy = [await create(client, [nap, manual("b", after=["nap"])], name=f"n{i}") for i in range(6)]
    await pool.execute("UPDATE queueflow.workflow_steps SET wake_at = now() WHERE wake_at IS NOT NULL")

    await api(mode="workflow")

    failed = await wait_status(client, poisoned, "failed")
    assert failed["error_message"].startswith("workflow advancement failed: RecursionError")
    for wf_id in healthy:
        await _wait_scheduled(client, wf_id, "b")
        assert statuses(await steps(client, wf_id)) == {"nap": "completed", "b": "running"}
    left = await pool.fetch("SELECT workflow_id, kind, attempts FROM queueflow.workflow_outbox")
    assert [(r["workflow_id"], r["kind"], r["attempts"]) for r in left] == [(poisoned, "timer", 5)]


async def test_a_taken_wake_up_that_applying_lets_pass_is_cleared_not_taken_again(api):
    """A lane locks due steps without writing them and applies them; a wake-up its workflow lets
    pass (here: a workflow already ended, whose step was left running) is cleared after applying,
    so the timers neither take it again nor spin on it, and the other wake-ups of the batch apply."""
    client = await api()
    pool = database_of(client).pool
    nap = {"name": "nap", "sleep_secs": 3600}
    orphan = await create(client, [nap], name="ended-with-a-sleeper")
    await pool.execute(
        "UPDATE queueflow.workflows SET status = 'completed', completed_at = now() WHERE id = $1", orphan
    )
    others = [await create(client, [nap, manual("b", after=["nap"])], name=f"o{i}") for i in range(3)]
    await pool.execute("UPDATE queueflow.workflow_steps SET wake_at = now() WHERE wake_at IS NOT NULL")
    outbox_rows = "SELECT last_value + is_called::int FROM queueflow.workflow_outbox_id_seq"
    before = await pool.fetchval(outbox_rows)

    await api(mode="workflow")

    for wf_id in others:
        await _wait_scheduled(client, wf_id, "b")

    async def cleared() -> bool:
        return await pool.fetchval(
            "SELECT wake_at IS NULL FROM queueflow.workflow_steps WHERE workflow_id = $1", orphan
        )

    await eventually(cleared, message="the orphan's wake-up was cleared")
    row = await pool.fetchrow(
        "SELECT status, attempt FROM queueflow.workflow_steps WHERE workflow_id = $1", orphan
    )
    assert (row["status"], row["attempt"]) == ("running", 1)  # nothing else was written to it
    # Applied where it was taken: never handed to the outbox (as a wake-up left due would be).
    assert await pool.fetchval(outbox_rows) == before
