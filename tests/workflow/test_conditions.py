"""`when` conditions: every operator and combinator on the context when the step becomes ready; a
false condition skips the step (`condition not met`), its dependents proceed, and the workflow
still completes."""

from __future__ import annotations

from tests.workflow.helpers import create, lease, manual, run_step, step, step_jobs, steps, wait_status

CONTEXT = {
    "n": 5,
    "f": 2.5,
    "s": "hello",
    "flag": True,
    "tags": ["a", "b"],
    "obj": {"k": 1, "deep": {"x": "y"}},
}

# (condition, holds on CONTEXT)
CASES: list[tuple[dict, bool]] = [
    ({"path": "n", "op": "eq", "value": 5}, True),
    ({"path": "n", "op": "eq", "value": 6}, False),
    ({"path": "s", "value": "hello"}, True),  # eq is the default with a value
    ({"path": "obj.deep.x", "op": "eq", "value": "y"}, True),
    ({"path": "flag", "op": "eq", "value": 1}, False),  # JSON true is not the number 1
    ({"path": "n", "op": "ne", "value": 6}, True),
    ({"path": "n", "op": "ne", "value": 5}, False),
    ({"path": "n", "op": "gt", "value": 4}, True),
    ({"path": "n", "op": "gt", "value": 5}, False),
    ({"path": "n", "op": "gte", "value": 5}, True),
    ({"path": "n", "op": "gte", "value": 6}, False),
    ({"path": "f", "op": "lt", "value": 3}, True),
    ({"path": "n", "op": "lt", "value": 5}, False),
    ({"path": "n", "op": "lte", "value": 5}, True),
    ({"path": "f", "op": "lte", "value": 2}, False),
    ({"path": "obj.k"}, True),  # exists is the default without a value
    ({"path": "obj.deep", "op": "exists"}, True),
    ({"path": "missing", "op": "exists"}, False),
    ({"path": "obj.nope"}, False),
    ({"path": "s", "op": "contains", "value": "ell"}, True),
    ({"path": "s", "op": "contains", "value": "xyz"}, False),
    ({"path": "tags", "op": "contains", "value": "a"}, True),
    ({"path": "tags", "op": "contains", "value": "z"}, False),
    ({"path": "s", "op": "in", "value": ["hello", "bye"]}, True),
    ({"path": "n", "op": "in", "value": [1, 2, 3]}, False),
    ({"all": [{"path": "n", "op": "gt", "value": 1}, {"path": "s", "value": "hello"}]}, True),
    ({"all": [{"path": "n", "op": "gt", "value": 1}, {"path": "s", "value": "nope"}]}, False),
    ({"any": [{"path": "n", "op": "gt", "value": 100}, {"path": "flag", "value": True}]}, True),
    ({"any": [{"path": "n", "op": "gt", "value": 100}, {"path": "flag", "value": False}]}, False),
    ({"not": {"path": "n", "value": 5}}, False),
    ({"not": {"path": "missing"}}, True),
    (
        {
            "all": [
                {"any": [{"path": "missing"}, {"path": "tags", "op": "contains", "value": "b"}]},
                {"not": {"path": "s", "op": "in", "value": ["x"]}},
            ]
        },
        True,
    ),
]


async def test_every_operator_and_combinator_on_the_seeded_context(api):
    client = await api(mode="all")
    names = [f"c{i:02d}" for i in range(len(CASES))]
    wf_id = await create(
        client, [step(name, when=cond) for name, (cond, _) in zip(names, CASES, strict=True)], context=CONTEXT
    )
    wf = await wait_status(client, wf_id)
    states = await steps(client, wf_id)
    got = {name: states[name]["status"] for name in names}
    want = {
        name: ("completed" if holds else "skipped") for name, (_, holds) in zip(names, CASES, strict=True)
    }
    assert got == want, [(CASES[names.index(n)][0], got[n]) for n in names if got[n] != want[n]]
    for name, (_, holds) in zip(names, CASES, strict=True):
        if not holds:
            assert states[name]["error"] == "condition not met"
            assert "job_id" not in states[name]
    # Condition skips are not failures: the workflow completed, and skipped steps left no result.
    assert wf["status"] == "completed", wf
    assert "error_message" not in wf
    assert {n for n in names if n in wf["context"]} == {
        n for n, (_, h) in zip(names, CASES, strict=True) if h
    }
    assert {j["workflow_step_id"] for j in await step_jobs(client, wf_id)} == set(wf["context"]) - set(
        CONTEXT
    )


async def test_condition_reads_an_upstream_result_and_dependents_of_a_skipped_step_proceed(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            manual("validate"),
            step("ship", after=["validate"], when={"path": "validate.ok", "op": "eq", "value": True}),
            step("reject", after=["validate"], when={"path": "validate.ok", "op": "eq", "value": False}),
            manual("notify", after=["reject"]),
            step("audit", after=["ship", "reject"], when={"path": "validate.score", "op": "gte", "value": 7}),
        ],
    )
    # Evaluated when the step becomes ready, against the context as it is then.
    await run_step(client, wf_id, "validate", {"ok": True, "score": 7})
    notified = await run_step(client, wf_id, "notify", {"sent": True})
    assert "reject" not in notified["payload"]["_context"]
    assert notified["payload"]["_context"]["validate"] == {"ok": True, "score": 7}
    wf = await wait_status(client, wf_id)
    assert wf["status"] == "completed"
    states = await steps(client, wf_id)
    assert {n: s["status"] for n, s in states.items()} == {
        "validate": "completed",
        "ship": "completed",
        "reject": "skipped",
        "notify": "completed",
        "audit": "completed",
    }
    assert states["reject"]["error"] == "condition not met"
    assert set(wf["context"]) == {"validate", "ship", "notify", "audit"}
    assert await lease(client) == []


async def test_a_workflow_whose_every_step_is_condition_skipped_completes(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("a", when={"path": "go", "value": True}),
            step("b", after=["a"], when={"path": "go", "value": True}),
        ],
        context={"go": False},
    )
    wf = await wait_status(client, wf_id)
    assert wf["status"] == "completed"
    assert {s["status"] for s in (await steps(client, wf_id)).values()} == {"skipped"}
    assert await step_jobs(client, wf_id) == []


async def test_condition_skip_next_to_a_policy_failure_is_partially_failed(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("skipped", when={"path": "nothing"}),
            step("broken", "fail", payload={"permanent": True}, on_failure="continue"),
            step("fine", after=["skipped"]),
        ],
    )
    wf = await wait_status(client, wf_id)
    assert wf["status"] == "partially_failed"
    assert {n: s["status"] for n, s in (await steps(client, wf_id)).items()} == {
        "skipped": "skipped",
        "broken": "failed",
        "fine": "completed",
    }
