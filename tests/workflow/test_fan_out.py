"""Dynamic fan-out: one job per element of a context array, results in element order, progress in
the step state, failures settled after every child finished, empty arrays, max_items."""

from __future__ import annotations

import asyncio
import random

from tests.support.waiting import eventually
from tests.workflow.helpers import (
    complete,
    create,
    fail,
    lease,
    manual,
    run_step,
    step,
    step_jobs,
    steps,
    wait_status,
    workflow,
)

N = 100


async def _lease_all(client, count: int) -> list[tuple[dict, str]]:
    got: list[tuple[dict, str]] = []

    async def everything() -> list | None:
        got.extend(await lease(client, max_jobs=100))
        return got if len(got) >= count else None

    await eventually(everything, timeout=20)
    assert len(got) == count
    return got


async def _progress(client, wf_id: str, name: str = "fan") -> dict:
    return (await steps(client, wf_id))[name].get("fan_out", {})


async def test_fan_out_of_100_all_succeeding_keeps_element_order_and_counts_progress(api):
    client = await api(mode="all")
    items = [{"sku": f"s{i}", "qty": i} for i in range(N)]
    wf_id = await create(
        client,
        [
            manual("fan", fan_out={"path": "order.items", "item_key": "line"}, payload={"warehouse": "w1"}),
            manual("total", after=["fan"]),
        ],
        context={"order": {"items": items}},
    )
    children = await _lease_all(client, N)
    by_index = {j["payload"]["_index"]: (j, t) for j, t in children}
    assert sorted(by_index) == list(range(N))
    for i, (child, _) in by_index.items():
        assert child["workflow_id"] == wf_id and child["workflow_step_id"] == "fan"
        # The element and its position, not the workflow context (docs/workflows.md, "Limits").
        assert child["payload"] == {"warehouse": "w1", "line": items[i], "_index": i}
    states = await steps(client, wf_id)
    assert states["fan"]["status"] == "running"
    assert states["fan"]["fan_out"] == {"total": N, "completed": 0, "failed": 0}
    assert states["fan"]["job_id"] == by_index[0][0]["id"]  # the first child

    order = list(range(N))
    random.Random(7).shuffle(order)
    first, rest = order[:37], order[37:]
    await asyncio.gather(
        *(complete(client, by_index[i][0]["id"], by_index[i][1], {"sq": i * i}) for i in first)
    )
    await eventually(lambda: _at(client, wf_id, {"total": N, "completed": 37, "failed": 0}), timeout=20)
    assert (await steps(client, wf_id))["fan"]["status"] == "running"
    await asyncio.gather(
        *(complete(client, by_index[i][0]["id"], by_index[i][1], {"sq": i * i}) for i in rest)
    )

    total = await run_step(client, wf_id, "total", {"done": True})
    expected = {"results": [{"sq": i * i} for i in range(N)]}
    assert total["payload"]["_context"]["fan"] == expected
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"]["fan"] == expected
    final = (await steps(client, wf_id))["fan"]
    assert final["status"] == "completed" and final["fan_out"] == {"total": N, "completed": N, "failed": 0}
    assert len(await step_jobs(client, wf_id, "fan")) == N


async def _at(client, wf_id: str, want: dict) -> bool:
    return await _progress(client, wf_id) == want


async def test_fan_out_of_100_with_failures_fails_the_step_after_every_child_then_applies_its_policy(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            manual("fan", fan_out={"path": "ids"}, on_failure="skip"),
            step("after_fan", after=["fan"]),
            step("other"),
        ],
        context={"ids": list(range(N))},
    )
    children = await _lease_all(client, N)
    failing = [(j, t) for j, t in children if j["payload"]["item"] % 10 == 3]
    passing = [(j, t) for j, t in children if j["payload"]["item"] % 10 != 3]
    for j, _ in children:
        assert j["payload"]["item"] == j["payload"]["_index"]  # item_key defaults to "item"

    await asyncio.gather(
        *(fail(client, j["id"], t, f"bad {j['payload']['item']}", retryable=False) for j, t in failing)
    )
    await eventually(
        lambda: _at(client, wf_id, {"total": N, "completed": 0, "failed": len(failing)}), timeout=20
    )
    # Children are still running: the step is not failed yet, nothing downstream was decided.
    states = await steps(client, wf_id)
    assert states["fan"]["status"] == "running" and states["after_fan"]["status"] == "pending"
    assert (await workflow(client, wf_id))["status"] == "running"

    await asyncio.gather(*(complete(client, j["id"], t, {"ok": j["payload"]["item"]}) for j, t in passing))
    wf = await wait_status(client, wf_id, "partially_failed")
    states = await steps(client, wf_id)
    assert states["fan"]["status"] == "failed"
    assert states["fan"]["fan_out"] == {"total": N, "completed": N - len(failing), "failed": len(failing)}
    assert states["after_fan"]["status"] == "skipped" and states["other"]["status"] == "completed"
    assert "fan" not in wf["context"]
    statuses = [j["status"] for j in await step_jobs(client, wf_id, "fan")]
    assert statuses.count("failed") == len(failing) and statuses.count("completed") == len(passing)


async def test_fan_out_child_failure_under_halt_fails_the_workflow(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [manual("fan", fan_out={"path": "xs"}), step("next", after=["fan"])],
        context={"xs": ["a", "b", "c"]},
    )
    children = await _lease_all(client, 3)
    (bad, bad_token), *good = sorted(children, key=lambda c: c[0]["payload"]["_index"])
    await fail(client, bad["id"], bad_token, "no", retryable=False)
    for j, t in good:
        await complete(client, j["id"], t, {})
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"].startswith("step 'fan' failed: ")
    assert {n: s["status"] for n, s in (await steps(client, wf_id)).items()} == {
        "fan": "failed",
        "next": "cancelled",
    }


async def test_fan_out_with_echo_children_uses_the_default_item_key(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("fan", fan_out={"path": "xs"}, payload={"p": 1})], context={"xs": [{"a": 1}, "two", 3]}
    )
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"]["fan"] == {
        "results": [
            {"p": 1, "item": {"a": 1}, "_index": 0, "echoed": True},
            {"p": 1, "item": "two", "_index": 1, "echoed": True},
            {"p": 1, "item": 3, "_index": 2, "echoed": True},
        ]
    }


async def test_fan_out_over_an_empty_array_completes_at_once(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [manual("fan", fan_out={"path": "xs"}), manual("next", after=["fan"])], context={"xs": []}
    )
    nxt = await run_step(client, wf_id, "next")
    assert nxt["payload"]["_context"]["fan"] == {"results": []}
    wf = await wait_status(client, wf_id, "completed")
    assert wf["context"]["fan"] == {"results": []}
    fan = (await steps(client, wf_id))["fan"]
    assert fan["status"] == "completed"
    assert fan["fan_out"] == {"total": 0, "completed": 0, "failed": 0}
    assert await step_jobs(client, wf_id, "fan") == []


async def test_fan_out_over_more_than_max_items_fails_before_any_child(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("first"),
            manual("fan", after=["first"], fan_out={"path": "xs", "max_items": 3}),
            step("next", after=["fan"]),
        ],
        context={"xs": [1, 2, 3, 4]},
    )
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"].startswith("step 'fan' failed: ")
    states = await steps(client, wf_id)
    assert {n: s["status"] for n, s in states.items()} == {
        "first": "completed",
        "fan": "failed",
        "next": "cancelled",
    }
    assert "max_items" in states["fan"]["error"] or "3" in states["fan"]["error"]
    assert await step_jobs(client, wf_id, "fan") == []
    assert await lease(client, max_jobs=10) == []


async def test_fan_out_at_exactly_max_items_runs(api):
    client = await api(mode="all")
    wf_id = await create(
        client, [step("fan", fan_out={"path": "xs", "max_items": 3})], context={"xs": [1, 2, 3]}
    )
    wf = await wait_status(client, wf_id, "completed")
    assert [r["item"] for r in wf["context"]["fan"]["results"]] == [1, 2, 3]


async def test_fan_out_over_an_upstream_result(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [manual("list"), step("fan", after=["list"], fan_out={"path": "list.files", "item_key": "file"})],
    )
    await run_step(client, wf_id, "list", {"files": ["a.png", "b.png"]})
    wf = await wait_status(client, wf_id, "completed")
    assert [r["file"] for r in wf["context"]["fan"]["results"]] == ["a.png", "b.png"]


async def test_fan_out_path_that_is_not_an_array_fails_the_step(api):
    client = await api(mode="all")
    wf_id = await create(client, [step("fan", fan_out={"path": "xs"})], context={"xs": {"not": "a list"}})
    wf = await wait_status(client, wf_id, "failed")
    assert wf["error_message"].startswith("step 'fan' failed: ")
    assert await step_jobs(client, wf_id) == []


async def test_each_fan_out_child_carries_its_index_and_the_total_beside_the_steps_metadata(api):
    client = await api()  # no advancer needed: the fan-out is a root step, scheduled at create
    items = ["x", "y", "z"]
    wf_id = await create(
        client, [manual("fan", fan_out={"path": "items"}, metadata={"team": "ops"})], context={"items": items}
    )
    leased = sorted(
        await _lease_all(client, len(items)), key=lambda pair: pair[0]["metadata"]["fan_out_index"]
    )
    assert [job["metadata"] for job, _ in leased] == [
        {"team": "ops", "fan_out_index": i, "fan_out_total": len(items)} for i in range(len(items))
    ]
    assert [job["payload"]["item"] for job, _ in leased] == items
    assert len(await step_jobs(client, wf_id, "fan")) == len(items)
