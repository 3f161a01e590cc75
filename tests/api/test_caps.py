"""Request caps over HTTP (docs/operations.md, "Request caps"): a cron expression's length (and a
cron error that never echoes a huge input), parsing cron expressions off the event loop, payload,
metadata and result sizes (413), a failure's error text kept to 64 KiB with a marker in each of its
three copies, and list offsets past 10,000 (a 400 that points to the cursor). The caps on open
streams, parked long-polls and unknown worker keys are exercised on real processes in
tests/e2e/test_caps.py."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from shared.domain import cron
from shared.domain.caps import MAX_ERROR_BYTES
from shared.domain.paging import MAX_OFFSET
from tests.api.helpers import DEV, count, create_job, expect_error, get_job, lease, lease_one

CRON = "/api/v1/cron"


def json_size(value: Any) -> int:
    """What the server measures: the compact UTF-8 JSON of `value`."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def payload_of(size: int) -> dict[str, str]:
    """A payload whose JSON takes exactly `size` bytes."""
    payload = {"blob": ""}
    payload["blob"] = "x" * (size - json_size(payload))
    assert json_size(payload) == size
    return payload


# --- cron ------------------------------------------------------------------------------------------


def cron_body(expr: str, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "cron_expr": expr, "task_name": "t", **extra}


@pytest.mark.parametrize("length", [257, 2_000_000])
async def test_a_cron_expr_over_256_characters_is_400_and_not_echoed(api, length):
    client = await api()
    expr = ("0," * length)[: length - 8] + " * * * *"
    assert len(expr) == length
    resp = await client.post(CRON, json=cron_body(expr), headers=DEV)
    message = await expect_error(resp, 400, "validation error: ")
    assert "cron_expr" in message and "256" in message
    assert len(message) < 300  # the input is not quoted back
    assert await count(client, "cron_schedules") == 0


async def test_a_cron_expr_of_256_characters_is_taken(api):
    client = await api()
    minutes = ",".join(["0"] * 123)  # 245 characters
    expr = f"{minutes},10 * * * *"
    assert len(expr) == cron.MAX_CRON_EXPR
    resp = await client.post(CRON, json=cron_body(expr), headers=DEV)
    assert resp.status == 201, await resp.text()


async def test_a_cron_error_quotes_only_the_start_of_a_long_expression(api):
    client = await api()
    expr = ",".join(["99"] * 80) + " * * * *"  # 247 characters, minute 99 does not exist
    resp = await client.post(CRON, json=cron_body(expr), headers=DEV)
    message = await expect_error(resp, 400, "validation error: invalid cron expression '99,99")
    assert expr not in message and f"({len(expr)} characters)" in message
    short = await client.post(CRON, json=cron_body("61 * * * *"), headers=DEV)
    assert (await expect_error(short, 400)).startswith(
        "validation error: invalid cron expression '61 * * * *':"
    )  # upstream's form, whole, when it is short


async def test_cron_expressions_are_checked_in_a_worker_thread(api, monkeypatch):
    """croniter can search for tens of milliseconds before giving up on an expression that never
    fires (`* * * 15W * 7`, docs/cron.md): that runs off the event loop's thread."""
    client = await api()
    threads: list[bool] = []
    checked = cron.validate

    def validate(expr: str) -> None:
        threads.append(threading.current_thread() is threading.main_thread())
        checked(expr)

    monkeypatch.setattr(cron, "validate", validate)
    never = await client.post(CRON, json=cron_body("* * * 15W * 7"), headers=DEV)
    await expect_error(never, 400, "validation error: invalid cron expression '* * * 15W * 7'")
    fine = await client.post(CRON, json=cron_body("*/5 * * * *", name="ok"), headers=DEV)
    assert fine.status == 201, await fine.text()
    assert threads == [False, False]


@pytest.mark.parametrize(
    ("field", "value", "bound"),
    [("timezone", "E" * 65, "64"), ("task_name", "t" * 256, "255")],
)
async def test_a_crons_other_text_inputs_are_bounded(api, field, value, bound):
    client = await api()
    resp = await client.post(CRON, json=cron_body("* * * * *", **{field: value}), headers=DEV)
    message = await expect_error(resp, 400, "validation error: ")
    assert field in message and bound in message and value not in message


# --- payloads and results --------------------------------------------------------------------------


async def test_a_payload_over_max_payload_bytes_is_413_naming_it(api):
    client = await api(max_payload_bytes=1000)
    assert (
        await client.post("/api/v1/jobs", json={"task_name": "t", "payload": payload_of(1000)}, headers=DEV)
    ).status == 201
    resp = await client.post(
        "/api/v1/jobs", json={"task_name": "t", "payload": payload_of(1001)}, headers=DEV
    )
    message = await expect_error(resp, 413)
    assert message == "payload too large: payload takes 1001 bytes of JSON; this server takes at most 1000"
    meta = await client.post(
        "/api/v1/jobs", json={"task_name": "t", "metadata": payload_of(1001)}, headers=DEV
    )
    assert "metadata takes 1001 bytes" in await expect_error(meta, 413)
    assert await count(client, "jobs") == 1


async def test_the_default_payload_cap_is_a_mebibyte(api):
    client = await api()
    resp = await client.post(
        "/api/v1/jobs", json={"task_name": "t", "payload": payload_of(1024 * 1024 + 1)}, headers=DEV
    )
    assert "at most 1048576" in await expect_error(resp, 413)
    resp = await client.post(
        "/api/v1/jobs", json={"task_name": "t", "payload": payload_of(1024 * 1024)}, headers=DEV
    )
    assert resp.status == 201, await resp.text()


async def test_max_payload_bytes_zero_is_no_cap(api):
    client = await api(max_payload_bytes=0)
    resp = await client.post(
        "/api/v1/jobs", json={"task_name": "t", "payload": payload_of(2_000_000)}, headers=DEV
    )
    assert resp.status == 201, await resp.text()


async def test_one_oversized_batch_item_refuses_the_batch_naming_the_item(api):
    client = await api(max_payload_bytes=1000)
    items = [{"task_name": "t"}, {"task_name": "t", "payload": payload_of(1001)}]
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": items}, headers=DEV)
    assert (await expect_error(resp, 413)).startswith("payload too large: jobs[1].payload takes 1001 bytes")
    assert await count(client, "jobs") == 0


@pytest.mark.parametrize(
    ("definition", "part"),
    [
        ({"context": payload_of(1001)}, "context"),
        (
            {
                "steps": [
                    {"name": "a", "task_name": "t"},
                    {"name": "b", "task_name": "t", "payload": payload_of(1001)},
                ]
            },
            "steps[1].payload",
        ),
        (
            {
                "steps": [
                    {
                        "name": "a",
                        "workflow": {
                            "name": "s",
                            "steps": [{"name": "x", "task_name": "t", "metadata": payload_of(1001)}],
                        },
                    }
                ]
            },
            "steps[0].workflow.steps[0].metadata",
        ),
    ],
    ids=["context", "step payload", "sub-workflow step metadata"],
)
async def test_a_workflow_part_over_the_payload_cap_is_413_naming_it(api, definition, part):
    client = await api(max_payload_bytes=1000)
    body = {"name": "w", "steps": [{"name": "a", "task_name": "t"}], **definition}
    resp = await client.post("/api/v1/workflows", json=body, headers=DEV)
    assert (await expect_error(resp, 413)).startswith(f"payload too large: {part} takes 1001 bytes")
    assert await count(client, "workflows") == 0


async def test_a_cron_payload_over_the_cap_is_413(api):
    client = await api(max_payload_bytes=1000)
    resp = await client.post(CRON, json=cron_body("* * * * *", payload=payload_of(1001)), headers=DEV)
    assert "payload takes 1001 bytes" in await expect_error(resp, 413)
    workflow = {"name": "w", "steps": [{"name": "a", "task_name": "t", "payload": payload_of(1001)}]}
    resp = await client.post(
        CRON, json={"name": "c", "cron_expr": "* * * * *", "workflow": workflow}, headers=DEV
    )
    assert "workflow.steps[0].payload takes" in await expect_error(resp, 413)
    assert await count(client, "cron_schedules") == 0


async def test_a_result_over_max_result_bytes_is_413_and_the_job_stays_leased(api):
    client = await api(max_result_bytes=1000)
    job_id = await create_job(client, config={"queue": "r"})
    token = await lease_one(client, "r", job_id)
    url = f"/api/v1/jobs/{job_id}/complete"
    resp = await client.post(url, json={"lease_token": token, "result": payload_of(1001)}, headers=DEV)
    assert await expect_error(resp, 413) == (
        "payload too large: result takes 1001 bytes of JSON; this server takes at most 1000"
    )
    assert (await get_job(client, job_id))["status"] == "running"
    resp = await client.post(url, json={"lease_token": token, "result": payload_of(1000)}, headers=DEV)
    assert resp.status == 204, await resp.text()


async def test_one_oversized_result_refuses_the_batch_acknowledgement(api):
    client = await api(max_result_bytes=1000)
    ids = [await create_job(client, config={"queue": "r"}) for _ in range(2)]
    leased = await lease(client, "r", max_jobs=2)
    items = [
        {"id": item["job"]["id"], "lease_token": item["lease_token"], "result": payload_of(1001 if n else 20)}
        for n, item in enumerate(leased)
    ]
    resp = await client.post("/api/v1/jobs/complete", json={"jobs": items}, headers=DEV)
    assert (await expect_error(resp, 413)).startswith("payload too large: jobs[1].result takes 1001 bytes")
    assert [(await get_job(client, job_id))["status"] for job_id in ids] == ["running", "running"]


# --- failure errors --------------------------------------------------------------------------------


async def test_a_huge_failure_error_is_taken_and_kept_cut_to_64_kib_in_each_copy(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "f", "max_retries": 0})
    token = await lease_one(client, "f", job_id)
    error = "é" * 1_000_000  # 2 MB of UTF-8
    resp = await client.post(
        f"/api/v1/jobs/{job_id}/fail", json={"lease_token": token, "error": error}, headers=DEV
    )
    assert resp.status == 204, await resp.text()  # never refused: the report is all there is
    job = await get_job(client, job_id)
    dead = (await (await client.get("/api/v1/dlq", headers=DEV)).json())["dead_letters"]
    attempts = (await (await client.get(f"/api/v1/jobs/{job_id}/attempts", headers=DEV)).json())["attempts"]
    kept = [job["error_message"], dead[0]["error_message"], attempts[0]["error_message"]]
    assert kept[0] == kept[1] == kept[2]
    assert len(kept[0].encode()) <= MAX_ERROR_BYTES
    head, _, marker = kept[0].partition("... [truncated: ")
    assert error.startswith(head) and len(head) > 30_000
    assert marker == f"{len(error.encode()) - len(head.encode())} more bytes]"


async def test_a_failure_error_within_64_kib_is_kept_whole(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "f", "max_retries": 0})
    token = await lease_one(client, "f", job_id)
    error = "x" * MAX_ERROR_BYTES
    resp = await client.post(
        f"/api/v1/jobs/{job_id}/fail", json={"lease_token": token, "error": error}, headers=DEV
    )
    assert resp.status == 204
    assert (await get_job(client, job_id))["error_message"] == error


# --- offsets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/workflows", "/api/v1/cron", "/api/v1/dlq"])
async def test_an_offset_over_10000_is_400_pointing_to_the_cursor(api, path):
    client = await api()
    resp = await client.get(path, params={"offset": str(MAX_OFFSET + 1)}, headers=DEV)
    message = await expect_error(resp, 400, "validation error: offset cannot exceed 10000")
    assert "cursor" in message and "next_cursor" in message
    resp = await client.get(path, params={"offset": str(MAX_OFFSET)}, headers=DEV)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["offset"] == MAX_OFFSET
    assert MAX_OFFSET == 10_000


# --- the document ----------------------------------------------------------------------------------


async def test_the_document_states_the_caps(api):
    client = await api(max_payload_bytes=1234, max_result_bytes=4321)
    document = await (await client.get("/openapi.json")).json()
    schemas, paths = document["components"]["schemas"], document["paths"]
    assert schemas["CreateCronRequest"]["properties"]["cron_expr"]["maxLength"] == 256
    assert "At most 1234 bytes" in schemas["CreateJobRequest"]["properties"]["payload"]["description"]
    assert "At most 1234 bytes" in schemas["WorkflowStep"]["properties"]["payload"]["description"]
    assert "At most 4321 bytes" in schemas["CompleteJobRequest"]["properties"]["result"]["description"]
    assert "65536 bytes" in schemas["FailJobRequest"]["properties"]["error"]["description"]
    offset = next(p for p in paths["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "offset")
    assert offset["schema"]["maximum"] == 10_000
    lease_answers = paths["/api/v1/queues/{queue}/lease"]["post"]["responses"]
    stream_answers = paths["/api/v1/jobs/{id}/events"]["get"]["responses"]
    for answers in (lease_answers, stream_answers):
        assert "Retry-After" in answers["429"]["headers"] and "Retry-After" in answers["503"]["headers"]
    assert "413" in paths["/api/v1/jobs"]["post"]["responses"]
