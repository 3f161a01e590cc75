"""What one workflow may ask for, against real `queueflow serve` processes over HTTP: a definition
that could create more jobs than --workflow-max-jobs (sub-workflows included, a fan-out counted at
its max_items) or declares a max_items over --workflow-max-fan-out is refused up front with 400 and
the error body; a fan-out whose array, known only when it runs, is longer than the server's bound
fails its step with that reason and the workflow settles; fan-out children carry their element, not
the workflow context (asserted on the stored payloads); a tenant at --tenant-max-running-workflows
gets 429 with Retry-After for a creation or a retry, and only that tenant."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from shared.runtime.advance import INSERT_CHUNK_JOBS
from tests.support.waiting import eventually
from tests.workflow.helpers import MANUAL, create, manual, step, step_jobs, steps

pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group("processes")]

DEV = {"Authorization": "Bearer dev"}
LIMITS = {"QUEUEFLOW_WORKFLOW_MAX_JOBS": "10", "QUEUEFLOW_WORKFLOW_MAX_FAN_OUT": "5"}


async def _post(
    http: aiohttp.ClientSession, path: str, body: Any, headers: dict[str, str] = DEV
) -> tuple[int, Any, Any]:
    async with http.post(path, json=body, headers=headers) as resp:
        text = await resp.text()
        return resp.status, (await resp.json() if text else None), resp.headers


async def _get(http: aiohttp.ClientSession, path: str, headers: dict[str, str] = DEV) -> Any:
    async with http.get(path, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


def _definition(steps: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"name": "wf", "steps": steps, **fields}


def _tasks(count: int, prefix: str = "t") -> list[dict[str, Any]]:
    return [manual(f"{prefix}{i}") for i in range(count)]


async def _settled(http: aiohttp.ClientSession, wf_id: str, headers: dict[str, str] = DEV) -> dict:
    async def done() -> dict | None:
        wf = await _get(http, f"/api/v1/workflows/{wf_id}", headers)
        return wf if wf["status"] in ("completed", "failed", "partially_failed", "cancelled") else None

    return await eventually(done, timeout=30, message=f"workflow {wf_id} settles")


def _refused(status: int, body: Any, *words: str) -> None:
    assert status == 400, body
    assert set(body) == {"error", "timestamp"}, body
    assert body["error"].startswith("invalid workflow: "), body
    for word in words:
        assert word in body["error"], body


async def test_a_definition_that_could_create_more_jobs_than_the_cap_is_refused_with_400_and_nothing_is_stored(
    database_url, service, db
):
    proc = await service(database_url, mode="api", env=LIMITS)
    over = [
        # a fan-out counts its max_items: 5 + 6 task steps = 11 jobs
        _definition([manual("fan", fan_out={"path": "xs", "max_items": 5}), *_tasks(6)]),
        # a fan-out without max_items counts the server's bound (5): 5 + 5 + 1
        _definition([manual("a", fan_out={"path": "xs"}), manual("b", fan_out={"path": "xs"}), *_tasks(1)]),
        # a sub-workflow's jobs count: 4 here and 7 below
        _definition(
            [*_tasks(4), {"name": "sub", "workflow": _definition(_tasks(7, "inner"))}],
        ),
    ]
    async with aiohttp.ClientSession(base_url=proc.base_url) as http:
        for definition in over:
            status, body, _ = await _post(http, "/api/v1/workflows", definition)
            _refused(status, body, "up to 11 jobs", "limit of 10", "--workflow-max-jobs")

        status, body, _ = await _post(
            http, "/api/v1/workflows", _definition([manual("fan", fan_out={"path": "xs", "max_items": 6})])
        )
        _refused(status, body, "step 'fan'", "max_items 6", "limit of 5", "--workflow-max-fan-out")

        # A cron schedule's workflow is held to the same bounds when the schedule is created.
        cron = {"name": "nightly", "cron_expr": "0 3 * * *", "workflow": over[0]}
        status, body, _ = await _post(http, "/api/v1/cron", cron)
        _refused(status, body, "up to 11 jobs")
        assert await db.fetchval("SELECT count(*) FROM queueflow.workflows") == 0
        assert await db.fetchval("SELECT count(*) FROM queueflow.cron_schedules") == 0

        # Exactly at the cap is fine: 5 (the fan-out's bound) + 5 task steps.
        at_cap = _definition([manual("fan", fan_out={"path": "xs"}), *_tasks(5)], context={"xs": [1]})
        status, body, _ = await _post(http, "/api/v1/workflows", at_cap)
        assert status == 201, body
        assert await db.fetchval("SELECT count(*) FROM queueflow.jobs") == 6


async def test_a_fan_out_whose_array_exceeds_the_servers_bound_fails_the_step_and_the_workflow_settles(
    database_url, service, db
):
    proc = await service(database_url, mode="all", env=LIMITS)
    async with aiohttp.ClientSession(base_url=proc.base_url) as http:
        # `first` (the built-in echo) puts 6 elements in the context; the fan-out, which declares
        # no max_items, may spawn 5. Another branch and a `continue` policy show the rest goes on.
        definition = _definition(
            [
                step("first", payload={"xs": list(range(6))}),
                step("fan", after=["first"], fan_out={"path": "first.xs"}, on_failure="continue"),
                step("after", after=["fan"]),
            ]
        )
        status, body, _ = await _post(http, "/api/v1/workflows", definition)
        assert status == 201, body
        wf = await _settled(http, body["workflow_id"])
        states = {s["name"]: s for s in (await _get(http, f"/api/v1/workflows/{wf['id']}/steps"))["steps"]}

        assert wf["status"] == "partially_failed", wf
        assert states["fan"]["status"] == "failed"
        assert states["fan"]["error"] == (
            "fan_out path 'first.xs' has 6 elements, more than this server's limit of 5 children a fan-out"
            " (--workflow-max-fan-out)"
        )
        assert states["after"]["status"] == "completed"
        jobs = await db.fetch("SELECT workflow_step_id FROM queueflow.jobs WHERE workflow_id = $1", wf["id"])
        assert sorted(j["workflow_step_id"] for j in jobs) == ["after", "first"]  # no child was made
        # The advancer applied the failure once and moved on: nothing is left or set aside.
        assert await db.fetchval("SELECT count(*) FROM queueflow.workflow_outbox") == 0

        # Within the bound the same shape runs.
        definition["steps"][0]["payload"] = {"xs": list(range(5))}
        status, body, _ = await _post(http, "/api/v1/workflows", definition)
        assert status == 201, body
        wf = await _settled(http, body["workflow_id"])
        assert wf["status"] == "completed", wf
        assert [r["item"] for r in wf["context"]["fan"]["results"]] == list(range(5))


async def test_fan_out_children_carry_their_element_and_not_the_workflow_context(database_url, service, db):
    proc = await service(database_url, mode="api")
    blob = "x" * 100_000
    items = [{"sku": f"s{i}"} for i in range(3)]
    definition = _definition(
        [
            manual("fan", fan_out={"path": "order.items", "item_key": "line"}, payload={"warehouse": "w1"}),
            manual("solo", payload={"n": 1}),
        ],
        context={"blob": blob, "order": {"items": items}},
    )
    async with aiohttp.ClientSession(base_url=proc.base_url) as http:
        status, body, _ = await _post(http, "/api/v1/workflows", definition)
        assert status == 201, body
    rows = await db.fetch(
        "SELECT workflow_step_id, step_index, payload::text AS payload, pg_column_size(payload) AS size"
        " FROM queueflow.jobs WHERE workflow_id = $1 ORDER BY workflow_step_id, step_index",
        body["workflow_id"],
    )
    children = [r for r in rows if r["workflow_step_id"] == "fan"]
    assert [r["step_index"] for r in children] == [0, 1, 2]
    for i, child in enumerate(children):
        assert json.loads(child["payload"]) == {"warehouse": "w1", "line": items[i], "_index": i}
        assert child["size"] < 1000
    # A plain step's job still carries the whole context under `_context` (upstream's contract).
    [solo] = [r for r in rows if r["workflow_step_id"] == "solo"]
    assert json.loads(solo["payload"]) == {"n": 1, "_context": {"blob": blob, "order": {"items": items}}}


async def test_a_fan_out_wider_than_one_insert_makes_every_child_once_in_element_order(api):
    client = await api()  # the root fan-out is scheduled by the creation itself
    count = INSERT_CHUNK_JOBS * 2 + 500
    wf_id = await create(client, [manual("fan", fan_out={"path": "xs"})], context={"xs": list(range(count))})
    children = await step_jobs(client, wf_id, "fan")
    assert [c["step_index"] for c in children] == list(range(count))
    assert all(c["payload"] == {"item": i, "_index": i} for i, c in enumerate(children))
    fan = (await steps(client, wf_id))["fan"]
    assert fan["job_id"] == children[0]["id"] and fan["fan_out"]["total"] == count


QUOTA_KEYS = "key-acme:acme,key-beta:beta"
ACME, BETA, WORKER = (
    {"Authorization": "Bearer key-acme"},
    {"Authorization": "Bearer key-beta"},
    {"Authorization": "Bearer w"},
)


async def test_a_tenant_at_its_running_workflows_quota_gets_429_with_retry_after_until_one_finishes(
    database_url, service
):
    proc = await service(
        database_url,
        mode="all",
        dev=False,
        extra_args=["--worker-token", "w", "--api-keys", QUOTA_KEYS],
        env={"QUEUEFLOW_TENANT_MAX_RUNNING_WORKFLOWS": "2"},
    )
    waiting = _definition([manual("wait")])  # its job waits on a queue nothing drains
    async with aiohttp.ClientSession(base_url=proc.base_url) as http:
        # Five creations at once from none: exactly two take the quota's places.
        answers = await asyncio.gather(*(_post(http, "/api/v1/workflows", waiting, ACME) for _ in range(5)))
        created = [b["workflow_id"] for s, b, _ in answers if s == 201]
        refused = [(b, h) for s, b, h in answers if s == 429]
        assert len(created) == 2 and len(refused) == 3, answers
        for refusal, headers in refused:
            assert set(refusal) == {"error", "timestamp"}
            assert refusal["error"].startswith(
                "quota exceeded: this tenant already has 2 unfinished workflows"
            )
            assert "--tenant-max-running-workflows" in refusal["error"]
            assert int(headers["Retry-After"]) > 0

        # Another tenant has a quota of its own.
        status, body, _ = await _post(http, "/api/v1/workflows", waiting, BETA)
        assert status == 201, body

        # Cancelling one frees its place; a retry of it then needs a place too.
        first, second = created
        assert (await _post(http, f"/api/v1/workflows/{first}/cancel", None, ACME))[0] == 204
        status, body, _ = await _post(http, "/api/v1/workflows", waiting, ACME)
        assert status == 201, body
        status, body, headers = await _post(http, f"/api/v1/workflows/{first}/retry", None, ACME)
        assert status == 429 and "Retry-After" in headers, body

        # A workflow that finishes frees its place as well.
        job = await _lease_step(http, second)
        done = {"lease_token": job["lease_token"], "result": {}}
        assert (await _post(http, f"/api/v1/jobs/{job['job']['id']}/complete", done, WORKER))[0] == 204
        assert (await _settled(http, second, ACME))["status"] == "completed"
        status, body, _ = await _post(http, f"/api/v1/workflows/{first}/retry", None, ACME)
        assert status == 204, body


async def _lease_step(http: aiohttp.ClientSession, wf_id: str) -> dict:
    """Lease jobs from the manual queue until the one of `wf_id` comes (others are left leased)."""

    async def leased() -> dict | None:
        body = {"max_jobs": 10, "wait_secs": 0, "lease_secs": 60}
        status, answer, _ = await _post(http, f"/api/v1/queues/{MANUAL}/lease", body, WORKER)
        assert status == 200, answer
        mine = [j for j in answer["jobs"] if j["job"]["workflow_id"] == wf_id]
        return mine[0] if mine else None

    return await eventually(leased, timeout=20, message=f"the job of {wf_id} is leased")
