"""The REST client against a stub server: what goes on the wire, how answers and failures come back."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta, timezone

import pytest
from aiohttp import web
from conftest import error, job_json

from unofficial_queueflow_client import Client
from unofficial_queueflow_client import models as m
from unofficial_queueflow_client.errors import Conflict, NotFound, TransportError, Unauthorized, UnexpectedResponse


async def test_tenant_and_worker_tokens_go_where_they_belong(stub):
    stub.add_jobs(job_json())
    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        stub.routes[("GET", "/api/v1/whoami")] = lambda r: web.json_response({"tenant": "acme", "access": "read_only"})
        me = await qf.whoami()
        leased = await qf.lease("q", max_jobs=3, lease_secs=10, wait_secs=0)
    assert me == m.WhoAmIResponse(tenant="acme", access="read_only")
    assert len(leased.jobs) == 1
    (_, _, whoami_headers, _), (_, path, lease_headers, body) = stub.requests
    assert whoami_headers["Authorization"] == "Bearer tenant"
    assert lease_headers["Authorization"] == "Bearer worker"
    assert path == "/api/v1/queues/q/lease" and body == {"max_jobs": 3, "lease_secs": 10, "wait_secs": 0}


async def test_the_worker_token_defaults_to_the_tenant_token(stub):
    async with Client(stub.url, "only") as qf:
        await qf.heartbeat("j1", "tok", 15)
    _, path, headers, body = stub.requests[0]
    assert headers["Authorization"] == "Bearer only"
    assert path == "/api/v1/jobs/j1/heartbeat" and body == {"lease_token": "tok", "extend_secs": 15}


async def test_create_job_sends_the_idempotency_key_header(stub):
    stub.routes[("POST", "/api/v1/jobs")] = lambda r: web.json_response({"job_id": "j1"}, status=201)
    async with Client(stub.url, "t") as qf:
        created = await qf.create_job(
            "send", {"to": "x"}, config=m.JobConfigRequest(queue="mail"), idempotency_key="k-1"
        )
    assert created.job_id == "j1"
    _, _, headers, body = stub.requests[0]
    assert headers["Idempotency-Key"] == "k-1"
    assert body == {"task_name": "send", "payload": {"to": "x"}, "config": {"queue": "mail"}}


async def test_list_parameters_are_encoded(stub):
    stub.routes[("GET", "/api/v1/jobs")] = lambda r: web.json_response(
        {"jobs": [job_json()], "limit": 2, "offset": 0, "has_more": False}
    )
    async with Client(stub.url, "t") as qf:
        page = await qf.list_jobs(
            status="pending",
            queue="q",
            limit=2,
            include_total=True,
            cursor="c1",
            created_after=datetime(2026, 1, 1, tzinfo=UTC),
            order_by="created_at ASC",
        )
    assert len(page.jobs) == 1 and page.total is None and page.next_cursor is None
    path = stub.requests[0][1]
    for part in (
        "status=pending",
        "queue=q",
        "limit=2",
        "include_total=true",
        "cursor=c1",
        "created_after=2026-01-01T00:00:00%2B00:00",
        "order_by=created_at+ASC",
    ):
        assert part in path, path


async def test_path_segments_are_escaped(stub):
    stub.routes[("POST", "/api/v1/queues/a%2Fb/pause")] = lambda r: web.json_response({})
    async with Client(stub.url, "t") as qf:
        with pytest.raises(NotFound):  # the stub routes the raw path; what matters is what was sent
            await qf.pause_queue("a/b")
    assert stub.requests[0][1] == "/api/v1/queues/a%2Fb/pause"


async def test_iter_jobs_follows_the_cursor(stub):
    pages = iter(
        [
            {"jobs": [job_json(), job_json()], "limit": 2, "offset": 0, "has_more": True, "next_cursor": "n"},
            {"jobs": [job_json()], "limit": 2, "offset": 0, "has_more": False},
        ]
    )
    stub.routes[("GET", "/api/v1/jobs")] = lambda r: web.json_response(next(pages))
    async with Client(stub.url, "t") as qf:
        jobs = [j async for j in qf.iter_jobs(queue="q", limit=2)]
    assert len(jobs) == 3 and "cursor=n" in stub.requests[1][1]


async def test_error_answers_carry_status_and_body(stub):
    stub.routes[("POST", "/api/v1/jobs/x/complete")] = lambda r: error(409, "lease is no longer held")
    async with Client(stub.url, "t") as qf:
        with pytest.raises(Conflict) as caught:
            await qf.complete("x", "tok", {"late": True})
        with pytest.raises(Unauthorized):
            stub.routes[("GET", "/api/v1/stats")] = lambda r: error(401, "missing credential")
            await qf.stats()
    assert caught.value.status == 409 and caught.value.body.error == "lease is no longer held"
    assert isinstance(caught.value.raw["timestamp"], str)
    assert stub.requests[0][3] == {"lease_token": "tok", "result": {"late": True}}


async def test_204_routes_return_none_and_fail_sends_retryable(stub):
    async with Client(stub.url, "t") as qf:
        assert await qf.fail("j", "tok", "bad", retryable=False) is None
    assert stub.requests[0][3] == {"lease_token": "tok", "error": "bad", "retryable": False}


async def test_complete_many_sends_the_items_with_the_worker_token(stub):
    stub.offer_batch = True
    stub.item_status = lambda job_id: {"j2": 409, "j3": 404}.get(job_id, 204)
    items = [m.CompletionItem(id=f"j{n}", lease_token=f"tok{n}", result={"n": n}) for n in (1, 2, 3)]
    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        answer = await qf.complete_many(items)
        again = await qf.complete_many(m.CompleteJobsRequest(jobs=items[:1]))
    assert [(r.id, r.outcome, r.status, r.ok) for r in answer.results] == [
        ("j1", "completed", 204, True),
        ("j2", "conflict", 409, False),
        ("j3", "not_found", 404, False),
    ]
    assert answer.results[0].error is None and answer.results[1].error == "item answered 409"
    assert [r.id for r in again.results] == ["j1"]
    method, path, headers, body = stub.requests[0]
    assert (method, path, headers["Authorization"]) == ("POST", "/api/v1/jobs/complete", "Bearer worker")
    assert body == {"jobs": [{"id": f"j{n}", "lease_token": f"tok{n}", "result": {"n": n}} for n in (1, 2, 3)]}


@pytest.mark.parametrize("count", [0, 101])
async def test_complete_many_takes_1_to_100_jobs(stub, count):
    items = [m.CompletionItem(id=str(n), lease_token="tok") for n in range(count)]
    async with Client(stub.url, "t") as qf:
        with pytest.raises(ValueError, match="1..=100"):
            await qf.complete_many(items)
    assert stub.requests == []


@pytest.mark.parametrize(
    "results",
    [[], [{"id": "b", "outcome": "completed", "status": 204}, {"id": "a", "outcome": "completed", "status": 204}]],
    ids=["missing", "out-of-order"],
)
async def test_complete_many_answers_must_be_one_per_job_in_order(stub, results):
    stub.routes[("POST", "/api/v1/jobs/complete")] = lambda r: web.json_response({"results": results})
    async with Client(stub.url, "t") as qf:
        with pytest.raises(UnexpectedResponse, match="request order"):
            await qf.complete_many(
                [m.CompletionItem(id="a", lease_token="t"), m.CompletionItem(id="b", lease_token="t")]
            )


async def test_complete_many_against_a_server_without_it_is_not_found(stub):
    async with Client(stub.url, "t") as qf:
        offered = (await qf.openapi()).offers("POST", "/api/v1/jobs/complete")
        with pytest.raises(NotFound):
            await qf.complete_many([m.CompletionItem(id="a", lease_token="t")])
    assert offered is False


async def test_openapi_tells_which_routes_the_server_offers(stub):
    stub.offer_batch = True
    async with Client(stub.url, "t") as qf:
        document = await qf.openapi()
    assert document.openapi == "3.1.0" and "Authorization" not in stub.requests[0][2]
    assert document.offers("POST", "/api/v1/jobs/complete") and document.offers("post", "/api/v1/jobs/complete")
    assert not document.offers("GET", "/api/v1/jobs/complete")
    assert not document.offers("POST", "/api/v1/nowhere")


async def test_a_body_of_the_wrong_shape_is_unexpected(stub):
    stub.routes[("GET", "/api/v1/stats")] = lambda r: web.json_response({"jobs_created": "many"})
    async with Client(stub.url, "t") as qf:
        with pytest.raises(UnexpectedResponse):
            await qf.stats()


async def test_health_is_unauthenticated(stub):
    stub.routes[("GET", "/health")] = lambda r: web.json_response(
        {"status": "healthy", "timestamp": "2026-01-01T00:00:00Z", "version": "1"}
    )
    async with Client(stub.url, "t") as qf:
        health = await qf.health()
    assert health.status == "healthy" and "Authorization" not in stub.requests[0][2]


async def test_connection_refused_is_a_transport_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with Client(f"http://127.0.0.1:{port}", "t") as qf:
        with pytest.raises(TransportError):
            await qf.whoami()


async def test_a_timeout_is_a_transport_error(stub):
    async def slow(request):
        await asyncio.sleep(1)
        return web.json_response({"tenant": "a", "access": "read_write"})

    stub.routes[("GET", "/api/v1/whoami")] = slow
    async with Client(stub.url, "t", timeout=0.1) as qf:
        with pytest.raises(TransportError):
            await qf.whoami()


async def test_job_events_stream_decoded_jobs(stub):
    first, last = job_json(status="running"), job_json(status="completed")

    async def events(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for job in (first, last):
            await resp.write(b": keep-alive\n\n")
            await resp.write(b"event: status\ndata: " + web.json_response(job).body + b"\n\n")
        await resp.write_eof()
        return resp

    stub.routes[("GET", "/api/v1/jobs/j/events")] = events
    async with Client(stub.url, "t") as qf:
        statuses = [job.status async for job in qf.job_events("j")]
        with pytest.raises(NotFound):
            async for _ in qf.workflow_events("missing"):
                pass
    assert statuses == ["running", "completed"]


async def test_worker_key_calls_use_the_tenant_token(stub):
    key = {
        "id": "k1",
        "name": "runners",
        "queues": ["emails"],
        "created_at": "2026-12-03T14:00:00Z",
        "expires_at": None,
    }
    stub.routes[("POST", "/api/v1/worker-keys")] = lambda r: web.json_response({**key, "token": "qfwk_x"}, status=201)
    stub.routes[("GET", "/api/v1/worker-keys")] = lambda r: web.json_response({"worker_keys": [key]})
    stub.routes[("DELETE", "/api/v1/worker-keys/k1")] = lambda r: web.Response(status=204)
    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        minted = await qf.create_worker_key(name="runners", queues=["emails"])
        listed = await qf.list_worker_keys()
        assert await qf.delete_worker_key("k1") is None
    assert minted.token == "qfwk_x" and minted.queues == ["emails"] and minted.expires_at is None
    assert [k.id for k in listed.worker_keys] == ["k1"]
    assert [(method, path) for method, path, _, _ in stub.requests] == [
        ("POST", "/api/v1/worker-keys"),
        ("GET", "/api/v1/worker-keys"),
        ("DELETE", "/api/v1/worker-keys/k1"),
    ]
    assert all(headers["Authorization"] == "Bearer tenant" for _, _, headers, _ in stub.requests)
    assert stub.requests[0][3] == {"name": "runners", "queues": ["emails"]}


async def test_limit_calls_put_list_get_and_delete_with_the_key_encoded(stub):
    policy = {
        "key": "customer:*",
        "concurrency": 1,
        "rate": {"count": 10, "per_secs": 1.5},
        "running": 0,
        "created_at": "2026-12-03T14:00:00Z",
        "updated_at": "2026-12-03T14:00:00Z",
    }
    exact = {**policy, "key": "api:stripe", "concurrency": None, "running": 2, "rate_available": 7}
    stub.routes[("PUT", "/api/v1/limits/customer:*")] = lambda r: web.json_response(policy)
    stub.routes[("GET", "/api/v1/limits")] = lambda r: web.json_response({"limits": [exact, policy]})
    stub.routes[("GET", "/api/v1/limits/api:stripe")] = lambda r: web.json_response(exact)
    stub.routes[("DELETE", "/api/v1/limits/customer:*")] = lambda r: web.Response(status=204)
    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        put = await qf.put_limit("customer:*", concurrency=1, rate=m.LimitRate(count=10, per_secs=1.5))
        listed = await qf.list_limits()
        got = await qf.get_limit("api:stripe")
        assert await qf.delete_limit("customer:*") is None
        with pytest.raises(NotFound):
            await qf.get_limit("customer:42")
        replaced = await qf.put_limit("customer:*", m.PutLimitRequest(concurrency=1))
    assert put == m.LimitPolicy(
        key="customer:*",
        concurrency=1,
        rate=m.LimitRate(count=10, per_secs=1.5),
        running=0,
        created_at=datetime(2026, 12, 3, 14, tzinfo=UTC),
        updated_at=datetime(2026, 12, 3, 14, tzinfo=UTC),
    )
    assert put.rate_available is None and replaced.key == "customer:*"
    assert [p.key for p in listed.limits] == ["api:stripe", "customer:*"]
    assert got.concurrency is None and got.running == 2 and got.rate_available == 7
    assert [(method, path) for method, path, _, _ in stub.requests] == [
        ("PUT", "/api/v1/limits/customer%3A%2A"),
        ("GET", "/api/v1/limits"),
        ("GET", "/api/v1/limits/api%3Astripe"),
        ("DELETE", "/api/v1/limits/customer%3A%2A"),
        ("GET", "/api/v1/limits/customer%3A42"),
        ("PUT", "/api/v1/limits/customer%3A%2A"),
    ]
    assert all(headers["Authorization"] == "Bearer tenant" for _, _, headers, _ in stub.requests)
    assert stub.requests[0][3] == {"concurrency": 1, "rate": {"count": 10, "per_secs": 1.5}}
    assert stub.requests[-1][3] == {"concurrency": 1}


async def test_job_config_limits_go_out_when_set_and_come_back(stub):
    stub.routes[("POST", "/api/v1/jobs")] = lambda r: web.json_response({"job_id": "j1"}, status=201)
    stub.routes[("GET", "/api/v1/jobs/j1")] = lambda r: web.json_response(
        job_json(id="j1", config={"priority": 0, "limits": ["customer:42", "api:stripe"]})
    )
    async with Client(stub.url, "tenant") as qf:
        await qf.create_job("charge", {"order": 7}, config=m.JobConfigRequest(limits=["customer:42", "api:stripe"]))
        await qf.create_job("charge", {"order": 8}, config=m.JobConfigRequest(priority=1))
        job = await qf.get_job("j1")
    assert stub.requests[0][3]["config"] == {"limits": ["customer:42", "api:stripe"]}
    assert stub.requests[1][3]["config"] == {"priority": 1}
    assert job.config["limits"] == ["customer:42", "api:stripe"]


async def test_job_config_unique_goes_out_when_set_and_comes_back_typed(stub):
    stub.routes[("POST", "/api/v1/jobs")] = lambda r: web.json_response({"job_id": "j1"}, status=201)
    stub.routes[("POST", "/api/v1/jobs/batch")] = lambda r: web.json_response(
        {"job_ids": ["j1", "j2"], "count": 2}, status=201
    )
    unique = {"key": "report:42", "window_secs": 600, "on_conflict": "skip"}
    stub.routes[("GET", "/api/v1/jobs/j1")] = lambda r: web.json_response(
        job_json(id="j1", config={"priority": 0, "unique": unique})
    )
    stub.routes[("GET", "/api/v1/jobs/j2")] = lambda r: web.json_response(job_json(id="j2"))
    async with Client(stub.url, "tenant") as qf:
        policy = m.UniquePolicy(key="report:42", window_secs=600)
        await qf.create_job("report", {"n": 1}, config=m.JobConfigRequest(unique=policy))
        await qf.create_jobs(
            [
                m.CreateJobRequest(
                    task_name="report",
                    config=m.JobConfigRequest(
                        unique=m.UniquePolicy(key="report:43", window_secs=60, on_conflict="replace")
                    ),
                ),
                m.CreateJobRequest(task_name="report", config=m.JobConfigRequest(priority=2)),
            ]
        )
        held = await qf.get_job("j1")
        plain = await qf.get_job("j2")
    assert stub.requests[0][3]["config"] == {"unique": {"key": "report:42", "window_secs": 600}}
    assert [item["config"] for item in stub.requests[1][3]["jobs"]] == [
        {"unique": {"key": "report:43", "window_secs": 60, "on_conflict": "replace"}},
        {"priority": 2},
    ]
    assert held.unique == m.UniquePolicy(key="report:42", window_secs=600, on_conflict="skip")
    assert held.config["unique"] == unique
    assert plain.unique is None and "unique" not in plain.config


async def test_cron_timezone_goes_out_when_set_and_comes_back_with_the_local_next_run(stub):
    stub.routes[("POST", "/api/v1/cron")] = lambda r: web.json_response({"cron_id": "c1"}, status=201)
    schedule = {
        "id": "c1",
        "name": "standup",
        "cron_expr": "0 9 * * 1-5",
        "task_name": "remind",
        "enabled": True,
        "next_run_at": "2026-03-30T07:00:00Z",
        "created_at": "2026-03-27T12:00:00Z",
    }
    zoned = {**schedule, "timezone": "Europe/Berlin", "next_run_local": "2026-03-30T09:00:00+02:00"}
    plain = {**schedule, "id": "c2", "name": "nightly"}
    stub.routes[("GET", "/api/v1/cron/c1")] = lambda r: web.json_response(zoned)
    stub.routes[("GET", "/api/v1/cron")] = lambda r: web.json_response(
        {"crons": [zoned, plain], "limit": 50, "offset": 0, "has_more": False}
    )
    async with Client(stub.url, "tenant") as qf:
        await qf.create_cron(name="standup", cron_expr="0 9 * * 1-5", task_name="remind", timezone="Europe/Berlin")
        await qf.create_cron(m.CreateCronRequest(name="nightly", cron_expr="0 2 * * *", task_name="remind"))
        got = await qf.get_cron("c1")
        listed = await qf.list_crons()
    assert stub.requests[0][3] == {
        "name": "standup",
        "cron_expr": "0 9 * * 1-5",
        "task_name": "remind",
        "timezone": "Europe/Berlin",
    }
    assert stub.requests[1][3] == {"name": "nightly", "cron_expr": "0 2 * * *", "task_name": "remind"}
    assert got.timezone == "Europe/Berlin"
    assert got.next_run_local == datetime(2026, 3, 30, 9, tzinfo=timezone(timedelta(hours=2)))
    assert got.next_run_local.utcoffset() == timedelta(hours=2) and got.next_run_local.hour == 9
    assert got.next_run_local == got.next_run_at  # one instant, two clocks
    assert listed.crons[0] == got
    assert listed.crons[1].timezone is None and listed.crons[1].next_run_local is None


async def test_a_workflow_schedule_goes_out_without_a_task_and_comes_back_by_get_and_list(stub):
    stub.routes[("POST", "/api/v1/cron")] = lambda r: web.json_response({"cron_id": "c1"}, status=201)
    stored_workflow = {
        "name": "etl",
        "steps": [
            {
                "name": "extract",
                "task_name": "etl.extract",
                "depends_on": [],
                "payload": {},
                "on_failure": "halt",
                "on_success": "continue",
                "metadata": {},
                "queue": "etl",
            },
            {
                "name": "nap",
                "depends_on": ["extract"],
                "payload": {},
                "on_failure": "halt",
                "on_success": "continue",
                "metadata": {},
                "sleep_secs": 60,
            },
        ],
        "context": {},
        "metadata": {},
    }
    base = {
        "cron_expr": "0 2 * * *",
        "enabled": True,
        "next_run_at": "2026-12-04T02:00:00Z",
        "created_at": "2026-12-03T00:00:00Z",
    }
    scheduled = {**base, "id": "c1", "name": "nightly", "workflow": stored_workflow}
    plain = {**base, "id": "c2", "name": "remind", "task_name": "remind", "queue_name": "q"}
    stub.routes[("GET", "/api/v1/cron/c1")] = lambda r: web.json_response(scheduled)
    stub.routes[("GET", "/api/v1/cron")] = lambda r: web.json_response(
        {"crons": [scheduled, plain], "limit": 50, "offset": 0, "has_more": False}
    )
    definition = m.CreateWorkflowRequest(
        name="etl",
        steps=[
            m.WorkflowStep(name="extract", task_name="etl.extract", queue="etl"),
            m.sleep_step("nap", 60, depends_on=["extract"]),
        ],
    )
    async with Client(stub.url, "tenant") as qf:
        created = await qf.create_cron(name="nightly", cron_expr="0 2 * * *", workflow=definition)
        got = await qf.get_cron("c1")
        listed = await qf.list_crons()
    assert created.cron_id == "c1"
    assert stub.requests[0][3] == {
        "name": "nightly",
        "cron_expr": "0 2 * * *",
        "workflow": {
            "name": "etl",
            "steps": [
                {"name": "extract", "task_name": "etl.extract", "queue": "etl"},
                {"name": "nap", "depends_on": ["extract"], "sleep_secs": 60},
            ],
        },
    }
    assert got.task_name is None and got.workflow is not None
    assert [s.name for s in got.workflow.steps] == ["extract", "nap"]
    assert got.workflow.steps[1].sleep_secs == 60 and got.workflow.steps[1].depends_on == ["extract"]
    assert m.to_builtins(got.workflow) == stored_workflow
    assert listed.crons[0] == got
    assert listed.crons[1].task_name == "remind" and listed.crons[1].workflow is None


async def test_sleep_and_wait_steps_go_out_as_the_server_reads_them_and_their_state_comes_back(stub):
    stub.routes[("POST", "/api/v1/workflows")] = lambda r: web.json_response({"workflow_id": "w1"}, status=201)
    stub.routes[("GET", "/api/v1/workflows/w1/steps")] = lambda r: web.json_response(
        {
            "steps": [
                {
                    "name": "approve",
                    "status": "running",
                    "started_at": "2026-12-03T14:00:00Z",
                    "wake_at": "2026-12-03T15:00:00Z",
                    "event_key": "approval:42",
                },
                {"name": "nap", "status": "pending"},
                {"name": "later", "status": "pending"},
            ]
        }
    )
    async with Client(stub.url, "tenant") as qf:
        await qf.create_workflow(
            "ship",
            [
                m.wait_for_event_step("approve", "approval:{{context.order}}", timeout_secs=3600, on_failure="skip"),
                m.sleep_step("nap", 90, depends_on=["approve"]),
                m.sleep_until_step("later", datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC), depends_on=["nap"]),
            ],
            context={"order": 42},
        )
        states = await qf.workflow_steps("w1")
    assert stub.requests[0][3] == {
        "name": "ship",
        "steps": [
            {
                "name": "approve",
                "on_failure": "skip",
                "wait_for_event": {"key": "approval:{{context.order}}"},
                "timeout_secs": 3600,
            },
            {"name": "nap", "depends_on": ["approve"], "sleep_secs": 90},
            {"name": "later", "depends_on": ["nap"], "sleep_until": "2027-01-02T03:04:05Z"},
        ],
        "context": {"order": 42},
    }
    approve, nap, _ = states.steps
    assert approve.wake_at == datetime(2026, 12, 3, 15, tzinfo=UTC) and approve.event_key == "approval:42"
    assert approve.job_id is None
    assert nap.wake_at is None and nap.event_key is None


async def test_send_event_and_list_events(stub):
    kept = {
        "event_id": "e1",
        "key": "approval:42",
        "payload": {"by": "ada"},
        "delivered": 1,
        "created_at": "2026-12-03T14:00:00Z",
        "expires_at": "2026-12-04T14:00:00Z",
    }
    stub.routes[("POST", "/api/v1/events")] = lambda r: web.json_response(
        {"event_id": "e1", "delivered": 1}, status=202
    )
    stub.routes[("GET", "/api/v1/events")] = lambda r: web.json_response({"events": [kept]})
    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        sent = await qf.send_event("approval:42", {"by": "ada"})
        bare = await qf.send_event(m.PostEventRequest(key="ping"))
        listed = await qf.list_events(key="approval:42", limit=5)
        everything = await qf.list_events()
    assert sent == m.PostEventResponse(event_id="e1", delivered=1) and bare.delivered == 1
    assert listed.events == [
        m.Event(
            event_id="e1",
            key="approval:42",
            payload={"by": "ada"},
            delivered=1,
            created_at=datetime(2026, 12, 3, 14, tzinfo=UTC),
            expires_at=datetime(2026, 12, 4, 14, tzinfo=UTC),
        )
    ]
    assert len(everything.events) == 1
    assert [(method, path, body) for method, path, _, body in stub.requests] == [
        ("POST", "/api/v1/events", {"key": "approval:42", "payload": {"by": "ada"}}),
        ("POST", "/api/v1/events", {"key": "ping"}),
        ("GET", "/api/v1/events?key=approval:42&limit=5", None),
        ("GET", "/api/v1/events", None),
    ]
    assert all(headers["Authorization"] == "Bearer tenant" for _, _, headers, _ in stub.requests)


async def test_the_worker_protocol_carries_the_visibility_extensions(stub):
    [job_id] = stub.add_jobs(
        job_json(progress={"percent": 40, "message": "loading", "updated_at": "2026-12-03T20:41:49Z"})
    )
    stub.traces[job_id] = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    info = m.WorkerInfo(hostname="box", sdk="python", version="1.0", tasks=["a", "b"])
    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        leased = await qf.lease("q", worker_id="box:1", worker=info)
        await qf.heartbeat(job_id, "tok", 15, progress=m.ProgressReport(percent=42.5, message="frames 425/1000"))
        stored = await qf.post_logs(
            job_id,
            "tok",
            [
                m.NewLogLine(message="loading", level="info", ts=datetime(2026, 1, 1, tzinfo=UTC)),
                m.NewLogLine(message="x"),
            ],
        )
    [item] = leased.jobs
    assert item.traceparent == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" and item.tracestate is None
    assert item.job.progress == m.Progress(
        percent=40, message="loading", updated_at=datetime(2026, 12, 3, 20, 41, 49, tzinfo=UTC)
    )
    assert stored == m.PostJobLogsResponse(stored=2, dropped=0, last_seq=2)
    assert [(path, headers["Authorization"], body) for _, path, headers, body in stub.requests] == [
        (
            "/api/v1/queues/q/lease",
            "Bearer worker",
            {
                "max_jobs": 1,
                "lease_secs": 30,
                "wait_secs": 0,
                "worker_id": "box:1",
                "worker": {"hostname": "box", "sdk": "python", "version": "1.0", "tasks": ["a", "b"]},
            },
        ),
        (
            f"/api/v1/jobs/{job_id}/heartbeat",
            "Bearer worker",
            {"lease_token": "tok", "extend_secs": 15, "progress": {"percent": 42.5, "message": "frames 425/1000"}},
        ),
        (
            f"/api/v1/jobs/{job_id}/logs",
            "Bearer worker",
            {
                "lease_token": "tok",
                "lines": [{"message": "loading", "level": "info", "ts": "2026-01-01T00:00:00Z"}, {"message": "x"}],
            },
        ),
    ]


async def test_an_upstream_servers_answers_decode_without_the_extensions(stub):
    stub.add_jobs(job_json())
    stub.routes[("GET", "/api/v1/workers")] = lambda r: web.json_response(
        {
            "workers": [
                {
                    "worker_id": "w1",
                    "queues": [],
                    "in_flight": 0,
                    "first_seen_at": "2026-12-03T20:41:49Z",
                    "last_seen_at": "2026-12-03T20:41:49Z",
                    "live": False,
                }
            ]
        }
    )
    async with Client(stub.url, "t") as qf:
        leased = await qf.lease("q")
        workers = await qf.list_workers()
    assert leased.jobs[0].traceparent is None and leased.jobs[0].job.progress is None
    assert workers.workers[0].info is None and workers.workers[0].live is False
    assert stub.requests[0][3] == {"max_jobs": 1, "lease_secs": 30, "wait_secs": 0}  # no extension sent


@pytest.mark.parametrize(
    "lines",
    [
        [m.NewLogLine(message="x")] * 101,
        [m.NewLogLine(message="x" * 40_000), m.NewLogLine(message="y" * 30_000)],
    ],
)
async def test_post_logs_takes_at_most_100_lines_and_64_kib(stub, lines):
    async with Client(stub.url, "t") as qf:
        with pytest.raises(ValueError):
            await qf.post_logs("j1", "tok", lines)
    assert stub.requests == []


async def test_job_logs_attempts_and_workers_for_tenants(stub):
    def line(seq: int) -> dict:
        return {"seq": seq, "attempt": 1, "ts": "2026-12-03T20:41:49Z", "level": "info", "message": f"line {seq}"}

    def logs(request: web.Request) -> web.Response:
        after = int(request.query.get("after", "0"))
        lines = [line(seq) for seq in range(after + 1, min(after + 2, 3) + 1)]
        return web.json_response({"lines": lines, "last_seq": 3, "dropped": 0, "has_more": lines[-1]["seq"] < 3})

    stub.routes[("GET", "/api/v1/jobs/j 1/logs")] = logs
    stub.routes[("GET", "/api/v1/jobs/j1/attempts")] = lambda r: web.json_response(
        {
            "attempts": [
                {
                    "attempt": 1,
                    "outcome": "retry",
                    "worker_id": "box:1",
                    "started_at": "2026-12-03T20:41:49Z",
                    "ended_at": "2026-12-03T20:41:50Z",
                    "duration_secs": 1.0,
                    "error_message": "boom",
                },
                {"attempt": 2, "outcome": "running", "started_at": "2026-12-03T20:41:51Z"},
            ]
        }
    )
    stub.routes[("GET", "/api/v1/workers")] = lambda r: web.json_response(
        {
            "workers": [
                {
                    "worker_id": "box:1",
                    "queues": ["q"],
                    "in_flight": 1,
                    "first_seen_at": "2026-12-03T20:41:49Z",
                    "last_seen_at": "2026-12-03T20:41:51Z",
                    "live": True,
                    "info": {"hostname": "box", "sdk": "python", "version": "1.0", "tasks": ["a"]},
                }
            ]
        }
    )
    async with Client(stub.url, "tenant", worker_token="worker") as qf:
        page = await qf.job_logs("j 1", after=0, limit=2)
        every = [entry.message async for entry in qf.iter_job_logs("j 1", limit=2)]
        attempts = await qf.job_attempts("j1")
        workers = await qf.list_workers()
    assert (
        page.has_more
        and page.last_seq == 3
        and page.lines[0]
        == m.LogLine(seq=1, attempt=1, ts=datetime(2026, 12, 3, 20, 41, 49, tzinfo=UTC), message="line 1", level="info")
    )
    assert every == ["line 1", "line 2", "line 3"]
    assert [(a.attempt, a.outcome, a.worker_id, a.error_message) for a in attempts.attempts] == [
        (1, "retry", "box:1", "boom"),
        (2, "running", None, None),
    ]
    assert attempts.attempts[1].ended_at is None and attempts.attempts[1].duration_secs is None
    [worker] = workers.workers
    assert (
        worker.live
        and worker.queues == ["q"]
        and worker.info == m.WorkerInfo(hostname="box", sdk="python", version="1.0", tasks=["a"])
    )
    paths = [path for _, path, _, _ in stub.requests]
    assert paths[0] == "/api/v1/jobs/j%201/logs?after=0&limit=2"
    assert paths[1:3] == ["/api/v1/jobs/j%201/logs?after=0&limit=2", "/api/v1/jobs/j%201/logs?after=2&limit=2"]
    assert all(headers["Authorization"] == "Bearer tenant" for _, _, headers, _ in stub.requests)
