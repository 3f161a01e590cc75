"""The limits routes: policies per tenant with their live figures, and `limits` on a job's config."""

from __future__ import annotations

import pytest

from tests.limits.helpers import READ_ONLY, A, B, W, complete, enqueue, lease, put_limit, strict


async def test_a_policy_is_put_read_listed_replaced_and_deleted_per_tenant(api):
    client = await strict(api)
    put = await put_limit(client, "customer:42", {"concurrency": 3})
    assert put["key"] == "customer:42" and put["concurrency"] == 3 and put["running"] == 0
    assert put.get("rate") is None and "rate_available" not in put

    both = await put_limit(client, "customer:42", {"rate": {"count": 20, "per_secs": 1}})
    assert both["concurrency"] is None and both["rate"] == {"count": 20, "per_secs": 1.0}  # replaced whole
    assert both["rate_available"] == 20

    got = await (await client.get("/api/v1/limits/customer:42", headers=A)).json()
    assert got["rate"] == {"count": 20, "per_secs": 1.0}
    assert (await client.get("/api/v1/limits/customer:42", headers=B)).status == 404  # another tenant's
    assert (await client.get("/api/v1/limits/customer:43", headers=A)).status == 404  # no policy of its own

    await put_limit(client, "customer:*", {"concurrency": 1})
    listed = await (await client.get("/api/v1/limits", headers=A)).json()
    assert [p["key"] for p in listed["limits"]] == ["customer:*", "customer:42"]
    assert (await (await client.get("/api/v1/limits", headers=B)).json()) == {"limits": []}

    assert (await client.delete("/api/v1/limits/customer:42", headers=A)).status == 204
    assert (await client.delete("/api/v1/limits/customer:42", headers=A)).status == 404
    assert (await client.get("/api/v1/limits/customer:42", headers=A)).status == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"concurrency": None, "rate": None},
        {"concurrency": 0},
        {"concurrency": 100_001},
        {"concurrency": "3"},
        {"rate": {"count": 0, "per_secs": 1}},
        {"rate": {"count": 1_000_001, "per_secs": 1}},
        {"rate": {"count": 1, "per_secs": 0.0001}},
        {"rate": {"count": 1, "per_secs": 86_401}},
        {"rate": {"count": 1}},
        {"rate": {"count": 1, "per_secs": 1, "burst": 2}},
        {"concurrency": 1, "unknown": True},
    ],
)
async def test_a_bad_policy_is_a_400_with_the_error_body(api, body):
    client = await strict(api)
    resp = await client.put("/api/v1/limits/k", json=body, headers=A)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"]


async def test_bad_keys_and_credentials_on_the_limits_routes(api):
    client = await strict(api)
    assert (await client.put("/api/v1/limits/*", json={"concurrency": 1}, headers=A)).status == 400
    assert (await client.put("/api/v1/limits/" + "k" * 129, json={"concurrency": 1}, headers=A)).status == 400
    assert (await client.put("/api/v1/limits/a%20b", json={"concurrency": 1}, headers=A)).status == 400
    assert (await client.put("/api/v1/limits/k", json={"concurrency": 1}, headers=READ_ONLY)).status == 403
    assert (await client.get("/api/v1/limits", headers=READ_ONLY)).status == 200
    assert (await client.get("/api/v1/limits", headers=W)).status == 403
    assert (await client.get("/api/v1/limits")).status == 401
    resp = await client.put("/api/v1/limits/k", data=b"{not json", headers=A)
    assert resp.status == 400


async def test_limits_are_stored_in_the_config_and_left_out_when_absent(api):
    client = await strict(api)
    [with_keys] = await enqueue(client, 1, ["customer:1", "api:stripe"])
    [without] = await enqueue(client, 1, None)
    job = await (await client.get(f"/api/v1/jobs/{with_keys}", headers=A)).json()
    assert job["config"]["limits"] == ["customer:1", "api:stripe"]
    plain = await (await client.get(f"/api/v1/jobs/{without}", headers=A)).json()
    assert "limits" not in plain["config"]
    leased = await lease(client, max_jobs=10)
    assert {j["job"]["id"] for j in leased} == {with_keys, without}
    by_id = {j["job"]["id"]: j["job"] for j in leased}
    assert by_id[with_keys]["config"]["limits"] == ["customer:1", "api:stripe"]
    assert "limits" not in by_id[without]["config"]


@pytest.mark.parametrize(
    "limits",
    [["a", "b", "c", "d", "e"], ["a", "a"], [""], ["a b"], ["tab\there"], ["é" * 65], [1], "customer:1"],
)
async def test_bad_limits_on_a_job_are_a_400(api, limits):
    client = await strict(api)
    resp = await client.post("/api/v1/jobs", json={"task_name": "t", "config": {"limits": limits}}, headers=A)
    assert resp.status == 400, await resp.text()
    batch = await client.post(
        "/api/v1/jobs/batch", json={"jobs": [{"task_name": "t", "config": {"limits": limits}}]}, headers=A
    )
    assert batch.status == 400, await batch.text()


async def test_the_sql_enqueue_function_takes_limits_and_checks_them(api, db):
    client = await strict(api)
    await put_limit(client, "sql:k", {"concurrency": 1})
    first = await db.fetchval(
        "SELECT queueflow.enqueue('acme', 't', '{}', 'q', '{\"limits\": [\"sql:k\"]}'::jsonb)"
    )
    await db.fetchval("SELECT queueflow.enqueue('acme', 't', '{}', 'q', '{\"limits\": [\"sql:k\"]}'::jsonb)")
    stored = await db.fetchrow(
        "SELECT config->'limits' AS config, limit_keys FROM queueflow.jobs WHERE id = $1", first
    )
    assert stored["config"] == '["sql:k"]' and stored["limit_keys"] == ["sql:k"]  # the insert trigger's
    assert len(await lease(client, max_jobs=10)) == 1  # the policy holds for SQL-enqueued jobs too
    with pytest.raises(Exception, match=r"config\.limits"):
        await db.fetchval(
            "SELECT queueflow.enqueue('acme', 't', '{}', 'q', '{\"limits\": [\"a b\"]}'::jsonb)"
        )
    with pytest.raises(Exception, match=r"config\.limits"):
        await db.fetchval(
            'SELECT queueflow.enqueue(\'acme\', \'t\', \'{}\', \'q\', \'{"limits": ["a","b","c","d","e"]}\'::jsonb)'
        )


async def test_the_live_figures_follow_claims_and_completions(api):
    client = await strict(api)
    await put_limit(client, "k", {"concurrency": 5, "rate": {"count": 100, "per_secs": 60}})
    await enqueue(client, 3, ["k"])
    leased = await lease(client, max_jobs=10)
    assert len(leased) == 3
    got = await (await client.get("/api/v1/limits/k", headers=A)).json()
    assert got["running"] == 3 and got["rate_available"] == 97
    await complete(client, leased[0])
    got = await (await client.get("/api/v1/limits/k", headers=A)).json()
    assert got["running"] == 2
