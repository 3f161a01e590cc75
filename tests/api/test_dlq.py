"""Dead-letter routes: list (filters, paging), get, replay one, replay many. Dead letters are produced
through the worker protocol (lease, then fail) on queues no in-process worker drains."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.api.helpers import (
    DEV,
    count,
    create_job,
    expect_error,
    fail_job,
    get_job,
    iso,
    lease,
    lease_one,
    list_json,
    make_dead_letter,
    parse_time,
    set_created_at,
)
from tests.support.api import database_of


async def _age(client, ids: list) -> list[datetime]:
    return await set_created_at(client, "dead_letters", "bigint", ids)


# --- list and get ----------------------------------------------------------------------------------


async def test_non_retryable_failure_is_listed_with_its_reason_and_no_replay_fields(api):
    client = await api()
    job_id, dl_id = await make_dead_letter(client, "q-dl", task_name="charge", payload={"n": 1})
    body = await list_json(client, "/api/v1/dlq", include_total=True)
    assert (body["limit"], body["offset"], body["has_more"], body["total"]) == (50, 0, False, 1)
    [entry] = body["dead_letters"]
    assert entry["id"] == dl_id and isinstance(entry["id"], int)
    assert entry["job_id"] == job_id
    assert entry["reason"] == "non_retryable"
    assert entry["error_message"] == "boom"
    assert (entry["queue_name"], entry["task_name"], entry["tenant_id"]) == ("q-dl", "charge", "tenant1")
    assert parse_time(entry["created_at"]).tzinfo is not None
    assert "replayed_at" not in entry and "replay_job_id" not in entry
    job = await get_job(client, job_id)
    assert (job["status"], job["error_message"]) == ("failed", "boom")


async def test_exhausted_retries_dead_letter_with_reason_max_attempts_exceeded(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-max", "max_retries": 0})
    await fail_job(client, job_id, await lease_one(client, "q-max", job_id), retryable=True, error="flaky")
    [entry] = (await list_json(client, "/api/v1/dlq"))["dead_letters"]
    assert (entry["job_id"], entry["reason"], entry["error_message"]) == (
        job_id,
        "max_attempts_exceeded",
        "flaky",
    )


async def test_retryable_failure_with_budget_left_writes_no_dead_letter(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-retry", "max_retries": 2})
    await fail_job(client, job_id, await lease_one(client, "q-retry", job_id), retryable=True)
    assert (await get_job(client, job_id))["status"] == "retrying"
    assert (await list_json(client, "/api/v1/dlq"))["dead_letters"] == []


async def test_get_dead_letter_returns_the_entry(api):
    client = await api()
    job_id, dl_id = await make_dead_letter(client, "q-get")
    resp = await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV)
    assert resp.status == 200
    entry = await resp.json()
    assert (entry["id"], entry["job_id"], entry["reason"]) == (dl_id, job_id, "non_retryable")
    listed = (await list_json(client, "/api/v1/dlq"))["dead_letters"]
    assert listed == [entry]


@pytest.mark.parametrize("dl_id", ["999999", "0", "-1", str(2**63)])
async def test_get_unknown_dead_letter_is_404(api, dl_id):
    client = await api()
    await expect_error(await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV), 404, "dead letter not found")


@pytest.mark.parametrize("dl_id", ["abc", "1.5", "1e3", "00000000-0000-4000-8000-000000000000"])
async def test_non_integer_dead_letter_id_is_400(api, dl_id):
    client = await api()
    await expect_error(await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV), 400, "validation error: ")
    await expect_error(
        await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV), 400, "validation error: "
    )


async def test_dead_letter_without_tenant_is_visible_to_no_tenant(api):
    client = await api()
    _, dl_id = await make_dead_letter(client, "q-null")
    await database_of(client).pool.execute("UPDATE queueflow.dead_letters SET tenant_id = NULL")
    await expect_error(await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV), 404)
    await expect_error(await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV), 404)
    assert (await list_json(client, "/api/v1/dlq"))["dead_letters"] == []
    assert await count(client, "dead_letters", "replayed_at IS NULL") == 1


async def test_list_is_newest_first_and_pages_with_a_cursor(api):
    client = await api()
    dl_ids = [(await make_dead_letter(client, "q-page"))[1] for _ in range(5)]
    await _age(client, dl_ids)
    full = [e["id"] for e in (await list_json(client, "/api/v1/dlq"))["dead_letters"]]
    assert full == dl_ids[::-1]
    seen: list[int] = []
    cursor = None
    while True:
        page = await list_json(client, "/api/v1/dlq", limit=2, **({"cursor": cursor} if cursor else {}))
        seen += [e["id"] for e in page["dead_letters"]]
        if not page["has_more"]:
            assert "next_cursor" not in page
            break
        cursor = page["next_cursor"]
    assert seen == full
    asc = await list_json(client, "/api/v1/dlq", order_by="created_at ASC", limit=100)
    assert [e["id"] for e in asc["dead_letters"]] == dl_ids
    assert asc["limit"] == 100


async def test_list_filters_by_queue_task_name_and_replayed(api):
    client = await api()
    _, a = await make_dead_letter(client, "q-a", task_name="x")
    _, b = await make_dead_letter(client, "q-b", task_name="x")
    _, c = await make_dead_letter(client, "q-b", task_name="y")
    assert (await client.post(f"/api/v1/dlq/{c}/replay", headers=DEV)).status == 201

    async def listed(**params):
        return sorted(e["id"] for e in (await list_json(client, "/api/v1/dlq", **params))["dead_letters"])

    assert await listed(queue="q-b") == [b, c]
    assert await listed(task_name="x") == [a, b]
    assert await listed(queue="q-b", task_name="x") == [b]
    assert await listed(replayed=True) == [c]
    assert await listed(replayed=False) == [a, b]
    assert await listed() == [a, b, c]
    # status is not a dead-letter filter: ignored, as upstream ignores it.
    assert await listed(status="pending") == [a, b, c]


async def test_list_created_window_is_half_open(api):
    client = await api()
    dl_ids = [(await make_dead_letter(client, "q-win"))[1] for _ in range(3)]
    stamps = await _age(client, dl_ids)
    body = await list_json(client, "/api/v1/dlq", created_after=iso(stamps[1]), created_before=iso(stamps[2]))
    assert [e["id"] for e in body["dead_letters"]] == [dl_ids[1]]


async def test_list_bad_replayed_value_is_400(api):
    client = await api()
    await expect_error(await client.get("/api/v1/dlq?replayed=maybe", headers=DEV), 400, "validation error: ")


# --- replay one ------------------------------------------------------------------------------------


async def test_replay_creates_a_fresh_detached_pending_job_with_the_same_work(api):
    client = await api()
    config = {"queue": "q-replay", "priority": 4, "max_retries": 0, "timeout": 77, "retry_backoff": "fixed"}
    job_id, dl_id = await make_dead_letter(
        client,
        "q-replay",
        task_name="charge",
        payload={"amount": 5},
        config=config,
        metadata={"origin": "test"},
    )
    original = await get_job(client, job_id)
    resp = await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV)
    assert resp.status == 201
    body = await resp.json()
    assert list(body) == ["job_id"]
    new = await get_job(client, body["job_id"])
    assert new["id"] != job_id
    assert new["status"] == "pending"
    assert (new["task_name"], new["payload"], new["queue_name"]) == ("charge", {"amount": 5}, "q-replay")
    assert new["config"] == original["config"]
    assert (new["retry_count"], new["delivery_count"]) == (0, 0)
    assert new["tenant_id"] == "tenant1"
    assert new["metadata"]["replayed_from_job"] == job_id
    assert new["metadata"]["origin"] == "test"
    for absent in (
        "workflow_id",
        "workflow_step_id",
        "started_at",
        "completed_at",
        "error_message",
        "result",
        "idempotency_key",
    ):
        assert absent not in new, absent
    assert (await get_job(client, job_id))["status"] == "failed"  # history is not rewritten
    entry = await (await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV)).json()
    assert entry["replay_job_id"] == body["job_id"]
    assert parse_time(entry["replayed_at"]).tzinfo is not None
    leased = await lease(client, "q-replay")
    assert [item["job"]["id"] for item in leased] == [body["job_id"]]


async def test_second_replay_is_409_and_creates_nothing(api):
    client = await api()
    _, dl_id = await make_dead_letter(client, "q-twice")
    assert (await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV)).status == 201
    await expect_error(await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV), 409, "conflict: ")
    assert await count(client, "jobs") == 2


async def test_replay_unknown_dead_letter_is_404(api):
    client = await api()
    await expect_error(
        await client.post("/api/v1/dlq/4242/replay", headers=DEV), 404, "dead letter not found"
    )
    assert await count(client, "jobs") == 0


async def test_replay_after_the_original_job_was_purged_is_404_and_leaves_the_entry_unreplayed(api):
    client = await api()
    job_id, dl_id = await make_dead_letter(client, "q-purged")
    await database_of(client).pool.execute("DELETE FROM queueflow.jobs WHERE id = $1::uuid", job_id)
    await expect_error(await client.post(f"/api/v1/dlq/{dl_id}/replay", headers=DEV), 404)
    entry = await (await client.get(f"/api/v1/dlq/{dl_id}", headers=DEV)).json()
    assert "replayed_at" not in entry and "replay_job_id" not in entry
    assert await count(client, "jobs") == 0


# --- replay many -----------------------------------------------------------------------------------


async def test_bulk_replay_replays_every_unreplayed_entry_oldest_first(api):
    client = await api()
    dl_ids = [(await make_dead_letter(client, "q-bulk", payload={"i": i}))[1] for i in range(3)]
    await _age(client, dl_ids[::-1])  # the last entry is the oldest
    resp = await client.post("/api/v1/dlq/replay", json={}, headers=DEV)
    assert resp.status == 200
    body = await resp.json()
    assert body["replayed"] == 3
    assert [r["dead_letter_id"] for r in body["results"]] == dl_ids[::-1]
    for result in body["results"]:
        assert "error" not in result
        entry = await (await client.get(f"/api/v1/dlq/{result['dead_letter_id']}", headers=DEV)).json()
        assert entry["replay_job_id"] == result["job_id"]
        job = await get_job(client, result["job_id"])
        assert (job["status"], job["metadata"]["replayed_from_job"]) == ("pending", entry["job_id"])
    again = await client.post("/api/v1/dlq/replay", json={}, headers=DEV)
    assert await again.json() == {"replayed": 0, "results": []}
    assert await count(client, "jobs") == 6


async def test_bulk_replay_needs_a_body_and_an_empty_object_uses_the_defaults(api):
    client = await api()
    await make_dead_letter(client, "q-empty")
    resp = await client.post("/api/v1/dlq/replay", headers=DEV)
    assert resp.status == 400
    assert (await resp.json())["error"] == "validation error: a JSON body is required"
    resp = await client.post("/api/v1/dlq/replay", json={}, headers=DEV)
    assert resp.status == 200
    assert (await resp.json())["replayed"] == 1


async def test_bulk_replay_skips_entries_already_replayed(api):
    client = await api()
    _, first = await make_dead_letter(client, "q-skip")
    _, second = await make_dead_letter(client, "q-skip")
    assert (await client.post(f"/api/v1/dlq/{first}/replay", headers=DEV)).status == 201
    body = await (await client.post("/api/v1/dlq/replay", json={}, headers=DEV)).json()
    assert body["replayed"] == 1
    assert [r["dead_letter_id"] for r in body["results"]] == [second]


async def test_bulk_replay_honours_queue_task_name_and_limit(api):
    client = await api()
    _, a = await make_dead_letter(client, "q-1", task_name="x")
    _, b = await make_dead_letter(client, "q-2", task_name="x")
    _, c = await make_dead_letter(client, "q-2", task_name="y")
    _, d = await make_dead_letter(client, "q-2", task_name="x")
    await _age(client, [a, b, c, d])

    async def replay(**body):
        resp = await client.post("/api/v1/dlq/replay", json=body, headers=DEV)
        assert resp.status == 200
        return [r["dead_letter_id"] for r in (await resp.json())["results"]]

    assert await replay(queue="q-2", task_name="x", limit=1) == [b]
    assert await replay(task_name="x") == [a, d]
    assert await replay(queue="q-2") == [c]
    assert await replay() == []


async def test_bulk_replay_honours_the_created_window(api):
    client = await api()
    dl_ids = [(await make_dead_letter(client, "q-bw"))[1] for _ in range(3)]
    stamps = await _age(client, dl_ids)
    resp = await client.post(
        "/api/v1/dlq/replay",
        headers=DEV,
        json={"created_after": iso(stamps[1]), "created_before": iso(stamps[2])},
    )
    assert [r["dead_letter_id"] for r in (await resp.json())["results"]] == [dl_ids[1]]


async def test_bulk_replay_reports_a_purged_original_as_an_error_result(api):
    client = await api()
    purged_job, purged = await make_dead_letter(client, "q-bp")
    _, kept = await make_dead_letter(client, "q-bp")
    await _age(client, [purged, kept])
    await database_of(client).pool.execute("DELETE FROM queueflow.jobs WHERE id = $1::uuid", purged_job)
    body = await (await client.post("/api/v1/dlq/replay", json={}, headers=DEV)).json()
    assert body["replayed"] == 1
    first, second = body["results"]
    assert first["dead_letter_id"] == purged and "job_id" not in first and first["error"]
    assert second["dead_letter_id"] == kept and second["job_id"]
    assert await count(client, "dead_letters", "id = $1 AND replayed_at IS NULL", purged) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"limit": 0},
        {"limit": 6},
        {"limit": "3"},
        {"queue": 5},
        {"bogus": 1},
        {"created_after": "yesterday"},
        [],
        "x",
    ],
)
async def test_bulk_replay_bad_body_is_400_and_replays_nothing(api, body):
    client = await api(max_batch=5)
    await make_dead_letter(client, "q-bad")
    resp = await client.post("/api/v1/dlq/replay", json=body, headers=DEV)
    await expect_error(resp, 400, "validation error: ")
    assert await count(client, "dead_letters", "replayed_at IS NULL") == 1
    assert await count(client, "jobs") == 1
