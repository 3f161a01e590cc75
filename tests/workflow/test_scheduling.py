"""Scheduling: dependency order (linear, diamond), the context each step sees, fan-in exactly once,
the write order of a step's result and its completion, and per-step queues."""

from __future__ import annotations

import asyncio

from tests.support.api import database_of
from tests.support.waiting import eventually
from tests.workflow.helpers import (
    MANUAL,
    complete,
    create,
    job,
    lease,
    lease_step,
    manual,
    post,
    run_step,
    step,
    step_jobs,
    steps,
    wait_status,
    wait_step,
    wait_step_job,
    workflow,
)


async def test_linear_workflow_runs_each_step_only_after_the_previous_completed(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a"), manual("b", after=["a"]), manual("c", after=["b"])])
    for name, later in (("a", ["b", "c"]), ("b", ["c"]), ("c", [])):
        await wait_step_job(client, wf_id, name)
        states = await steps(client, wf_id)
        for other in later:
            assert states[other]["status"] == "pending" and "job_id" not in states[other], states
        job_, token = await lease_step(client, wf_id, name)
        assert await lease(client) == []  # nothing else is runnable meanwhile
        await complete(client, job_["id"], token, {"step": name})
        await wait_step(client, wf_id, name, "completed")
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"] == {"a": {"step": "a"}, "b": {"step": "b"}, "c": {"step": "c"}}
    assert "error_message" not in wf
    assert {s["status"] for s in (await steps(client, wf_id)).values()} == {"completed"}


async def test_linear_echo_workflow_completes_with_in_process_workers(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("a", payload={"n": 1}),
            step("b", after=["a"], payload={"n": 2}),
            step("c", after=["b"], payload={"n": 3}),
        ],
    )
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"] == {name: {"n": n, "echoed": True} for name, n in (("a", 1), ("b", 2), ("c", 3))}
    jobs = await step_jobs(client, wf_id)
    assert [j["workflow_step_id"] for j in jobs] == ["a", "b", "c"]
    assert all(j["status"] == "completed" for j in jobs)


async def test_diamond_runs_both_branches_and_joins_only_after_both(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [manual("a"), manual("b", after=["a"]), manual("c", after=["a"]), manual("d", after=["b", "c"])],
    )
    await run_step(client, wf_id, "a", {"v": "a"})
    await wait_step_job(client, wf_id, "b")
    await wait_step_job(client, wf_id, "c")
    leased = await lease(client, max_jobs=10)
    assert sorted(j["workflow_step_id"] for j, _ in leased) == ["b", "c"]
    by_step = {j["workflow_step_id"]: (j, t) for j, t in leased}
    await complete(client, by_step["b"][0]["id"], by_step["b"][1], {"v": "b"})
    await wait_step(client, wf_id, "b", "completed")
    states = await steps(client, wf_id)
    assert states["d"]["status"] == "pending" and "job_id" not in states["d"]
    assert (await workflow(client, wf_id))["status"] == "running"
    await complete(client, by_step["c"][0]["id"], by_step["c"][1], {"v": "c"})
    await run_step(client, wf_id, "d", {"v": "d"})
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"] == {n: {"v": n} for n in "abcd"}


async def test_step_payload_carries_the_context_under_underscore_context(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            manual("validate", payload={"order_id": 123}),
            manual("charge", after=["validate"], payload={"amount": 5, "_context": "overwritten"}),
        ],
        context={"source": "web"},
    )
    first, token = await lease_step(client, wf_id, "validate")
    assert first["payload"] == {"order_id": 123, "_context": {"source": "web"}}
    await complete(client, first["id"], token, {"valid": True, "score": 0.9})
    second = await run_step(client, wf_id, "charge", {"charged": 5})
    assert second["payload"] == {
        "amount": 5,
        "_context": {"source": "web", "validate": {"valid": True, "score": 0.9}},
    }
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"] == {
        "source": "web",
        "validate": {"valid": True, "score": 0.9},
        "charge": {"charged": 5},
    }


async def test_root_step_of_an_empty_context_gets_no_context_key(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a", payload={"x": 1}), manual("b", after=["a"])])
    first = await run_step(client, wf_id, "a", {"r": 1})
    assert first["payload"] == {"x": 1}
    second = await run_step(client, wf_id, "b")
    assert second["payload"] == {"_context": {"a": {"r": 1}}}
    await wait_status(client, wf_id, "completed")


async def test_join_receives_the_context_of_all_its_dependencies(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("a", payload={"from": "a"}),
            step("b", after=["a"], payload={"from": "b"}),
            step("c", after=["a"], payload={"from": "c"}),
            step("x", payload={"from": "x"}),
            manual("join", after=["b", "c", "x"], payload={"mine": True}),
        ],
        context={"seed": 1},
    )
    joined = await run_step(client, wf_id, "join", {"joined": True})
    assert joined["payload"] == {
        "mine": True,
        "_context": {
            "seed": 1,
            "a": {"from": "a", "echoed": True},
            "b": {"from": "b", "echoed": True},
            "c": {"from": "c", "echoed": True},
            "x": {"from": "x", "echoed": True},
        },
    }
    await wait_status(client, wf_id, "completed")


async def test_fan_in_join_runs_exactly_once_when_its_dependencies_finish_together(api):
    client = await api(mode="all")
    roots = [f"r{i}" for i in range(6)]
    wf_ids = [
        await create(client, [*(manual(r) for r in roots), manual("join", after=roots)]) for _ in range(15)
    ]

    async def all_roots_leased() -> list:
        got.extend(await lease(client, max_jobs=100))
        return got if len(got) == len(roots) * len(wf_ids) else None

    got: list = []
    leased = await eventually(all_roots_leased, timeout=20)
    # Every root of every workflow finishes at (nearly) the same moment: several advancer consumers
    # race to schedule the joins.
    await asyncio.gather(*(complete(client, j["id"], t, {"root": j["workflow_step_id"]}) for j, t in leased))

    joins: list = []

    async def all_joins_leased() -> list | None:
        joins.extend(await lease(client, max_jobs=100))
        return joins if len(joins) >= len(wf_ids) else None

    await eventually(all_joins_leased, timeout=20)
    assert sorted(j["workflow_id"] for j, _ in joins) == sorted(wf_ids)
    await asyncio.gather(*(complete(client, j["id"], t) for j, t in joins))
    for wf_id in wf_ids:
        wf = await wait_status(client, wf_id, "completed")
        assert set(wf["context"]) == {*roots, "join"}
        assert len(await step_jobs(client, wf_id, "join")) == 1
    counts = await database_of(client).pool.fetch(
        "SELECT workflow_id, workflow_step_id, count(*) AS n FROM queueflow.jobs"
        " GROUP BY 1, 2 HAVING count(*) <> 1"
    )
    assert counts == []
    assert await lease(client, max_jobs=100) == []


async def test_a_steps_result_is_in_the_context_when_the_step_is_completed(api, db):
    """Write-order probe: a trigger records, at the moment each step row turns `completed`, whether
    the workflow's context already holds that step's result (same transaction, so it sees the
    writes made before the status write and none after)."""
    await db.execute("""
        CREATE TABLE public.write_order_probe (workflow_id text, step text, had_result boolean, context jsonb);
        CREATE FUNCTION public.probe_step_completed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.write_order_probe
            SELECT NEW.workflow_id, NEW.name, w.context ? NEW.name, w.context
            FROM queueflow.workflows w WHERE w.id = NEW.workflow_id;
            RETURN NULL;
        END $$;
        CREATE TRIGGER probe_step_completed AFTER UPDATE OF status ON queueflow.workflow_steps
            FOR EACH ROW WHEN (NEW.status = 'completed' AND OLD.status IS DISTINCT FROM NEW.status)
            EXECUTE FUNCTION public.probe_step_completed();
    """)
    client = await api(mode="all")
    shape = [
        step("a"),
        step("b", after=["a"]),
        step("c", after=["a"]),
        step("d", after=["b", "c"]),
        step("fan", after=["d"], fan_out={"path": "items"}),
        step("e", after=["fan"]),
    ]
    wf_ids = [await create(client, shape, context={"items": [1, 2, 3]}) for _ in range(5)]
    for wf_id in wf_ids:
        await wait_status(client, wf_id, "completed")
    rows = await db.fetch("SELECT * FROM public.write_order_probe")
    assert sorted((r["workflow_id"], r["step"]) for r in rows) == sorted(
        (w, s["name"]) for w in wf_ids for s in shape
    )
    assert [dict(r) for r in rows if not r["had_result"]] == []


async def test_per_step_queue_routes_the_step_job(api):
    client = await api(mode="all", queues=("default", "images"))
    wf_id = await create(
        client,
        [
            step("thumb", queue="images", payload={"w": 64}),
            step("notify", after=["thumb"]),
            manual("review", after=["notify"]),
        ],
    )
    await wait_step_job(client, wf_id, "review")
    # The manual step is on its own queue only: the default queue has nothing of it.
    assert await lease(client, "default", max_jobs=10) == []
    await run_step(client, wf_id, "review")
    await wait_status(client, wf_id, "completed")
    queues = {j["workflow_step_id"]: j["queue_name"] for j in await step_jobs(client, wf_id)}
    assert queues == {"thumb": "images", "notify": "default", "review": MANUAL}
    thumb = (await steps(client, wf_id))["thumb"]
    assert (await job(client, thumb["job_id"]))["queue_name"] == "images"


async def test_step_job_carries_workflow_ids_metadata_and_config(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [manual("a", metadata={"team": "ops"}, config={"max_retries": 1, "priority": 7})]
    )
    leased, token = await lease_step(client, wf_id, "a")
    assert leased["workflow_id"] == wf_id and leased["workflow_step_id"] == "a"
    assert leased["metadata"] == {"team": "ops"}
    assert leased["config"]["max_retries"] == 1 and leased["config"]["priority"] == 7
    assert leased["tenant_id"] == (await workflow(client, wf_id))["tenant_id"]
    assert "idempotency_key" not in leased
    await complete(client, leased["id"], token)
    await wait_status(client, wf_id, "completed")


async def test_create_answers_with_the_root_steps_already_scheduled(api):
    # No advancer runs: whatever is scheduled when the 201 arrives was scheduled by the create.
    client = await api()
    status, body = await post(
        client,
        "/api/v1/workflows",
        {"name": "w", "steps": [step("a"), step("b"), step("c", after=["a", "b"])]},
    )
    assert status == 201 and body["status"] == "running"
    wf_id = body["workflow_id"]
    assert (await workflow(client, wf_id))["status"] == "running"
    states = await steps(client, wf_id)
    assert {name: (s["status"], "job_id" in s) for name, s in states.items()} == {
        "a": ("running", True),
        "b": ("running", True),
        "c": ("pending", False),
    }
    assert [j["workflow_step_id"] for j in await step_jobs(client, wf_id)] == ["a", "b"]
