"""Visibility (docs/visibility.md): progress on the heartbeat, job logs, the attempt history and the
worker registry, each route with its auth rules, and progress and logs arriving over SSE."""

from __future__ import annotations

import uuid
from typing import Any

from shared import metrics
from shared.db import janitor
from shared.db import jobs as jobs_db
from tests.api.helpers import (
    ACME,
    DEV,
    GLOBEX,
    STRICT,
    WORKER,
    bearer,
    complete_job,
    count,
    create_job,
    expect_error,
    fail_job,
    get_job,
    lease,
    lease_one,
    list_json,
)
from tests.api.test_sse import EventStream
from tests.support.api import database_of, janitor_of


async def heartbeat(client, job_id: str, token: str, headers=DEV, **extra: Any):
    return await client.post(
        f"/api/v1/jobs/{job_id}/heartbeat",
        json={"lease_token": token, "extend_secs": 30, **extra},
        headers=headers,
    )


async def post_logs(client, job_id: str, token: str, lines: list[dict[str, Any]], headers=DEV):
    return await client.post(
        f"/api/v1/jobs/{job_id}/logs", json={"lease_token": token, "lines": lines}, headers=headers
    )


async def attempts(client, job_id: str, headers=DEV) -> list[dict[str, Any]]:
    return list((await list_json(client, f"/api/v1/jobs/{job_id}/attempts", headers))["attempts"])


async def expire_lease(client, job_id: str) -> None:
    """As if the lease ran out: the janitor's next sweep reclaims it (no waiting for the clock)."""
    await database_of(client).pool.execute(
        "UPDATE queueflow.jobs SET locked_until = now() - interval '1 second' WHERE id = $1::uuid", job_id
    )
    assert await janitor_of(client).reclaim_expired() == 1


# --- progress ------------------------------------------------------------------------------------


async def test_heartbeat_progress_shows_on_the_job_and_in_the_list_and_is_omitted_when_never_set(api):
    client = await api()
    quiet = await create_job(client, config={"queue": "q-prog"})
    job_id = await create_job(client, config={"queue": "q-prog"})
    [first, second] = await lease(client, "q-prog", max_jobs=2)
    assert {first["job"]["id"], second["job"]["id"]} == {quiet, job_id}
    token = first["lease_token"] if first["job"]["id"] == job_id else second["lease_token"]

    resp = await heartbeat(client, job_id, token, progress={"percent": 42.5, "message": "frames 425/1000"})
    assert resp.status == 200 and (await resp.json()) == {"status": "running"}
    job = await get_job(client, job_id)
    assert job["progress"]["percent"] == 42.5 and job["progress"]["message"] == "frames 425/1000"
    assert "updated_at" in job["progress"]
    assert "progress" not in await get_job(client, quiet)
    listed = {j["id"]: j for j in (await list_json(client, "/api/v1/jobs", queue="q-prog"))["jobs"]}
    assert listed[job_id]["progress"] == job["progress"] and "progress" not in listed[quiet]

    # A heartbeat without progress keeps it; one with a new value replaces it (message optional).
    assert (await heartbeat(client, job_id, token)).status == 200
    assert (await get_job(client, job_id))["progress"]["percent"] == 42.5
    assert (await heartbeat(client, job_id, token, progress={"percent": 100})).status == 200
    assert set((await get_job(client, job_id))["progress"]) == {"percent", "updated_at"}


async def test_bad_progress_is_a_400(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-badprog"})
    token = await lease_one(client, "q-badprog", job_id)
    for progress in (
        {"percent": 101},
        {"percent": -1},
        {"message": "no percent"},
        {"percent": 5, "message": "x" * 1025},
        {"percent": 5, "eta": 3},
        {"percent": "5"},
    ):
        await expect_error(await heartbeat(client, job_id, token, progress=progress), 400)
    assert "progress" not in await get_job(client, job_id)


async def test_progress_is_cleared_when_the_job_is_claimed_again(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-reprog", "retry_delay_secs": 0, "jitter_factor": 0})
    token = await lease_one(client, "q-reprog", job_id)
    assert (await heartbeat(client, job_id, token, progress={"percent": 10})).status == 200
    await fail_job(client, job_id, token, retryable=True)
    await lease_one(client, "q-reprog", job_id)
    assert "progress" not in await get_job(client, job_id)


# --- logs ----------------------------------------------------------------------------------------


async def test_log_lines_get_a_seq_per_job_and_page_by_after_and_limit(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-logs"})
    token = await lease_one(client, "q-logs", job_id)
    resp = await post_logs(
        client,
        job_id,
        token,
        [
            {"message": "starting", "level": "info", "ts": "2030-01-01T00:00:00Z"},
            {"message": "step 1"},
            {"message": "héllo ✓", "level": "warning"},
        ],
    )
    assert resp.status == 200, await resp.text()
    assert await resp.json() == {"stored": 3, "dropped": 0, "last_seq": 3}
    resp = await post_logs(client, job_id, token, [{"message": "step 2"}, {"message": "done"}])
    assert await resp.json() == {"stored": 2, "dropped": 0, "last_seq": 5}

    page = await list_json(client, f"/api/v1/jobs/{job_id}/logs")
    assert [line["seq"] for line in page["lines"]] == [1, 2, 3, 4, 5]
    assert [line["message"] for line in page["lines"]] == ["starting", "step 1", "héllo ✓", "step 2", "done"]
    assert page["lines"][0]["ts"] == "2030-01-01T00:00:00Z" and page["lines"][0]["level"] == "info"
    assert "level" not in page["lines"][1] and {line["attempt"] for line in page["lines"]} == {1}
    assert (page["last_seq"], page["dropped"], page["has_more"]) == (5, 0, False)

    page = await list_json(client, f"/api/v1/jobs/{job_id}/logs", after=1, limit=2)
    assert [line["seq"] for line in page["lines"]] == [2, 3] and page["has_more"] is True
    page = await list_json(client, f"/api/v1/jobs/{job_id}/logs", after=5)
    assert page["lines"] == [] and page["has_more"] is False
    await expect_error(await client.get(f"/api/v1/jobs/{job_id}/logs?after=-1", headers=DEV), 400)
    await expect_error(await client.get(f"/api/v1/jobs/{job_id}/logs?after=x", headers=DEV), 400)

    # A job that never logged has an empty log, not a 404.
    other = await create_job(client, config={"queue": "q-logs"})
    assert (await list_json(client, f"/api/v1/jobs/{other}/logs"))["lines"] == []


async def test_log_routes_auth_tenant_token_403_other_tenant_404_stale_token_409(api):
    client = await api(**STRICT)
    job_id = await create_job(
        client, ACME, config={"queue": "q-logauth", "retry_delay_secs": 0, "jitter_factor": 0}
    )
    token = await lease_one(client, "q-logauth", job_id, WORKER)
    line = [{"message": "hello"}]

    # A tenant's own credential on the worker route: 403.
    await expect_error(await post_logs(client, job_id, token, line, ACME), 403)
    # Another tenant's worker key: the job does not exist for it.
    resp = await client.post("/api/v1/worker-keys", json={"name": "globex-workers"}, headers=GLOBEX)
    globex_key = bearer((await resp.json())["token"])
    await expect_error(await post_logs(client, job_id, token, line, globex_key), 404)
    # Acme's own worker key may post; the worker token may post.
    resp = await client.post("/api/v1/worker-keys", json={"name": "acme-workers"}, headers=ACME)
    acme_key = bearer((await resp.json())["token"])
    assert (await post_logs(client, job_id, token, line, acme_key)).status == 200
    assert (await post_logs(client, job_id, token, line, WORKER)).status == 200
    # An unknown job: 404; a token that is not the lease's: 409.
    await expect_error(
        await post_logs(client, "0190a5c0-0000-7000-8000-000000000000", token, line, WORKER), 404
    )
    await expect_error(await post_logs(client, job_id, "not-a-token", line, WORKER), 409)

    # A stale token: the lease expired, was reclaimed and the job leased again.
    await expire_lease(client, job_id)
    fresh = await lease_one(client, "q-logauth", job_id, WORKER)
    await expect_error(await post_logs(client, job_id, token, line, WORKER), 409)
    assert (await post_logs(client, job_id, fresh, line, WORKER)).status == 200
    # The holder's last batch after it completed is kept (a final flush).
    await complete_job(client, job_id, fresh, headers=WORKER)
    assert (await post_logs(client, job_id, fresh, [{"message": "bye"}], WORKER)).status == 200

    # Reading: the tenant (read-only too), not another tenant, not the worker token.
    page = await list_json(client, f"/api/v1/jobs/{job_id}/logs", ACME)
    assert [(line["message"], line["attempt"]) for line in page["lines"]] == [
        ("hello", 1),
        ("hello", 1),
        ("hello", 2),
        ("bye", 2),
    ]
    await expect_error(await client.get(f"/api/v1/jobs/{job_id}/logs", headers=GLOBEX), 404)
    await expect_error(await client.get(f"/api/v1/jobs/{job_id}/logs", headers=WORKER), 403)
    await expect_error(await client.get(f"/api/v1/jobs/{job_id}/attempts", headers=GLOBEX), 404)


async def test_a_call_takes_at_most_100_lines_and_64_kib(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-logbounds"})
    token = await lease_one(client, "q-logbounds", job_id)
    await expect_error(await post_logs(client, job_id, token, [{"message": "x"}] * 101), 400)
    await expect_error(await post_logs(client, job_id, token, [{"message": "é" * 20_000}] * 2), 400)
    await expect_error(
        await post_logs(client, job_id, token, [{"message": "x", "level": "not a level"}]), 400
    )
    await expect_error(await post_logs(client, job_id, token, [{"message": "x", "extra": 1}]), 400)
    await expect_error(await post_logs(client, job_id, token, [{"level": "info"}]), 400)
    await expect_error(await post_logs(client, job_id, token, [{"message": "x", "ts": "yesterday"}]), 400)
    resp = await post_logs(client, job_id, token, [{"message": "x" * 600}] * 100)
    assert resp.status == 200 and (await resp.json())["stored"] == 100
    assert await count(client, "job_logs", "job_id = $1::uuid", job_id) == 100


async def test_lines_past_the_job_cap_are_dropped_and_counted(api):
    client = await api(job_log_max_bytes=100)
    job_id = await create_job(client, config={"queue": "q-cap"})
    token = await lease_one(client, "q-cap", job_id)
    resp = await post_logs(
        client, job_id, token, [{"message": "a" * 40}, {"message": "b" * 40}, {"message": "c" * 40}]
    )
    assert await resp.json() == {"stored": 2, "dropped": 1, "last_seq": 2}
    # Once a line has not fitted, every later one is dropped, even one that would fit.
    resp = await post_logs(client, job_id, token, [{"message": "d"}, {"message": "e"}])
    assert await resp.json() == {"stored": 0, "dropped": 2, "last_seq": 2}
    page = await list_json(client, f"/api/v1/jobs/{job_id}/logs")
    assert [line["message"][0] for line in page["lines"]] == ["a", "b"]
    assert (page["dropped"], page["last_seq"]) == (3, 2)


async def test_the_cap_counts_bytes_of_utf8(api):
    client = await api(job_log_max_bytes=10)
    job_id = await create_job(client, config={"queue": "q-capbytes"})
    token = await lease_one(client, "q-capbytes", job_id)
    resp = await post_logs(
        client, job_id, token, [{"message": "ééééé"}, {"message": "é"}]
    )  # 10 bytes, then 2
    assert await resp.json() == {"stored": 1, "dropped": 1, "last_seq": 1}


async def test_progress_and_logs_arrive_over_sse(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-live"})
    token = await lease_one(client, "q-live", job_id)
    assert (await post_logs(client, job_id, token, [{"message": "before the stream"}])).status == 200
    resp = await client.get(f"/api/v1/jobs/{job_id}/events", headers=DEV)
    assert resp.status == 200
    stream = EventStream(resp)
    # The log so far, then the status (without progress: that comes as its own event).
    assert await stream.next() == ("log", await _line(client, job_id, 1))
    name, job = await stream.next()
    assert name == "status" and job["status"] == "running" and "progress" not in job

    assert (await heartbeat(client, job_id, token, progress={"percent": 50, "message": "half"})).status == 200
    name, progress = await stream.next()
    assert name == "progress" and (progress["percent"], progress["message"]) == (50, "half")

    assert (
        await post_logs(client, job_id, token, [{"message": "live 1"}, {"message": "live 2"}])
    ).status == 200
    assert [await stream.next() for _ in range(2)] == [
        ("log", await _line(client, job_id, 2)),
        ("log", await _line(client, job_id, 3)),
    ]
    await complete_job(client, job_id, token)
    rest = await stream.rest()
    assert [name for name, _ in rest] == ["status"] and rest[0][1]["status"] == "completed"

    # ?log_after= starts the stream's log after that line.
    resp = await client.get(f"/api/v1/jobs/{job_id}/events?log_after=2", headers=DEV)
    names = [(name, data.get("seq")) for name, data in await EventStream(resp).rest()]
    assert names == [("log", 3), ("progress", None), ("status", None)]


async def _line(client, job_id: str, seq: int) -> dict[str, Any]:
    page = await list_json(client, f"/api/v1/jobs/{job_id}/logs", after=seq - 1, limit=1)
    return dict(page["lines"][0])


# --- attempts ------------------------------------------------------------------------------------


def _shape(items: list[dict[str, Any]]) -> list[tuple[int, str, str | None]]:
    return [(a["attempt"], a["outcome"], a.get("worker_id")) for a in items]


async def test_attempts_after_a_retry_each_exactly_once(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-att", "retry_delay_secs": 0, "jitter_factor": 0})
    [item] = await lease(client, "q-att", worker_id="w-one")
    await fail_job(client, job_id, item["lease_token"], retryable=True, error="flaky")
    assert _shape(await attempts(client, job_id)) == [(1, "retry", "w-one")]

    [item] = await lease(client, "q-att", worker_id="w-two")
    running = await attempts(client, job_id)
    assert _shape(running) == [(1, "retry", "w-one"), (2, "running", "w-two")]
    assert "ended_at" not in running[1] and "duration_secs" not in running[1]
    await complete_job(client, job_id, item["lease_token"])

    done = await attempts(client, job_id)
    assert _shape(done) == [(1, "retry", "w-one"), (2, "completed", "w-two")]
    assert done[0]["error_message"] == "flaky" and "error_message" not in done[1]
    for attempt in done:
        assert attempt["started_at"] <= attempt["ended_at"] and attempt["duration_secs"] >= 0
    assert done[0]["ended_at"] <= done[1]["started_at"]
    assert await count(client, "job_attempts", "job_id = $1::uuid", job_id) == 1  # the completion wrote none


async def test_attempts_of_a_dead_letter_and_of_a_retry_in_place(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-attdl"})
    [item] = await lease(client, "q-attdl", worker_id="w-1")
    await fail_job(client, job_id, item["lease_token"], retryable=False, error="bad input")
    [failed] = await attempts(client, job_id)
    assert (failed["attempt"], failed["outcome"], failed["error_message"]) == (1, "failed", "bad input")

    # Run again in place: the failed attempt stays in the history, once.
    assert (await client.post(f"/api/v1/jobs/{job_id}/retry", headers=DEV)).status == 200
    assert _shape(await attempts(client, job_id)) == [(1, "failed", "w-1")]
    [item] = await lease(client, "q-attdl")
    await complete_job(client, job_id, item["lease_token"])
    assert _shape(await attempts(client, job_id)) == [(1, "failed", "w-1"), (2, "completed", None)]


async def test_attempts_of_an_expired_lease_reclaimed_by_the_janitor_into_the_dlq(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-attexp", "max_retries": 1, "retry_delay_secs": 0})
    await lease(client, "q-attexp", worker_id="crashy")
    await expire_lease(client, job_id)
    await database_of(client).pool.execute(
        "UPDATE queueflow.jobs SET scheduled_at = now() WHERE id = $1::uuid", job_id
    )  # (the retry's jitter may put it a moment ahead)
    await lease(client, "q-attexp", worker_id="crashy")
    await expire_lease(client, job_id)
    history = await attempts(client, job_id)
    assert _shape(history) == [(1, "lease_expired", "crashy"), (2, "lease_expired", "crashy")]
    assert all(a["error_message"].startswith("lease expired") for a in history)
    assert (await get_job(client, job_id))["status"] == "failed"
    assert await count(client, "dead_letters", "job_id = $1::uuid", job_id) == 1


async def test_cancelling_a_running_job_ends_its_attempt_and_a_waiting_one_has_none(api):
    client = await api()
    running = await create_job(client, config={"queue": "q-attcancel"})
    await lease(client, "q-attcancel", worker_id="w-c")
    waiting = await create_job(client, config={"queue": "q-attcancel"})
    for job_id in (running, waiting):
        assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=DEV)).status == 204
    assert _shape(await attempts(client, running)) == [(1, "cancelled", "w-c")]
    assert await attempts(client, waiting) == []
    # By filter too.
    more = await create_job(client, config={"queue": "q-attcancel2"})
    await lease(client, "q-attcancel2", worker_id="w-d")
    resp = await client.post("/api/v1/jobs/cancel", json={"queue": "q-attcancel2"}, headers=DEV)
    assert (await resp.json())["cancelled"] == 1
    assert _shape(await attempts(client, more)) == [(1, "cancelled", "w-d")]


async def test_a_released_attempt_is_in_the_history(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-attrel"})
    [item] = await lease(client, "q-attrel", worker_id="leaving")
    assert (
        await jobs_db.release(database_of(client).pool, [(uuid.UUID(job_id), uuid.UUID(item["lease_token"]))])
        == 1
    )
    [item] = await lease(client, "q-attrel", worker_id="staying")
    await complete_job(client, job_id, item["lease_token"])
    assert _shape(await attempts(client, job_id)) == [(1, "released", "leaving"), (2, "completed", "staying")]


async def test_attempt_outcomes_are_counted_per_task_on_metrics(api):
    client = await api()

    def sample(outcome: str) -> float:
        labels = {"task": "metered", "outcome": outcome}
        return metrics.REGISTRY.get_sample_value("queueflow_job_attempts_total", labels) or 0.0

    before = {o: sample(o) for o in ("retry", "completed")}
    job_id = await create_job(
        client, task_name="metered", config={"queue": "q-met", "retry_delay_secs": 0, "jitter_factor": 0}
    )
    await fail_job(client, job_id, await lease_one(client, "q-met", job_id), retryable=True)
    await complete_job(client, job_id, await lease_one(client, "q-met", job_id))
    assert sample("retry") == before["retry"] + 1 and sample("completed") == before["completed"] + 1
    count_ = metrics.REGISTRY.get_sample_value(
        "queueflow_job_attempt_duration_seconds_count", {"task": "metered", "outcome": "completed"}
    )
    assert count_ is not None and count_ >= 1


def test_task_labels_are_bounded():
    seen = {metrics.task_label(f"bounded-task-{n}") for n in range(metrics.MAX_TASK_LABELS + 50)}
    assert metrics.OTHER_TASKS in seen and len(seen) <= metrics.MAX_TASK_LABELS + 1


async def test_retention_takes_a_jobs_logs_and_attempts_with_it(api):
    client = await api()
    job_id = await create_job(client, config={"queue": "q-ret", "retry_delay_secs": 0, "jitter_factor": 0})
    token = await lease_one(client, "q-ret", job_id)
    await post_logs(client, job_id, token, [{"message": "one"}])
    await fail_job(client, job_id, token, retryable=True)
    token = await lease_one(client, "q-ret", job_id)
    await complete_job(client, job_id, token)
    pool = database_of(client).pool
    await pool.execute(
        "UPDATE queueflow.jobs SET completed_at = now() - interval '2 hours' WHERE id = $1::uuid", job_id
    )
    assert await janitor.prune(pool, older_than_hours=1) >= 1
    for table in ("jobs", "job_logs", "job_log_state", "job_attempts"):
        column = "id" if table == "jobs" else "job_id"
        assert await count(client, table, f"{column} = $1::uuid", job_id) == 0, table


# --- workers -------------------------------------------------------------------------------------


async def test_workers_a_tenant_sees_those_that_leased_its_jobs(api):
    client = await api(**STRICT)
    acme_job = await create_job(client, ACME, config={"queue": "q-w"})
    info = {"hostname": "box-1", "sdk": "python", "version": "1.2.3", "tasks": ["resize", "encode"]}
    leased = await lease(client, "q-w", WORKER, worker_id="box-1:77", worker=info)
    assert [item["job"]["id"] for item in leased] == [acme_job]
    # An idle poll by a worker that never leased acme's jobs.
    assert await lease(client, "q-w", WORKER, worker_id="idle-1") == []
    # Globex's own key-holding worker.
    resp = await client.post("/api/v1/worker-keys", json={"name": "g"}, headers=GLOBEX)
    globex_key = bearer((await resp.json())["token"])
    assert await lease(client, "q-g", globex_key, worker_id="globex-7", worker={"sdk": "go"}) == []

    [worker] = (await list_json(client, "/api/v1/workers", ACME))["workers"]
    assert worker["worker_id"] == "box-1:77" and worker["queues"] == ["q-w"]
    assert (worker["in_flight"], worker["live"], worker["info"]) == (1, True, info)
    assert worker["first_seen_at"] <= worker["last_seen_at"]
    [worker] = (await list_json(client, "/api/v1/workers", GLOBEX))["workers"]
    assert (worker["worker_id"], worker["info"], worker["in_flight"]) == ("globex-7", {"sdk": "go"}, 0)

    # A later call without `worker` keeps what it reported; the job done, nothing is in flight.
    await complete_job(client, acme_job, leased[0]["lease_token"], headers=WORKER)
    assert await lease(client, "q-w2", WORKER, worker_id="box-1:77") == []
    [worker] = (await list_json(client, "/api/v1/workers", ACME))["workers"]
    assert (worker["in_flight"], worker["info"], worker["queues"]) == (0, info, ["q-w"])

    # Not seen for over two minutes: not live.
    await database_of(client).pool.execute(
        "UPDATE queueflow.workers SET last_seen_at = now() - interval '3 minutes' WHERE worker_id = 'box-1:77'"
    )
    [worker] = (await list_json(client, "/api/v1/workers", ACME))["workers"]
    assert worker["live"] is False
    await expect_error(await client.get("/api/v1/workers", headers=WORKER), 403)


async def test_repeated_polls_of_one_worker_are_recorded_once_per_interval(api):
    """A worker's lease loops poll many times a second under one id: the api process records the
    worker once per interval (queue and tenants alike), and at once when the call says what it is."""
    client = await api()
    pool = database_of(client).pool
    seen = "SELECT last_seen_at, info FROM queueflow.workers WHERE tenant_key = '' AND worker_id = 'poller'"
    assert await lease(client, "q-poll", worker_id="poller") == []
    first = await pool.fetchrow(seen)
    for _ in range(5):
        assert await lease(client, "q-poll", worker_id="poller") == []
    assert await pool.fetchrow(seen) == first  # not written again within the interval
    assert await lease(client, "q-poll", worker_id="poller", worker={"sdk": "go"}) == []
    again = await pool.fetchrow(seen)
    assert again["info"] == {"sdk": "go"} and again["last_seen_at"] > first["last_seen_at"]
    assert await lease(client, "q-other", worker_id="poller") == []  # another queue: recorded
    [queues] = await pool.fetchrow("SELECT queues FROM queueflow.workers WHERE worker_id = 'poller'")
    assert queues == ["q-poll", "q-other"]


async def test_a_lease_without_worker_id_writes_no_registry_row(api):
    client = await api()
    await create_job(client, config={"queue": "q-anon"})
    await lease(client, "q-anon")
    assert await count(client, "workers") == 0
    assert (await list_json(client, "/api/v1/workers"))["workers"] == []


async def test_bad_worker_shapes_are_a_400(api):
    client = await api()
    for body in (
        {"worker_id": ""},
        {"worker_id": "x" * 129},
        {"worker_id": "has space"},
        {"worker_id": "ünïcode"},
        {"worker_id": 7},
        {"worker_id": "w", "worker": {"hostname": "h", "pid": 1}},
        {"worker_id": "w", "worker": {"tasks": "resize"}},
        {"worker_id": "w", "worker": {"tasks": [""]}},
        {"worker_id": "w", "worker": {"hostname": "h" * 256}},
        {"worker_id": "w", "worker": {"tasks": ["t"] * 257}},
    ):
        resp = await client.post("/api/v1/queues/q-shapes/lease", json=body, headers=DEV)
        await expect_error(resp, 400)
    resp = await client.post("/api/v1/queues/q-shapes/lease", json={"worker_id": "x" * 128}, headers=DEV)
    assert resp.status == 200


async def test_cancelling_a_workflow_ends_its_running_steps_attempt(api):
    client = await api()
    resp = await client.post(
        "/api/v1/workflows",
        json={"name": "wf-att", "steps": [{"name": "a", "task_name": "t", "queue": "q-wfatt"}]},
        headers=DEV,
    )
    assert resp.status == 201, await resp.text()
    workflow_id = (await resp.json())["workflow_id"]
    [item] = await lease(client, "q-wfatt", worker_id="wf-worker")
    assert (await client.post(f"/api/v1/workflows/{workflow_id}/cancel", headers=DEV)).status == 204
    assert _shape(await attempts(client, item["job"]["id"])) == [(1, "cancelled", "wf-worker")]


async def test_a_nul_character_anywhere_in_the_worker_report_is_a_400(api):
    client = await api()
    for worker in ({"tasks": ["a\x00b"]}, {"hostname": "h\x00"}):
        for body in ({"worker": worker}, {"worker_id": "w", "worker": worker}):
            await expect_error(await client.post("/api/v1/queues/q-nul/lease", json=body, headers=DEV), 400)


async def test_a_job_with_limit_keys_records_its_worker_too(api):
    """Such a job is claimed by queueflow.claim_limited (migration 17 gave it the worker)."""
    client = await api()
    job_id = await create_job(client, config={"queue": "q-limited", "limits": ["customer:7"]})
    [item] = await lease(client, "q-limited", worker_id="limited-worker")
    assert item["job"]["id"] == job_id
    await complete_job(client, job_id, item["lease_token"])
    assert _shape(await attempts(client, job_id)) == [(1, "completed", "limited-worker")]
