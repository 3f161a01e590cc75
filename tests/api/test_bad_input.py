"""Bad input never reaches the database: every malformed request is a 4xx with the error body (never
a 500) and writes nothing."""

from __future__ import annotations

import json

import pytest

from services.api.routes import ROUTES
from tests.api.helpers import DEV, count, create_job, expect_error, lease_one, make_dead_letter

JSON = {**DEV, "Content-Type": "application/json"}


async def _assert_nothing_written(client) -> None:
    assert await count(client, "jobs") == 0
    assert await count(client, "dead_letters") == 0


# --- POST /jobs ------------------------------------------------------------------------------------

BAD_JOBS: dict[str, object] = {
    "missing task_name": {"payload": {}},
    "blank task_name": {"task_name": ""},
    "whitespace task_name": {"task_name": "   "},
    "null task_name": {"task_name": None},
    "task_name not a string": {"task_name": 5},
    "unknown top-level field": {"task_name": "t", "priorty": 1},
    "unknown config field": {"task_name": "t", "config": {"timeout_secs": 5}},
    "payload is a list": {"task_name": "t", "payload": [1, 2]},
    "payload is a string": {"task_name": "t", "payload": "x"},
    "payload is a number": {"task_name": "t", "payload": 3},
    "metadata is a list": {"task_name": "t", "metadata": []},
    "config is a list": {"task_name": "t", "config": []},
    "priority as a string": {"task_name": "t", "config": {"priority": "5"}},
    "priority as a float": {"task_name": "t", "config": {"priority": 1.5}},
    "priority 2**31": {"task_name": "t", "config": {"priority": 2**31}},
    "priority below int32": {"task_name": "t", "config": {"priority": -(2**31) - 1}},
    "max_retries as a bool": {"task_name": "t", "config": {"max_retries": True}},
    "max_retries 1001": {"task_name": "t", "config": {"max_retries": 1001}},
    "max_retries negative": {"task_name": "t", "config": {"max_retries": -1}},
    "timeout 0": {"task_name": "t", "config": {"timeout": 0}},
    "timeout 86401": {"task_name": "t", "config": {"timeout": 86401}},
    "retry_delay_secs 2592001": {"task_name": "t", "config": {"retry_delay_secs": 2592001}},
    "retry_delay_secs negative": {"task_name": "t", "config": {"retry_delay_secs": -1}},
    "retry_max_delay_secs 2592001": {"task_name": "t", "config": {"retry_max_delay_secs": 2592001}},
    "jitter_factor 1.5": {"task_name": "t", "config": {"jitter_factor": 1.5}},
    "jitter_factor negative": {"task_name": "t", "config": {"jitter_factor": -0.1}},
    "jitter_factor 7": {"task_name": "t", "config": {"jitter_factor": 7}},
    "unknown backoff": {"task_name": "t", "config": {"retry_backoff": "random"}},
    "empty queue": {"task_name": "t", "config": {"queue": ""}},
    "queue not a string": {"task_name": "t", "config": {"queue": 1}},
    "run_at not a timestamp": {"task_name": "t", "run_at": "tomorrow"},
    "run_at a number": {"task_name": "t", "run_at": 1700000000},
    "idempotency_key too long": {"task_name": "t", "idempotency_key": "k" * 256},
    "body is a list": [{"task_name": "t"}],
    "body is a string": "task",
    "body is null": None,
}


@pytest.mark.parametrize("body", BAD_JOBS.values(), ids=BAD_JOBS.keys())
async def test_invalid_create_job_is_400_and_writes_nothing(api, body):
    client = await api()
    resp = await client.post("/api/v1/jobs", data=json.dumps(body), headers=JSON)
    await expect_error(resp, 400, "validation error: ")
    await _assert_nothing_written(client)


MALFORMED = {
    "truncated": b'{"task_name": "t"',
    "trailing comma": b'{"task_name": "t",}',
    "single quotes": b"{'task_name': 't'}",
    "NaN": b'{"task_name": "t", "payload": {"x": NaN}}',
    "not utf-8": b'{"task_name": "\xff"}',
    "garbage": b"task_name=t",
    "two documents": b'{"task_name": "t"}{"task_name": "u"}',
    "number overflow": b'{"task_name": "t", "payload": {"x": 1e999}}',
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
@pytest.mark.parametrize(
    "path", ["/api/v1/jobs", "/api/v1/jobs/batch", "/api/v1/jobs/cancel", "/api/v1/dlq/replay"]
)
async def test_malformed_json_is_400_and_writes_nothing(api, path, raw):
    client = await api()
    resp = await client.post(path, data=raw, headers=JSON)
    await expect_error(resp, 400, "validation error: ")
    await _assert_nothing_written(client)


async def test_malformed_json_says_where_in_one_plain_sentence(api):
    client = await api()
    resp = await client.post("/api/v1/jobs", data=b"nojson", headers=JSON)
    await expect_error(resp, 400, "validation error: malformed JSON: invalid character (byte 4)")
    resp = await client.post("/api/v1/jobs", data=b'{"task_name": 1}', headers=JSON)
    await expect_error(resp, 400, "validation error: expected `str`, got `int` - at `$.task_name`")


NUL_BODIES = {
    "payload value": ("/api/v1/jobs", {"task_name": "t", "payload": {"x": "a\u0000b"}}),
    "payload key": ("/api/v1/jobs", {"task_name": "t", "payload": {"k\u0000": 1}}),
    "task_name": ("/api/v1/jobs", {"task_name": "t\u0000"}),
    "metadata": ("/api/v1/jobs", {"task_name": "t", "metadata": {"k": "\u0000"}}),
    "queue": ("/api/v1/jobs", {"task_name": "t", "config": {"queue": "q\u0000"}}),
    "idempotency_key": ("/api/v1/jobs", {"task_name": "t", "idempotency_key": "k\u0000"}),
    "batch item payload": (
        "/api/v1/jobs/batch",
        {"jobs": [{"task_name": "t"}, {"task_name": "t", "payload": {"x": "\u0000"}}]},
    ),
}


@pytest.mark.parametrize(("path", "body"), NUL_BODIES.values(), ids=NUL_BODIES.keys())
async def test_nul_character_in_a_string_is_400_not_500(api, path, body):
    """PostgreSQL text and jsonb cannot hold U+0000: it must be rejected at the boundary."""
    client = await api()
    resp = await client.post(path, json=body, headers=DEV)
    await expect_error(resp, 400, "validation error: ")
    await _assert_nothing_written(client)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/jobs/cancel", {"queue": "q\u0000"}),
        ("/api/v1/dlq/replay", {"task_name": "t\u0000"}),
    ],
    ids=["cancel filter", "bulk replay filter"],
)
async def test_nul_character_in_a_filter_is_400_not_500(api, path, body):
    client = await api()
    await create_job(client)
    await expect_error(await client.post(path, json=body, headers=DEV), 400, "validation error: ")
    assert await count(client, "jobs", "status = 'pending'") == 1


@pytest.mark.parametrize("path", ["/api/v1/jobs?queue=%00", "/api/v1/dlq?task_name=%00"])
async def test_nul_character_in_a_list_filter_is_400_and_not_blamed_on_the_cursor(api, path):
    client = await api()
    message = await expect_error(await client.get(path, headers=DEV), 400, "validation error: ")
    assert "cursor" not in message


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("complete", {"result": {"out": "a\u0000"}}),
        ("fail", {"error": "bad\u0000news"}),
    ],
    ids=["complete result", "fail error"],
)
async def test_nul_character_in_a_worker_report_is_400_and_leaves_the_job_running(api, route, body):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-nul"})
    token = await lease_one(client, "q-nul", job_id)
    resp = await client.post(
        f"/api/v1/jobs/{job_id}/{route}", json={"lease_token": token, **body}, headers=DEV
    )
    await expect_error(resp, 400, "validation error: ")
    assert await count(client, "jobs", "status = 'running'") == 1
    assert await count(client, "dead_letters") == 0


async def test_nul_character_in_a_lease_queue_name_is_4xx_not_500(api):
    client = await api()
    resp = await client.post("/api/v1/queues/q%00x/lease", json={}, headers=DEV)
    assert 400 <= resp.status < 500, await resp.text()
    await expect_error(resp, resp.status)


OUT_OF_RANGE_TIMES = ["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"]


@pytest.mark.parametrize("at", OUT_OF_RANGE_TIMES)
@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/jobs", "run_at"),
        ("/api/v1/jobs/cancel", "created_after"),
        ("/api/v1/dlq/replay", "created_before"),
    ],
    ids=["create run_at", "cancel created_after", "bulk replay created_before"],
)
async def test_timestamp_outside_the_utc_calendar_is_400_not_500(api, path, field, at):
    client = await api()
    body = {field: at, **({"task_name": "t"} if path == "/api/v1/jobs" else {})}
    await expect_error(await client.post(path, json=body, headers=DEV), 400, "validation error: ")
    await _assert_nothing_written(client)


@pytest.mark.parametrize("at", OUT_OF_RANGE_TIMES)
async def test_list_timestamp_outside_the_utc_calendar_is_400(api, at):
    client = await api()
    resp = await client.get("/api/v1/jobs", params={"created_after": at}, headers=DEV)
    await expect_error(resp, 400, "validation error: ")


async def test_deeply_nested_payload_is_a_4xx_not_a_500(api):
    client = await api()
    raw = b'{"task_name": "t", "payload": {"x": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    resp = await client.post("/api/v1/jobs", data=raw, headers=JSON)
    assert 400 <= resp.status < 500, await resp.text()
    await expect_error(resp, resp.status)
    await _assert_nothing_written(client)


def _nested(levels: int, leaf: bytes = b"1") -> bytes:
    """`levels` of objects and arrays around `leaf` (a body's own braces add one more level)."""
    opening = b"".join(b'{"k": ' if i % 2 == 0 else b"[" for i in range(levels))
    closing = b"".join(b"}" if i % 2 == 0 else b"]" for i in reversed(range(levels)))
    return opening + leaf + closing


# (route, body around the nested value): every place a client can put arbitrary JSON.
NESTED_AT = {
    "job payload": ("/api/v1/jobs", b'{"task_name": "t", "payload": %s}'),
    "job metadata": ("/api/v1/jobs", b'{"task_name": "t", "metadata": %s}'),
    "batch item payload": ("/api/v1/jobs/batch", b'{"jobs": [{"task_name": "t", "payload": %s}]}'),
    "workflow context": (
        "/api/v1/workflows",
        b'{"name": "w", "context": %s, "steps": [{"name": "a", "task_name": "t"}]}',
    ),
    "workflow when": (
        "/api/v1/workflows",
        b'{"name": "w", "steps": [{"name": "a", "task_name": "t", "when": {"all": %s}}]}',
    ),
    "cron payload": (
        "/api/v1/cron",
        b'{"name": "c", "cron_expr": "* * * * *", "task_name": "t", "payload": %s}',
    ),
}


@pytest.mark.parametrize("where", NESTED_AT)
@pytest.mark.parametrize("leaf", [b"1", b'"\\u0000"'], ids=["number", "NUL"])
async def test_json_nested_deeper_than_100_levels_is_400_and_writes_nothing(api, where, leaf):
    """Up to about 1,000 levels JSON decodes fine, but every layer below would then recurse that
    deep (a NUL check, jsonb encoding, conditions in the advancer): refused at the door."""
    client = await api()
    path, shape = NESTED_AT[where]
    for levels in (120, 400, 990):
        resp = await client.post(path, data=shape % _nested(levels, leaf), headers=JSON)
        await expect_error(resp, 400, "validation error: JSON nested deeper than 100 levels")
    await _assert_nothing_written(client)
    assert await count(client, "workflows") == 0


async def test_json_nested_100_levels_deep_is_accepted_and_kept(api):
    client = await api()
    body = b'{"task_name": "t", "payload": %s}' % _nested(99)  # the body's braces make it 100
    resp = await client.post("/api/v1/jobs", data=body, headers=JSON)
    assert resp.status == 201, await resp.text()
    job = await (await client.get(f"/api/v1/jobs/{(await resp.json())['job_id']}", headers=DEV)).json()
    assert json.dumps(job["payload"], separators=(", ", ": ")).encode() == _nested(99)
    too_deep = b'{"task_name": "t", "payload": %s}' % _nested(100)
    await expect_error(await client.post("/api/v1/jobs", data=too_deep, headers=JSON), 400)


async def test_oversized_body_is_413_with_the_error_body_and_writes_nothing(api):
    client = await api(max_body_bytes=4096)
    body = {"task_name": "t", "payload": {"blob": "x" * 8192}}
    await expect_error(await client.post("/api/v1/jobs", json=body, headers=DEV), 413)
    batch = {"jobs": [{"task_name": "t", "payload": {"blob": "x" * 100}}] * 100}
    await expect_error(await client.post("/api/v1/jobs/batch", json=batch, headers=DEV), 413)
    await _assert_nothing_written(client)
    assert (await client.post("/api/v1/jobs", json={"task_name": "t"}, headers=DEV)).status == 201


# --- POST /jobs/batch ------------------------------------------------------------------------------

BAD_BATCHES: dict[str, object] = {
    "jobs missing": {},
    "jobs is an object": {"jobs": {"task_name": "t"}},
    "jobs is a string": {"jobs": "t"},
    "jobs is null": {"jobs": None},
    "empty batch": {"jobs": []},
    "over the cap": {"jobs": [{"task_name": "t"}] * 6},
    "item not an object": {"jobs": [{"task_name": "t"}, "u"]},
    "item with a blank task_name": {"jobs": [{"task_name": "t"}, {"task_name": ""}]},
    "item with an unknown field": {"jobs": [{"task_name": "t", "nope": 1}]},
    "item out of range": {"jobs": [{"task_name": "t"}, {"task_name": "t", "config": {"timeout": 0}}]},
    "item with a list payload": {"jobs": [{"task_name": "t", "payload": []}]},
    "unknown top-level field": {"jobs": [{"task_name": "t"}], "extra": True},
    "body is a list": [{"task_name": "t"}],
}


@pytest.mark.parametrize("body", BAD_BATCHES.values(), ids=BAD_BATCHES.keys())
async def test_invalid_batch_is_400_and_writes_nothing(api, body):
    client = await api(max_batch=5)
    resp = await client.post("/api/v1/jobs/batch", data=json.dumps(body), headers=JSON)
    await expect_error(resp, 400, "validation error: ")
    await _assert_nothing_written(client)


# --- POST /jobs/cancel -----------------------------------------------------------------------------

BAD_CANCELS: dict[str, object] = {
    "terminal status": {"status": "completed"},
    "unknown status": {"status": "nope"},
    "limit 0": {"limit": 0},
    "limit as a string": {"limit": "10"},
    "limit over max_batch": {"limit": 6},
    "bad created_after": {"created_after": "yesterday"},
    "unknown field": {"tenant": "other"},
    "body is a list": [],
}


@pytest.mark.parametrize("body", BAD_CANCELS.values(), ids=BAD_CANCELS.keys())
async def test_invalid_cancel_by_filter_is_400_and_cancels_nothing(api, body):
    client = await api(max_batch=5)
    await create_job(client)
    resp = await client.post("/api/v1/jobs/cancel", data=json.dumps(body), headers=JSON)
    await expect_error(resp, 400, "validation error: ")
    assert await count(client, "jobs", "status = 'pending'") == 1


# --- query strings ---------------------------------------------------------------------------------

BAD_QUERIES = {
    "bad created_after": "created_after=yesterday",
    "bad created_before": "created_before=2024-13-45T00:00:00Z",
    "unknown status": "status=done",
    "limit not a number": "limit=ten",
    "offset not a number": "offset=1.5",
    "include_total not a bool": "include_total=maybe",
    "cursor garbage": "cursor=garbage",
    "cursor without an id": "cursor=1700000000000000:",
    "cursor with a bad id": "cursor=1700000000000000:not-a-uuid",
    "cursor with a bad time": "cursor=abc:00000000-0000-4000-8000-000000000000",
    "cursor out of range": "cursor=99999999999999999999999:00000000-0000-4000-8000-000000000000",
}


@pytest.mark.parametrize("query", BAD_QUERIES.values(), ids=BAD_QUERIES.keys())
async def test_bad_job_list_query_is_400(api, query):
    client = await api()
    await create_job(client)
    await expect_error(await client.get(f"/api/v1/jobs?{query}", headers=DEV), 400, "validation error: ")


async def test_malformed_cursor_message_is_invalid_cursor(api):
    client = await api()
    resp = await client.get("/api/v1/jobs?cursor=garbage", headers=DEV)
    assert await expect_error(resp, 400) == "validation error: invalid cursor"
    resp = await client.get("/api/v1/dlq?cursor=1700000000000000:not-an-int", headers=DEV)
    assert await expect_error(resp, 400) == "validation error: invalid cursor"


async def test_offset_beyond_bigint_is_a_400_about_the_offset(api):
    client = await api()
    resp = await client.get(f"/api/v1/jobs?offset={2**70}", headers=DEV)
    assert "offset" in await expect_error(resp, 400, "validation error: ")


@pytest.mark.parametrize(
    ("name", "value", "status"),
    [
        ("limit", 2**63, 400),
        ("offset", 10_000, 200),  # (deeper is refused: tests/api/test_caps.py)
        ("limit", -(2**63), 200),
        ("offset", -(2**63) - 1, 400),
    ],
)
async def test_paging_numbers_are_64_bit_integers_as_documented(api, name, value, status):
    client = await api()
    resp = await client.get(f"/api/v1/jobs?{name}={value}", headers=DEV)
    assert resp.status == status, await resp.text()


@pytest.mark.parametrize(
    "query", ["created_after=yesterday", "cursor=garbage", "replayed=perhaps", "limit=x"]
)
async def test_bad_dead_letter_list_query_is_400(api, query):
    client = await api()
    await expect_error(await client.get(f"/api/v1/dlq?{query}", headers=DEV), 400, "validation error: ")


# --- path parameters -------------------------------------------------------------------------------

BAD_JOB_IDS = ["not-a-uuid", "123", "00000000-0000-4000-8000-00000000000", "%20", "'; DROP TABLE x; --"]


@pytest.mark.parametrize("job_id", BAD_JOB_IDS)
async def test_invalid_job_id_in_a_tenant_path_is_404(api, job_id):
    client = await api()
    for method, suffix in (("GET", ""), ("POST", "/cancel"), ("GET", "/events")):
        resp = await client.request(method, f"/api/v1/jobs/{job_id}{suffix}", headers=DEV)
        await expect_error(resp, 404, "job not found: ")


@pytest.mark.parametrize("route", ["heartbeat", "complete", "fail"])
async def test_invalid_job_id_in_a_worker_path_is_404(api, route):
    client = await api()
    token = "00000000-0000-4000-8000-000000000000"
    body = {
        "heartbeat": {"lease_token": token, "extend_secs": 5},
        "complete": {"lease_token": token},
        "fail": {"lease_token": token, "error": "x"},
    }[route]
    resp = await client.post(f"/api/v1/jobs/not-a-uuid/{route}", json=body, headers=DEV)
    await expect_error(resp, 404, "job not found: ")


async def test_complete_with_a_non_object_result_is_400_and_leaves_the_job_running(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-res"})
    token = await lease_one(client, "q-res", job_id)
    for result in ([1, 2], "done", 3):
        resp = await client.post(
            f"/api/v1/jobs/{job_id}/complete", json={"lease_token": token, "result": result}, headers=DEV
        )
        await expect_error(resp, 400, "validation error: ")
    assert await count(client, "jobs", "status = 'running'") == 1


@pytest.mark.parametrize("dl_id", ["abc", "1.0", "-", "0x10"])
async def test_non_integer_dead_letter_path_id_is_400(api, dl_id):
    client = await api()
    _, real = await make_dead_letter(client, "q-path")
    await expect_error(await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV), 400, "validation error: ")
    await expect_error(
        await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV), 400, "validation error: "
    )
    assert await count(client, "dead_letters", "replayed_at IS NULL") == 1
    assert real > 0


@pytest.mark.parametrize("dl_id", [str(2**63), str(2**64 + 5), "-9223372036854775809"])
async def test_dead_letter_id_beyond_int64_is_404_not_500(api, dl_id):
    client = await api()
    await expect_error(await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV), 404)
    await expect_error(await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV), 404)


# --- routing ---------------------------------------------------------------------------------------


async def test_unknown_route_is_404_with_the_error_body(api):
    client = await api()
    await expect_error(await client.get("/api/v1/nothing-here", headers=DEV), 404)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/api/v1/jobs"),
        ("PUT", "/api/v1/jobs/batch"),
        ("DELETE", "/api/v1/jobs/00000000-0000-4000-8000-000000000000"),
        ("PUT", "/api/v1/dlq"),
        ("GET", "/api/v1/queues/default/lease"),
    ],
)
async def test_wrong_method_is_405_with_the_error_body(api, method, path):
    client = await api()
    await expect_error(await client.request(method, path, headers=DEV), 405)
    await _assert_nothing_written(client)


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/api/v1/jobs", {"GET", "POST"}),
        ("PUT", "/api/v1/jobs/00000000-0000-4000-8000-000000000000", {"GET"}),
        ("GET", "/api/v1/queues/default/lease", {"POST"}),
        ("TRACE", "/api/v1/cron", {"GET", "POST"}),
        # A fixed segment is never taken for an id: these name the batch, bulk and replay routes.
        ("GET", "/api/v1/jobs/batch", {"POST"}),
        ("PUT", "/api/v1/jobs/batch", {"POST"}),
        ("GET", "/api/v1/jobs/cancel", {"POST"}),
        ("GET", "/api/v1/dlq/replay", {"POST"}),
        # A path with a tenant route and a worker route: the worker routes are added first.
        ("PUT", "/api/v1/jobs/00000000-0000-4000-8000-000000000000/logs", {"GET", "POST"}),
        ("GET", "/api/v1/jobs/complete", {"POST"}),
    ],
)
async def test_a_405_names_the_methods_the_resource_takes_in_allow(api, method, path, allowed):
    """RFC 9110: a 405 carries Allow, and lists exactly the methods of that resource."""
    client = await api()
    resp = await client.request(method, path, headers=DEV)
    await expect_error(resp, 405)
    assert set(resp.headers["Allow"].split(",")) == allowed


async def test_a_fixed_segment_after_the_jobs_prefix_is_no_job_id(api):
    client = await api()
    await expect_error(await client.post("/api/v1/jobs/batch/cancel", headers=DEV), 404, "not found")
    # Anything else still names a job (and a job id that is not a UUID names none).
    await expect_error(await client.get("/api/v1/jobs/batches", headers=DEV), 404, "job not found: ")


# --- bodies ----------------------------------------------------------------------------------------

BODY_ROUTES = [r for r in ROUTES if r.request is not None]


@pytest.mark.parametrize("route", BODY_ROUTES, ids=[r.operation_id for r in BODY_ROUTES])
@pytest.mark.parametrize("raw", [b"", b" \r\n"], ids=["none", "blank"])
async def test_a_route_that_takes_a_body_refuses_a_request_without_one(api, route, raw):
    """The document marks every request body required: none at all is a 400 with the error body,
    before anything is written (`{}` is the body whose fields all take their defaults)."""
    client = await api()
    job_id = await create_job(client)
    path = route.path.replace("{id}", job_id).replace("{queue}", "default").replace("{key}", "k")
    resp = await client.request(route.method, path, data=raw, headers=DEV)
    assert await expect_error(resp, 400) == "validation error: a JSON body is required"
    assert await count(client, "jobs") == 1
    assert await count(client, "jobs", "status = 'pending'") == 1


async def test_an_integral_float_is_taken_where_an_integer_belongs(api):
    """JSON Schema (and so the OpenAPI document) counts 3.0 as an integer; 3.5 stays a 400."""
    client = await api()
    resp = await client.post(
        "/api/v1/jobs",
        json={"task_name": "t", "payload": {"x": 1.5}, "config": {"max_retries": 3.0, "jitter_factor": 1.0}},
        headers=DEV,
    )
    assert resp.status == 201
    job = await (await client.get(f"/api/v1/jobs/{(await resp.json())['job_id']}", headers=DEV)).json()
    assert job["config"]["max_retries"] == 3 and job["payload"] == {"x": 1.5}
    resp = await client.post("/api/v1/jobs/cancel", json={"limit": 10.0}, headers=DEV)
    assert resp.status == 200
    resp = await client.post(
        "/api/v1/jobs", json={"task_name": "t", "config": {"max_retries": 3.5}}, headers=DEV
    )
    await expect_error(resp, 400, "validation error: expected `int | null`, got `float`")
