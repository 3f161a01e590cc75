"""POST /api/v1/jobs/complete (an extension): up to 100 completions in one call, each answered as
`POST /api/v1/jobs/{id}/complete` would answer it; a bad item never spoils the others."""

from __future__ import annotations

import uuid

from tests.protocol.helpers import complete, create_job, expire_lease, get_job, job_row, lease, post
from tests.support.api import janitor_of

COMPLETE = "/api/v1/jobs/complete"


async def test_a_batch_completes_every_held_job_with_its_own_result(api):
    client = await api()
    ids = [await create_job(client, payload={"n": n}) for n in range(5)]
    leased = await lease(client, max_jobs=5)
    items = [
        {
            "id": item["job"]["id"],
            "lease_token": item["lease_token"],
            "result": {"n": item["job"]["payload"]["n"]},
        }
        for item in leased
    ]

    status, body = await post(client, COMPLETE, {"jobs": items})

    assert status == 200
    assert body["results"] == [{"id": item["id"], "outcome": "completed", "status": 204} for item in items]
    for job_id in ids:
        job = await get_job(client, job_id)
        assert job["status"] == "completed"
        assert job["result"] == {"n": job["payload"]["n"]}


async def test_each_item_gets_the_per_job_answer_in_request_order(api, db):
    client = await api()
    held = await create_job(client)
    stale = await create_job(client)
    replayed = await create_job(client)
    tokens = {item["job"]["id"]: item["lease_token"] for item in await lease(client, max_jobs=3)}
    assert (await complete(client, replayed, tokens[replayed], {"first": True}))[0] == 204
    await expire_lease(db, stale)
    assert await janitor_of(client).reclaim_expired() == 1
    missing = str(uuid.uuid4())

    status, body = await post(
        client,
        COMPLETE,
        {
            "jobs": [
                {"id": stale, "lease_token": tokens[stale]},
                {"id": missing, "lease_token": str(uuid.uuid4())},
                {"id": held, "lease_token": tokens[held], "result": {"ok": 1}},
                {"id": replayed, "lease_token": tokens[replayed], "result": {"second": True}},
                {"id": "not-a-uuid", "lease_token": "x"},
                {"id": held, "lease_token": "not-a-token"},
            ]
        },
    )

    assert status == 200
    answers = [(a["id"], a["outcome"], a["status"]) for a in body["results"]]
    assert answers == [
        (stale, "conflict", 409),
        (missing, "not_found", 404),
        (held, "completed", 204),
        (replayed, "completed", 204),
        ("not-a-uuid", "not_found", 404),
        (held, "conflict", 409),
    ]
    assert all(a["error"] for a in body["results"] if a["status"] != 204)
    assert (await get_job(client, held))["result"] == {"ok": 1}
    assert (await get_job(client, replayed))["result"] == {"first": True}  # a replay changes nothing
    assert (await job_row(db, stale))["status"] != "completed"


async def test_bounds_and_shape_are_validated_as_a_whole(api):
    client = await api()
    item = {"id": str(uuid.uuid4()), "lease_token": str(uuid.uuid4())}
    for bad in (
        {"jobs": []},
        {"jobs": [item] * 101},
        {},
        {"jobs": [{"id": item["id"]}]},
        {"jobs": [item], "x": 1},
    ):
        status, body = await post(client, COMPLETE, bad)
        assert status == 400, (bad, body)
        assert set(body) == {"error", "timestamp"}
    status, body = await post(client, COMPLETE, {"jobs": [item] * 100})
    assert status == 200
    assert [a["status"] for a in body["results"]] == [404] * 100


async def test_it_takes_the_worker_token_not_a_tenant_key(api):
    client = await api()
    item = {"id": str(uuid.uuid4()), "lease_token": str(uuid.uuid4())}
    status, _ = await post(client, COMPLETE, {"jobs": [item]}, headers={})
    assert status == 401


async def test_it_is_advertised_in_the_openapi_document(api):
    client = await api()
    resp = await client.get("/openapi.json")
    doc = await resp.json()
    operation = doc["paths"][COMPLETE]["post"]
    assert operation["operationId"] == "completeJobs"
