"""Tenant job routes: create, batch, idempotency, get, list (paging, filters, cursors), cancel
(one and by filter). The worker protocol's semantics are tested in tests/protocol."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tests.api.helpers import (
    ACME,
    DEV,
    GLOBEX,
    STRICT,
    complete_job,
    count,
    create_batch,
    create_job,
    expect_error,
    get_job,
    iso,
    lease_one,
    list_json,
    parse_time,
    set_created_at,
)
from tests.support.api import database_of

DEFAULT_CONFIG = {
    "priority": 0,
    "max_retries": 3,
    "timeout_secs": 300,
    "retry_backoff": "exponential",
    "retry_delay_secs": 60,
    "retry_max_delay_secs": 3600,
    "jitter_factor": 0.1,
}


async def _set_created_at(client, ids: list) -> list[datetime]:
    return await set_created_at(client, "jobs", "uuid", ids)


# --- create ----------------------------------------------------------------------------------------


async def test_create_job_returns_201_with_only_the_job_id(api):
    client = await api()
    resp = await client.post("/api/v1/jobs", json={"task_name": "echo"}, headers=DEV)
    assert resp.status == 201
    body = await resp.json()
    assert list(body) == ["job_id"]
    assert await count(client, "jobs", "id = $1::uuid", body["job_id"]) == 1


async def test_created_job_is_pending_with_defaults_and_omits_absent_optional_fields(api):
    client = await api()
    job_id = await create_job(client, task_name="echo")
    job = await get_job(client, job_id)
    assert job["id"] == job_id
    assert job["task_name"] == "echo"
    assert job["queue_name"] == "default"
    assert job["status"] == "pending"
    assert job["payload"] == {}
    assert job["metadata"] == {}
    assert job["config"] == DEFAULT_CONFIG
    assert job["retry_count"] == 0
    assert job["delivery_count"] == 0
    assert job["tenant_id"] == "tenant1"
    assert parse_time(job["scheduled_at"]) == parse_time(job["created_at"])
    for absent in (
        "started_at",
        "completed_at",
        "next_retry_at",
        "error_message",
        "result",
        "idempotency_key",
        "workflow_id",
        "workflow_step_id",
    ):
        assert absent not in job, absent


async def test_create_job_applies_config_overrides_and_queue(api):
    client = await api()
    config = {
        "queue": "emails",
        "priority": 7,
        "max_retries": 0,
        "timeout": 30,
        "retry_backoff": "linear",
        "retry_delay_secs": 5,
        "retry_max_delay_secs": 50,
        "jitter_factor": 0.0,
    }
    job = await get_job(
        client, await create_job(client, task_name="send", payload={"to": "a@b"}, config=config)
    )
    assert job["queue_name"] == "emails"
    assert job["payload"] == {"to": "a@b"}
    assert job["config"] == {
        "priority": 7,
        "max_retries": 0,
        "timeout_secs": 30,
        "retry_backoff": "linear",
        "retry_delay_secs": 5,
        "retry_max_delay_secs": 50,
        "jitter_factor": 0.0,
    }


async def test_partial_config_fills_every_other_field_with_its_default(api):
    client = await api()
    job = await get_job(client, await create_job(client, config={"max_retries": 9}))
    assert job["config"] == {**DEFAULT_CONFIG, "max_retries": 9}


async def test_null_fields_in_a_create_mean_absent(api):
    client = await api()
    job = await get_job(client, await create_job(client, payload=None, config=None, run_at=None))
    assert job["payload"] == {}
    assert job["config"] == DEFAULT_CONFIG


async def test_config_bounds_are_inclusive(api):
    client = await api()
    config = {
        "priority": 2**31 - 1,
        "max_retries": 1000,
        "timeout": 86400,
        "retry_delay_secs": 2592000,
        "retry_max_delay_secs": 2592000,
        "jitter_factor": 1.0,
    }
    job = await get_job(client, await create_job(client, config=config))
    assert job["config"]["priority"] == 2**31 - 1
    assert job["config"]["timeout_secs"] == 86400
    low = await get_job(
        client,
        await create_job(
            client, config={"priority": -(2**31), "max_retries": 0, "timeout": 1, "jitter_factor": 0}
        ),
    )
    assert low["config"]["priority"] == -(2**31)
    assert low["config"]["max_retries"] == 0


async def test_run_at_sets_scheduled_at(api):
    client = await api()
    run_at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    job = await get_job(client, await create_job(client, run_at=iso(run_at)))
    assert parse_time(job["scheduled_at"]) == run_at
    assert job["status"] == "pending"


async def test_run_at_with_an_offset_is_normalised_to_the_same_instant(api):
    client = await api()
    job = await get_job(client, await create_job(client, run_at="2031-06-01T12:00:00+02:00"))
    assert parse_time(job["scheduled_at"]) == datetime(2031, 6, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize("run_at", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"])
async def test_run_at_at_the_edge_of_the_calendar_is_rejected_or_kept_as_that_utc_instant(api, run_at):
    """Never silently turned into +/-infinity and echoed back without an offset."""
    client = await api()
    resp = await client.post("/api/v1/jobs", json={"task_name": "t", "run_at": run_at}, headers=DEV)
    if resp.status == 400:
        await expect_error(resp, 400, "validation error: ")
        return
    assert resp.status == 201, await resp.text()
    job = await get_job(client, (await resp.json())["job_id"])
    scheduled = parse_time(job["scheduled_at"])
    assert scheduled.tzinfo is not None, job["scheduled_at"]
    assert scheduled == parse_time(run_at)
    stored = await database_of(client).pool.fetchval("SELECT isfinite(scheduled_at) FROM queueflow.jobs")
    assert stored is True


async def test_create_keeps_metadata_extension(api):
    client = await api()
    job = await get_job(client, await create_job(client, metadata={"owner": "ops", "n": [1, 2]}))
    assert job["metadata"] == {"owner": "ops", "n": [1, 2]}


# --- idempotency -----------------------------------------------------------------------------------


async def test_same_idempotency_key_same_tenant_returns_the_same_job_once(api):
    client = await api()
    headers = {**DEV, "Idempotency-Key": "order-42"}
    first = await client.post("/api/v1/jobs", json={"task_name": "a"}, headers=headers)
    second = await client.post("/api/v1/jobs", json={"task_name": "a", "payload": {"x": 1}}, headers=headers)
    assert first.status == second.status == 201
    assert (await first.json())["job_id"] == (await second.json())["job_id"]
    assert await count(client, "jobs") == 1
    job = await get_job(client, (await first.json())["job_id"])
    assert job["idempotency_key"] == "order-42"
    assert job["payload"] == {}  # the original wins


async def test_concurrent_creates_with_one_idempotency_key_make_one_job(api):
    client = await api()
    headers = {**DEV, "Idempotency-Key": "race"}
    resps = await asyncio.gather(
        *(client.post("/api/v1/jobs", json={"task_name": "a"}, headers=headers) for _ in range(10))
    )
    assert {r.status for r in resps} == {201}
    assert len({(await r.json())["job_id"] for r in resps}) == 1
    assert await count(client, "jobs") == 1


async def test_idempotency_key_is_trimmed(api):
    client = await api()
    a = await create_job(client, {**DEV, "Idempotency-Key": "k1"})
    b = await create_job(client, {**DEV, "Idempotency-Key": "  k1  "})
    assert a == b
    assert await count(client, "jobs") == 1


async def test_blank_idempotency_key_is_ignored(api):
    client = await api()
    a = await create_job(client, {**DEV, "Idempotency-Key": "   "})
    b = await create_job(client, {**DEV, "Idempotency-Key": ""})
    assert a != b
    assert "idempotency_key" not in await get_job(client, a)


async def test_same_idempotency_key_in_two_tenants_makes_two_jobs(api):
    client = await api(**STRICT)
    a = await create_job(client, {**ACME, "Idempotency-Key": "shared"})
    b = await create_job(client, {**GLOBEX, "Idempotency-Key": "shared"})
    assert a != b
    assert await count(client, "jobs") == 2
    assert (await get_job(client, a, ACME))["tenant_id"] == "acme"
    assert (await get_job(client, b, GLOBEX))["tenant_id"] == "globex"


async def test_idempotency_key_still_dedupes_after_the_job_finished(api):
    client = await api()
    headers = {**DEV, "Idempotency-Key": "once"}
    job_id = await create_job(client, headers, config={"queue": "q-idem"})
    await complete_job(client, job_id, await lease_one(client, "q-idem", job_id))
    assert await create_job(client, headers, config={"queue": "q-idem"}) == job_id
    assert await count(client, "jobs") == 1


async def test_idempotency_key_longer_than_255_is_400_and_writes_nothing(api):
    client = await api()
    resp = await client.post(
        "/api/v1/jobs", json={"task_name": "a"}, headers={**DEV, "Idempotency-Key": "k" * 256}
    )
    await expect_error(resp, 400, "validation error: ")
    assert await count(client, "jobs") == 0


# --- batch -----------------------------------------------------------------------------------------


async def test_batch_returns_ids_in_input_order_and_count(api):
    client = await api()
    items = [{"task_name": f"t{i}", "payload": {"i": i}} for i in range(5)]
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": items}, headers=DEV)
    assert resp.status == 201
    body = await resp.json()
    assert body["count"] == 5 == len(body["job_ids"]) == len(set(body["job_ids"]))
    for i, job_id in enumerate(body["job_ids"]):
        job = await get_job(client, job_id)
        assert (job["task_name"], job["payload"], job["tenant_id"]) == (f"t{i}", {"i": i}, "tenant1")
    assert await count(client, "jobs") == 5


async def test_batch_items_carry_their_own_config_queue_run_at_and_metadata(api):
    client = await api()
    run_at = datetime(2032, 1, 1, tzinfo=UTC)
    ids = await create_batch(
        client,
        [
            {"task_name": "a", "config": {"queue": "q1", "priority": 3}, "metadata": {"m": 1}},
            {"task_name": "b", "run_at": iso(run_at)},
        ],
    )
    a, b = [await get_job(client, i) for i in ids]
    assert (a["queue_name"], a["config"]["priority"], a["metadata"]) == ("q1", 3, {"m": 1})
    assert (b["queue_name"], b["config"], parse_time(b["scheduled_at"])) == (
        "default",
        DEFAULT_CONFIG,
        run_at,
    )


async def test_batch_item_idempotency_keys_are_kept_and_dedupe(api):
    client = await api()
    existing = await create_job(client, {**DEV, "Idempotency-Key": "old"})
    ids = await create_batch(
        client,
        [
            {"task_name": "a", "idempotency_key": "new"},
            {"task_name": "b", "idempotency_key": "old"},
            {"task_name": "c", "idempotency_key": "new"},
            {"task_name": "d"},
        ],
    )
    assert ids[1] == existing
    assert ids[0] == ids[2] != ids[3]
    assert (await get_job(client, ids[0]))["idempotency_key"] == "new"
    assert await count(client, "jobs") == 3


async def test_batch_respects_max_batch_exactly(api):
    client = await api(max_batch=5)
    assert len(await create_batch(client, [{"task_name": "x"}] * 5)) == 5
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": [{"task_name": "x"}] * 6}, headers=DEV)
    assert "5" in await expect_error(resp, 400, "validation error: ")
    assert await count(client, "jobs") == 5


async def test_batch_with_one_invalid_item_names_it_and_writes_nothing(api):
    client = await api()
    items = [{"task_name": "ok"}, {"task_name": "bad", "config": {"max_retries": 5000}}]
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": items}, headers=DEV)
    await expect_error(resp, 400, "validation error: ")
    items = [{"task_name": "ok"}, {"task_name": "  "}]
    resp = await client.post("/api/v1/jobs/batch", json={"jobs": items}, headers=DEV)
    assert "jobs[1]" in await expect_error(resp, 400, "validation error: ")
    assert await count(client, "jobs") == 0


# --- get -------------------------------------------------------------------------------------------


async def test_get_unknown_job_is_404_naming_the_id(api):
    client = await api()
    missing = "00000000-0000-4000-8000-000000000000"
    resp = await client.get(f"/api/v1/jobs/{missing}", headers=DEV)
    assert await expect_error(resp, 404) == f"job not found: {missing}"


async def test_job_without_tenant_is_visible_to_no_tenant(api):
    client = await api()
    job_id = await create_job(client)
    await database_of(client).pool.execute(
        "UPDATE queueflow.jobs SET tenant_id = NULL WHERE id = $1::uuid", job_id
    )
    await expect_error(await client.get(f"/api/v1/jobs/{job_id}", headers=DEV), 404)
    await expect_error(await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV), 404)
    assert (await list_json(client, "/api/v1/jobs"))["jobs"] == []
    resp = await client.post("/api/v1/jobs/cancel", json={}, headers=DEV)
    assert (await resp.json()) == {"cancelled": 0}
    assert await count(client, "jobs", "status = 'pending'") == 1


# --- list ------------------------------------------------------------------------------------------


async def test_list_defaults_newest_first_limit_50_and_no_total(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 3)
    await _set_created_at(client, ids)
    body = await list_json(client, "/api/v1/jobs")
    assert [j["id"] for j in body["jobs"]] == ids[::-1]
    assert (body["limit"], body["offset"], body["has_more"]) == (50, 0, False)
    assert "total" not in body and "next_cursor" not in body


async def test_list_has_more_and_next_cursor_only_when_more_rows_exist(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 3)
    await _set_created_at(client, ids)
    page = await list_json(client, "/api/v1/jobs", limit=2)
    assert [j["id"] for j in page["jobs"]] == [ids[2], ids[1]]
    assert page["has_more"] is True
    assert "total" not in page
    assert isinstance(page["next_cursor"], str)
    exact = await list_json(client, "/api/v1/jobs", limit=3)
    assert exact["has_more"] is False and "next_cursor" not in exact


async def test_list_include_total_counts_the_filtered_set(api):
    client = await api()
    await create_batch(client, [{"task_name": "a"}] * 3 + [{"task_name": "b"}])
    body = await list_json(client, "/api/v1/jobs", limit=1, include_total=True, task_name="a")
    assert body["total"] == 3
    assert len(body["jobs"]) == 1 and body["has_more"] is True
    assert "total" not in await list_json(client, "/api/v1/jobs", include_total=False)


@pytest.mark.parametrize(
    ("raw", "effective"), [("0", 1), ("-5", 1), ("1", 1), ("100", 100), ("101", 100), ("100000", 100)]
)
async def test_list_limit_is_clamped_to_1_through_100(api, raw, effective):
    client = await api()
    await create_batch(client, [{"task_name": "t"}] * 2)
    body = await list_json(client, "/api/v1/jobs", limit=raw)
    assert body["limit"] == effective
    assert len(body["jobs"]) == min(2, effective)


async def test_list_negative_offset_becomes_zero_and_offset_skips_rows(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 4)
    await _set_created_at(client, ids)
    assert (await list_json(client, "/api/v1/jobs", offset=-3))["offset"] == 0
    body = await list_json(client, "/api/v1/jobs", offset=1, limit=2)
    assert body["offset"] == 1
    assert [j["id"] for j in body["jobs"]] == [ids[2], ids[1]]
    assert body["has_more"] is True


async def test_list_order_by_created_at_asc_is_oldest_first_and_anything_else_is_desc(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 3)
    await _set_created_at(client, ids)
    asc = await list_json(client, "/api/v1/jobs", order_by="created_at ASC")
    assert [j["id"] for j in asc["jobs"]] == ids
    other = await list_json(client, "/api/v1/jobs", order_by="task_name")
    assert [j["id"] for j in other["jobs"]] == ids[::-1]


@pytest.mark.parametrize("order_by", [None, "created_at ASC"])
async def test_cursor_paging_reproduces_the_full_listing(api, order_by):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 7)
    # Two rows share a creation instant: the id breaks the tie.
    stamps = await _set_created_at(client, ids)
    await database_of(client).pool.execute(
        "UPDATE queueflow.jobs SET created_at = $2 WHERE id = $1::uuid", ids[4], stamps[3]
    )
    params = {} if order_by is None else {"order_by": order_by}
    full = [j["id"] for j in (await list_json(client, "/api/v1/jobs", **params))["jobs"]]
    assert sorted(full) == sorted(ids)
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        extra = {"cursor": cursor, "offset": 1000} if cursor else {}
        page = await list_json(client, "/api/v1/jobs", limit=2, **params, **extra)
        seen += [j["id"] for j in page["jobs"]]
        pages += 1
        if not page["has_more"]:
            assert "next_cursor" not in page
            break
        cursor = page["next_cursor"]
    assert seen == full
    assert pages == 4


async def test_list_filters_by_status_queue_and_task_name(api):
    client = await api()
    ids = await create_batch(
        client,
        [
            {"task_name": "a", "config": {"queue": "q1"}},
            {"task_name": "b", "config": {"queue": "q1"}},
            {"task_name": "a", "config": {"queue": "q2"}},
        ],
    )
    await client.post(f"/api/v1/jobs/{ids[1]}/cancel", headers=DEV)

    async def listed(**params):
        return sorted(j["id"] for j in (await list_json(client, "/api/v1/jobs", **params))["jobs"])

    assert await listed(queue="q1") == sorted(ids[:2])
    assert await listed(task_name="a") == sorted([ids[0], ids[2]])
    assert await listed(status="cancelled") == [ids[1]]
    assert await listed(status="pending", queue="q1") == [ids[0]]
    assert await listed(status="completed") == []


async def test_list_id_contains_finds_the_jobs_whose_id_holds_that_piece_dashes_and_case_ignored(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 3)
    target = ids[1]

    async def listed(fragment: str, **params) -> list[str]:
        body = await list_json(client, "/api/v1/jobs", id_contains=fragment, **params)
        return [j["id"] for j in body["jobs"]]

    tail = target[-12:]  # the random part of a UUIDv7, which jobs made together do not share
    assert await listed(tail) == [target]
    assert await listed(tail.upper()) == [target]
    assert await listed(target[20:30]) == [target]  # across a dash: "8abc-12345" ...
    assert await listed(target[20:30].replace("-", "")) == [target]  # ... or without it
    assert await listed(target) == [target]  # a whole id, with or without its dashes
    assert await listed(target.replace("-", "")) == [target]
    assert await listed(target, status="completed") == []  # with the other filters
    assert sorted(await listed("")) == sorted(ids)  # empty is no filter
    assert sorted(await listed("-")) == sorted(ids)
    assert await listed("0" * 33) == []  # more digits than an id has
    assert (await list_json(client, "/api/v1/jobs", id_contains=tail, include_total=True))["total"] == 1


@pytest.mark.parametrize("fragment", ["xyz", "0199-zz", "0" * 37, "a b", "%", "_"])
async def test_list_id_contains_anything_but_36_hex_digits_and_dashes_is_400(api, fragment):
    client = await api()
    resp = await client.get("/api/v1/jobs", params={"id_contains": fragment}, headers=DEV)
    message = await expect_error(resp, 400, "validation error: ")
    assert "id_contains" in message


async def test_list_id_contains_finds_only_the_callers_jobs(api):
    client = await api(**STRICT)
    theirs = await create_job(client, GLOBEX)
    for fragment in (theirs, theirs[-12:]):
        body = await list_json(client, "/api/v1/jobs", ACME, id_contains=fragment)
        assert body["jobs"] == [], fragment
    assert [
        j["id"] for j in (await list_json(client, "/api/v1/jobs", GLOBEX, id_contains=theirs))["jobs"]
    ] == [theirs]


async def test_list_unknown_status_is_400(api):
    client = await api()
    await expect_error(await client.get("/api/v1/jobs?status=done", headers=DEV), 400, "validation error: ")


async def test_created_after_is_inclusive_and_created_before_is_exclusive(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 4)
    stamps = await _set_created_at(client, ids)

    async def listed(**params):
        body = await list_json(
            client, "/api/v1/jobs", include_total=True, order_by="created_at ASC", **params
        )
        assert body["total"] == len(body["jobs"])
        return [j["id"] for j in body["jobs"]]

    assert await listed(created_after=iso(stamps[1])) == ids[1:]
    assert await listed(created_before=iso(stamps[1])) == ids[:1]
    assert await listed(created_after=iso(stamps[1]), created_before=iso(stamps[3])) == ids[1:3]
    assert await listed(created_after=iso(stamps[3] + timedelta(microseconds=1))) == []
    # An offset instead of Z names the same instant.
    plus_one = timezone(timedelta(hours=1))
    assert await listed(created_after=stamps[2].astimezone(plus_one).isoformat()) == ids[2:]


async def test_list_is_scoped_to_the_callers_tenant(api):
    client = await api(**STRICT)
    mine = await create_job(client, ACME)
    await create_job(client, GLOBEX)
    body = await list_json(client, "/api/v1/jobs", ACME, include_total=True)
    assert [j["id"] for j in body["jobs"]] == [mine]
    assert body["total"] == 1


# --- cancel one ------------------------------------------------------------------------------------


async def test_cancel_pending_job_is_204_and_marks_it_cancelled(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-cancel"})
    resp = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)
    assert resp.status == 204
    assert await resp.read() == b""
    job = await get_job(client, job_id)
    assert job["status"] == "cancelled"
    assert "completed_at" in job
    lease = await client.post("/api/v1/queues/q-cancel/lease", json={}, headers=DEV)
    assert (await lease.json())["jobs"] == []


async def test_cancel_running_job_is_204_and_cancelled(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-run"})
    await lease_one(client, "q-run", job_id)
    assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)).status == 204
    assert (await get_job(client, job_id))["status"] == "cancelled"
    assert await count(client, "dead_letters") == 0


async def test_cancel_cancelled_job_is_409(api):
    client = await api()
    job_id = await create_job(client)
    assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)).status == 204
    resp = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)
    assert await expect_error(resp, 409) == "conflict: job is already cancelled"


async def test_cancel_completed_job_is_409_and_leaves_it_completed(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-done"})
    await complete_job(client, job_id, await lease_one(client, "q-done", job_id), {"ok": True})
    resp = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)
    assert await expect_error(resp, 409) == "conflict: job is already completed"
    job = await get_job(client, job_id)
    assert (job["status"], job["result"]) == ("completed", {"ok": True})


async def test_cancel_unknown_job_is_404(api):
    client = await api()
    missing = "00000000-0000-4000-8000-000000000001"
    resp = await client.post(f"/api/v1/jobs/{missing}/cancel", headers=DEV)
    assert await expect_error(resp, 404) == f"job not found: {missing}"


# --- cancel by filter ------------------------------------------------------------------------------


async def test_cancel_by_filter_without_filters_cancels_every_active_job(api):
    client = await api()
    done = await create_job(client, config={"queue": "q-f"})
    await complete_job(client, done, await lease_one(client, "q-f", done))
    running = await create_job(client, config={"queue": "q-f"})
    await lease_one(client, "q-f", running)
    pending = await create_batch(client, [{"task_name": "t"}] * 3)
    resp = await client.post("/api/v1/jobs/cancel", json={}, headers=DEV)
    assert resp.status == 200
    assert await resp.json() == {"cancelled": 4}
    for job_id in [running, *pending]:
        assert (await get_job(client, job_id))["status"] == "cancelled"
    assert (await get_job(client, done))["status"] == "completed"


async def test_cancel_by_filter_needs_a_body_and_an_empty_object_uses_the_defaults(api):
    client = await api()
    await create_batch(client, [{"task_name": "t"}] * 2)
    resp = await client.post("/api/v1/jobs/cancel", headers=DEV)
    assert resp.status == 400
    assert (await resp.json())["error"] == "validation error: a JSON body is required"
    assert (await client.post("/api/v1/jobs/cancel", data=b"  \n", headers=DEV)).status == 400
    resp = await client.post("/api/v1/jobs/cancel", json={}, headers=DEV)
    assert resp.status == 200
    assert await resp.json() == {"cancelled": 2}


async def test_cancel_by_filter_matches_queue_task_and_status(api):
    client = await api()
    ids = await create_batch(
        client,
        [
            {"task_name": "a", "config": {"queue": "q1"}},
            {"task_name": "b", "config": {"queue": "q1"}},
            {"task_name": "a", "config": {"queue": "q2"}},
            {"task_name": "a", "config": {"queue": "q3"}},
        ],
    )
    await lease_one(client, "q3", ids[3])
    resp = await client.post("/api/v1/jobs/cancel", json={"queue": "q1", "task_name": "a"}, headers=DEV)
    assert await resp.json() == {"cancelled": 1}
    resp = await client.post("/api/v1/jobs/cancel", json={"status": "running"}, headers=DEV)
    assert await resp.json() == {"cancelled": 1}
    statuses = [(await get_job(client, i))["status"] for i in ids]
    assert statuses == ["cancelled", "pending", "pending", "cancelled"]


async def test_cancel_by_filter_honours_limit_oldest_first(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 5)
    await _set_created_at(client, ids[::-1])  # the last id is the oldest
    resp = await client.post("/api/v1/jobs/cancel", json={"limit": 2}, headers=DEV)
    assert await resp.json() == {"cancelled": 2}
    cancelled = {i for i in ids if (await get_job(client, i))["status"] == "cancelled"}
    assert cancelled == {ids[4], ids[3]}


async def test_cancel_by_filter_honours_the_created_window(api):
    client = await api()
    ids = await create_batch(client, [{"task_name": "t"}] * 4)
    stamps = await _set_created_at(client, ids)
    resp = await client.post(
        "/api/v1/jobs/cancel",
        headers=DEV,
        json={"created_after": iso(stamps[1]), "created_before": iso(stamps[3])},
    )
    assert await resp.json() == {"cancelled": 2}
    statuses = [(await get_job(client, i))["status"] for i in ids]
    assert statuses == ["pending", "cancelled", "cancelled", "pending"]


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "bogus"])
async def test_cancel_by_filter_with_a_terminal_or_unknown_status_is_400(api, status):
    client = await api()
    await create_job(client)
    resp = await client.post("/api/v1/jobs/cancel", json={"status": status}, headers=DEV)
    await expect_error(resp, 400, "validation error: ")
    assert await count(client, "jobs", "status = 'pending'") == 1


async def test_cancel_by_filter_limit_above_max_batch_is_400(api):
    client = await api(max_batch=5)
    await create_job(client)
    await expect_error(
        await client.post("/api/v1/jobs/cancel", json={"limit": 6}, headers=DEV), 400, "validation error: "
    )
    await expect_error(
        await client.post("/api/v1/jobs/cancel", json={"limit": 0}, headers=DEV), 400, "validation error: "
    )
    assert await count(client, "jobs", "status = 'pending'") == 1


async def test_cancel_by_filter_only_touches_the_callers_tenant(api):
    client = await api(**STRICT)
    mine = await create_job(client, ACME)
    theirs = await create_job(client, GLOBEX)
    resp = await client.post("/api/v1/jobs/cancel", json={}, headers=ACME)
    assert await resp.json() == {"cancelled": 1}
    assert (await get_job(client, mine, ACME))["status"] == "cancelled"
    assert (await get_job(client, theirs, GLOBEX))["status"] == "pending"
