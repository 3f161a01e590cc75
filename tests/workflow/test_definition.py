"""Creating workflows: validation before anything is stored, and the read views (get, list, steps,
diagram), tenant isolation, cancel of a finished workflow."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.workflow.helpers import (
    MANUAL,
    count_rows,
    create,
    get,
    manual,
    post,
    run_step,
    step,
    steps,
    wait_status,
    wait_step_job,
    workflow,
)


async def _rejected(client, body, prefix: str | None = "invalid workflow: ") -> str:
    status, resp = await post(client, "/api/v1/workflows", body)
    assert status == 400, resp
    assert set(resp) == {"error", "timestamp"}, resp
    if prefix is not None:
        assert resp["error"].startswith(prefix), resp
    # Nothing was stored: no workflow, no step, no job, nothing for the advancer.
    for table in ("workflows", "workflow_steps", "jobs", "workflow_outbox"):
        assert await count_rows(client, table) == 0, table
    status, listing = await get(client, "/api/v1/workflows?include_total=true")
    assert status == 200 and listing["workflows"] == [] and listing["total"] == 0, listing
    return str(resp["error"])


# --- validation ----------------------------------------------------------------------------------


async def test_cycle_is_rejected_naming_its_steps_sorted_and_nothing_is_stored(api):
    client = await api()
    error = await _rejected(
        client,
        {
            "name": "cyclic",
            "steps": [
                step("root"),
                step("c", after=["b"]),
                step("a", after=["root", "c"]),
                step("b", after=["a"]),
            ],
        },
    )
    assert error == "invalid workflow: workflow has a dependency cycle involving: a, b, c"


async def test_self_dependency_is_a_cycle(api):
    client = await api()
    error = await _rejected(client, {"name": "self", "steps": [step("a", after=["a"])]})
    assert error == "invalid workflow: workflow has a dependency cycle involving: a"


@pytest.mark.parametrize(
    ("steps_", "message"),
    [
        ([], "a workflow needs at least one step"),
        ([step("a"), step("a")], "duplicate step name: a"),
        ([step("a"), step("b", after=["zzz"])], "step 'b' depends on unknown step 'zzz'"),
    ],
)
async def test_structural_errors_are_400_invalid_workflow(api, steps_, message):
    client = await api()
    error = await _rejected(client, {"name": "bad", "steps": steps_})
    assert error == f"invalid workflow: {message}"


async def test_a_step_needs_exactly_one_of_task_name_and_workflow(api):
    client = await api()
    child = {"name": "child", "steps": [step("inner")]}
    await _rejected(client, {"name": "neither", "steps": [step("a", None)]})
    await _rejected(client, {"name": "both", "steps": [step("a", "echo", workflow=child)]})


@pytest.mark.parametrize(
    "when",
    [
        {"path": "x", "op": "eq"},  # eq needs a value
        {"path": "x", "value": 1, "all": [{"path": "y"}]},  # two shapes at once
        {"op": "eq", "value": 1},  # no shape at all
        {"path": "x", "op": "in", "value": 3},  # in needs a list
        {"all": [{"path": "x", "op": "gt"}]},  # a malformed member
        {"not": {"path": ""}},  # empty path
    ],
)
async def test_malformed_when_is_rejected(api, when):
    client = await api()
    await _rejected(client, {"name": "when", "steps": [step("a", when=when)]})


async def test_unknown_condition_op_is_rejected(api):
    client = await api()
    await _rejected(
        client,
        {"name": "when", "steps": [step("a", when={"path": "x", "op": "regex", "value": "."})]},
        prefix=None,
    )


@pytest.mark.parametrize(
    "config",
    [
        {"retry_delay_secs": 10**12},
        {"retry_max_delay_secs": 10**12},
        {"timeout_secs": 0},
        {"max_retries": 10**9},
        {"jitter_factor": 7.0},
        {"priority": 2**40},
    ],
)
async def test_absurd_step_config_is_rejected_before_anything_is_stored(api, config):
    client = await api()
    await _rejected(
        client,
        {"name": "absurd", "steps": [step("ok"), step("bad", after=["ok"], config=config)]},
        prefix=None,
    )


async def test_invalid_sub_workflow_is_rejected_and_nothing_is_stored(api):
    client = await api()
    child = {"name": "child", "steps": [step("x", after=["y"]), step("y", after=["x"])]}
    error = await _rejected(client, {"name": "parent", "steps": [step("sub", None, workflow=child)]})
    assert "dependency cycle involving: x, y" in error


async def test_fan_out_above_the_hard_limit_is_rejected(api):
    client = await api()
    await _rejected(
        client,
        {"name": "fan", "steps": [step("f", fan_out={"path": "items", "max_items": 10**9})]},
        prefix=None,
    )


# --- views ---------------------------------------------------------------------------------------


async def test_get_returns_the_definition_context_and_metadata(api):
    client = await api(mode="all")
    wf_id = await create(
        client,
        [
            step("validate", payload={"order": 7}, metadata={"team": "x"}),
            step("charge", after=["validate"], on_failure="skip", config={"max_retries": 1}),
        ],
        name="orders",
        context={"source": "web"},
        metadata={"owner": "me"},
    )
    wf = await wait_status(client, wf_id, "completed")
    assert wf["id"] == wf_id and wf["name"] == "orders"
    assert wf["metadata"] == {"owner": "me"}
    assert wf["retry_count"] == 0
    assert wf["tenant_id"]
    for key in ("created_at", "started_at", "completed_at"):
        datetime.fromisoformat(wf[key])
    assert wf["context"] == {
        "source": "web",
        "validate": {"order": 7, "echoed": True},
        "charge": {"echoed": True},
    }
    assert [s["name"] for s in wf["steps"]] == ["validate", "charge"]
    validate, charge = wf["steps"]
    assert validate["task_name"] == "echo" and validate["payload"] == {"order": 7}
    assert validate["metadata"] == {"team": "x"} and validate["depends_on"] == []
    assert charge["depends_on"] == ["validate"] and charge["on_failure"] == "skip"
    assert charge["config"]["max_retries"] == 1
    assert "error_message" not in wf and "parent_workflow_id" not in wf


async def test_steps_are_listed_in_declaration_order_with_job_ids_once_scheduled(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("z_first"), manual("a_gated", after=["z_first"]), manual("m_root")])
    await wait_step_job(client, wf_id, "z_first")
    await wait_step_job(client, wf_id, "m_root")
    status, body = await get(client, f"/api/v1/workflows/{wf_id}/steps")
    assert status == 200 and list(body) == ["steps"]
    assert [s["name"] for s in body["steps"]] == ["z_first", "a_gated", "m_root"]
    first, gated, root = body["steps"]
    assert first["status"] == root["status"] == "running"
    assert gated["status"] == "pending" and "job_id" not in gated
    jobs = await post(client, f"/api/v1/queues/{MANUAL}/lease", {"max_jobs": 10})
    assert {j["job"]["id"] for j in jobs[1]["jobs"]} == {first["job_id"], root["job_id"]}


async def test_list_filters_by_status_and_pages(api):
    client = await api(mode="all")
    done = [await create(client, [step("a")], name=f"done{i}") for i in range(3)]
    for wf_id in done:
        await wait_status(client, wf_id, "completed")
    waiting = await create(client, [manual("a")], name="waiting")
    await wait_step_job(client, waiting, "a")

    status, body = await get(client, "/api/v1/workflows?status=completed&include_total=true")
    assert status == 200
    assert {w["id"] for w in body["workflows"]} == set(done) and body["total"] == 3
    assert body["has_more"] is False
    status, body = await get(client, "/api/v1/workflows?status=running")
    assert [w["id"] for w in body["workflows"]] == [waiting]
    assert "total" not in body
    status, body = await get(client, "/api/v1/workflows?limit=2")
    assert len(body["workflows"]) == 2 and body["has_more"] is True and body["limit"] == 2
    listed = body["workflows"][0]
    assert {"id", "name", "status", "steps", "context", "metadata", "created_at"} <= set(listed)


async def test_diagram_is_mermaid_with_sanitised_ids_and_quoted_labels(api):
    client = await api()
    wf_id = await create(
        client,
        [
            manual("fetch data"),
            manual('1st "step"', after=["fetch data"]),
            manual("c-d", after=["fetch data", '1st "step"']),
            manual("_"),
        ],
    )
    status, body = await get(client, f"/api/v1/workflows/{wf_id}/diagram")
    assert status == 200
    assert body == {
        "format": "mermaid",
        "diagram": (
            "graph TD\n"
            '    fetch_data["fetch data"]\n'
            "    n1st__step_[\"1st 'step'\"]\n"
            '    c_d["c-d"]\n'
            '    _["_"]\n'
            "    fetch_data --> n1st__step_\n"
            "    fetch_data --> c_d\n"
            "    n1st__step_ --> c_d\n"
        ),
    }


async def test_unknown_workflow_is_404_on_every_route(api):
    client = await api()
    missing = "00000000-0000-0000-0000-000000000000"
    for path in ("", "/steps", "/diagram", "/events"):
        status, body = await get(client, f"/api/v1/workflows/{missing}{path}")
        assert status == 404, (path, body)
    for path in ("/cancel", "/retry"):
        status, body = await post(client, f"/api/v1/workflows/{missing}{path}")
        assert status == 404, (path, body)


async def test_another_tenants_workflow_is_404_and_not_listed(api):
    client = await api(api_keys="key1:acme,key2:globex")
    acme, globex = {"Authorization": "Bearer key1"}, {"Authorization": "Bearer key2"}
    wf_id = await create(client, [manual("a")], headers=acme)
    for path in ("", "/steps", "/diagram", "/events"):
        status, body = await get(client, f"/api/v1/workflows/{wf_id}{path}", headers=globex)
        assert status == 404, (path, body)
    for path in ("/cancel", "/retry"):
        status, body = await post(client, f"/api/v1/workflows/{wf_id}{path}", headers=globex)
        assert status == 404, (path, body)
    status, body = await get(client, "/api/v1/workflows?include_total=true", headers=globex)
    assert body["workflows"] == [] and body["total"] == 0
    status, body = await get(client, f"/api/v1/workflows/{wf_id}", headers=acme)
    assert status == 200 and body["status"] in ("created", "running") and body["tenant_id"] == "acme"


async def test_cancelling_a_finished_workflow_is_409_and_its_status_is_unchanged(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a")])
    await run_step(client, wf_id, "a", {"ok": True})
    before = await wait_status(client, wf_id, "completed")
    status, body = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 409, body
    assert body["error"] == "conflict: workflow is already completed"
    after = await workflow(client, wf_id)
    assert after == before
    assert {s["status"] for s in (await steps(client, wf_id)).values()} == {"completed"}


async def test_cancelling_a_cancelled_workflow_is_409(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a")])
    status, _ = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 204
    status, body = await post(client, f"/api/v1/workflows/{wf_id}/cancel")
    assert status == 409 and body["error"] == "conflict: workflow is already cancelled"
    assert (await workflow(client, wf_id))["status"] == "cancelled"


async def test_unauthenticated_requests_are_401(api):
    client = await api()
    status, _ = await get(client, "/api/v1/workflows", headers={})
    assert status == 401
    status, _ = await post(client, "/api/v1/workflows", {"name": "x", "steps": [step("a")]}, headers={})
    assert status == 401


@pytest.mark.parametrize("timeout_secs", [0, -5, 10**9])
async def test_out_of_range_workflow_timeout_is_rejected(api, timeout_secs):
    client = await api()
    await _rejected(client, {"name": "t", "steps": [step("a")], "timeout_secs": timeout_secs}, prefix=None)
