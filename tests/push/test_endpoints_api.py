"""The push endpoint routes (docs/push.md): create (the secret shown once), list, read, change,
pause, remove, rotate; what a URL may name (the SSRF rules judged at creation); tenant isolation on
every route; and a lease of a bound queue refused with a 409."""

from __future__ import annotations

import socket
import uuid
from typing import Any

import pytest

from tests.protocol.helpers import create_job

KEYS = "a:acme,r:acme:ro,b:beta"
WORKER = {"Authorization": "Bearer w"}
ACME = {"Authorization": "Bearer a"}
ACME_RO = {"Authorization": "Bearer r"}
BETA = {"Authorization": "Bearer b"}
LOOPBACK = ("127.0.0.0/8",)


def endpoint(
    url: str = "http://127.0.0.1:9/hook", queues: list[str] | None = None, **more: Any
) -> dict[str, Any]:
    return {
        "name": more.pop("name", "hook"),
        "url": url,
        "queues": ["pushed"] if queues is None else queues,
        **more,
    }


@pytest.fixture
async def client(api):
    return await api(dev=False, api_keys=KEYS, worker_token="w", push_allow_cidrs=LOOPBACK)


async def create(client, body: dict[str, Any], headers=ACME) -> tuple[int, dict[str, Any]]:
    resp = await client.post("/api/v1/push-endpoints", json=body, headers=headers)
    return resp.status, await resp.json()


async def test_creating_an_endpoint_answers_201_with_its_secret_shown_only_then(client):
    status, made = await create(client, endpoint(queues=["pushed", "other", "pushed"], concurrency=3))
    assert status == 201, made
    assert made["secret"].startswith("whsec_") and len(made["secret"]) > 40
    assert made["queues"] == ["other", "pushed"]
    assert made["concurrency"] == 3 and made["timeout_secs"] == 30 and made["paused"] is False
    assert made["breaker"] == {"state": "closed", "consecutive_failures": 0}
    assert "headers" not in made
    got = await (await client.get(f"/api/v1/push-endpoints/{made['id']}", headers=ACME)).json()
    assert "secret" not in got and got["id"] == made["id"] and got["url"] == made["url"]
    listed = await (await client.get("/api/v1/push-endpoints", headers=ACME)).json()
    assert [e["id"] for e in listed["push_endpoints"]] == [made["id"]]
    assert "secret" not in listed["push_endpoints"][0]


async def test_defaults_are_concurrency_10_and_a_30_second_timeout(client):
    _, made = await create(client, endpoint())
    assert (made["concurrency"], made["timeout_secs"]) == (10, 30)


async def test_patch_changes_fields_pauses_and_rebinds_queues(client):
    _, made = await create(client, endpoint(headers={"X-Token": "t1"}))
    resp = await client.patch(
        f"/api/v1/push-endpoints/{made['id']}",
        json={"paused": True, "queues": ["second"], "timeout_secs": 5, "headers": {}},
        headers=ACME,
    )
    changed = await resp.json()
    assert resp.status == 200, changed
    assert changed["paused"] is True and changed["queues"] == ["second"] and changed["timeout_secs"] == 5
    assert "headers" not in changed
    # "pushed" is free again: another endpoint may take it
    status, other = await create(client, endpoint(name="other"))
    assert status == 201, other


async def test_a_queue_bound_to_one_endpoint_cannot_be_bound_to_another_409(client):
    await create(client, endpoint())
    status, body = await create(client, endpoint(name="second"))
    assert status == 409 and "already drained by push endpoint 'hook'" in body["error"]
    status, body = await create(client, endpoint())
    assert status == 409 and "named 'hook'" in body["error"]


async def test_rotating_the_secret_shows_a_new_one_and_the_old_one_keeps_signing_for_the_grace(client):
    _, made = await create(client, endpoint())
    resp = await client.post(f"/api/v1/push-endpoints/{made['id']}/rotate-secret", json={}, headers=ACME)
    rotated = await resp.json()
    assert resp.status == 200, rotated
    assert rotated["secret"].startswith("whsec_") and rotated["secret"] != made["secret"]
    assert "previous_secret_expires_at" in rotated
    resp = await client.post(
        f"/api/v1/push-endpoints/{made['id']}/rotate-secret", json={"grace_secs": 0}, headers=ACME
    )
    assert "previous_secret_expires_at" not in await resp.json()


async def test_delete_removes_the_endpoint_and_frees_its_queue_for_leasing(client):
    _, made = await create(client, endpoint())
    resp = await client.post("/api/v1/queues/pushed/lease", json={}, headers=WORKER)
    assert resp.status == 409
    resp = await client.delete(f"/api/v1/push-endpoints/{made['id']}", headers=ACME)
    assert resp.status == 204
    resp = await client.get(f"/api/v1/push-endpoints/{made['id']}", headers=ACME)
    assert resp.status == 404
    resp = await client.post("/api/v1/queues/pushed/lease", json={}, headers=WORKER)
    assert resp.status == 200


async def test_leasing_a_bound_queue_is_409_saying_it_is_drained_by_push(client):
    await create(client, endpoint())
    await create_job(client, queue="pushed", headers=ACME)
    resp = await client.post("/api/v1/queues/pushed/lease", json={"max_jobs": 5}, headers=WORKER)
    body = await resp.json()
    assert resp.status == 409
    assert "drained by push delivery" in body["error"] and "timestamp" in body
    # another queue still leases
    resp = await client.post("/api/v1/queues/free/lease", json={}, headers=WORKER)
    assert resp.status == 200


async def test_a_worker_key_of_another_tenant_still_leases_a_queue_only_acme_bound(client):
    await create(client, endpoint())
    resp = await client.post("/api/v1/worker-keys", json={"name": "beta-workers"}, headers=BETA)
    key = (await resp.json())["token"]
    resp = await client.post(
        "/api/v1/queues/pushed/lease", json={}, headers={"Authorization": f"Bearer {key}"}
    )
    assert resp.status == 200
    resp = await client.post("/api/v1/worker-keys", json={"name": "acme-workers"}, headers=ACME)
    key = (await resp.json())["token"]
    resp = await client.post(
        "/api/v1/queues/pushed/lease", json={}, headers={"Authorization": f"Bearer {key}"}
    )
    assert resp.status == 409


@pytest.mark.parametrize("limits", [None, ["k"]], ids=["plain", "limited"])
async def test_the_worker_token_leases_the_tenants_that_did_not_bind_a_queue_and_never_a_bound_ones(
    client, limits
):
    # acme pushes `pushed`; beta leases it: one tenant's binding stops no fleet worker, and a
    # claim for every tenant (plain or limited) leaves acme's jobs to the pushers.
    await create(client, endpoint())
    extra = {} if limits is None else {"limits": limits}
    acme = {await create_job(client, queue="pushed", headers=ACME, **extra) for _ in range(3)}
    beta = {await create_job(client, queue="pushed", headers=BETA, **extra) for _ in range(2)}
    resp = await client.post("/api/v1/queues/pushed/lease", json={"max_jobs": 10}, headers=WORKER)
    assert resp.status == 200, await resp.text()
    leased = {entry["job"]["id"] for entry in (await resp.json())["jobs"]}
    assert leased == beta
    for job_id in acme:
        resp = await client.get(f"/api/v1/jobs/{job_id}", headers=ACME)
        assert (await resp.json())["status"] == "pending"


async def test_the_worker_token_is_refused_once_every_tenant_of_the_queue_bound_it(client):
    await create(client, endpoint())
    await create_job(client, queue="pushed", headers=BETA)
    resp = await client.post("/api/v1/queues/pushed/lease", json={}, headers=WORKER)
    assert resp.status == 200  # beta's job
    await create(client, endpoint(), headers=BETA)
    resp = await client.post("/api/v1/queues/pushed/lease", json={}, headers=WORKER)
    assert resp.status == 409


async def test_every_route_is_a_tenant_route_read_only_reads_and_another_tenant_gets_404(client):
    _, made = await create(client, endpoint())
    one = f"/api/v1/push-endpoints/{made['id']}"
    reads = [("GET", "/api/v1/push-endpoints", None), ("GET", one, None), ("GET", f"{one}/deliveries", None)]
    writes = [
        ("POST", "/api/v1/push-endpoints", endpoint(name="x", queues=["x"])),
        ("PATCH", one, {"paused": True}),
        ("POST", f"{one}/rotate-secret", {}),
        ("DELETE", one, None),
    ]
    for method, path, body in reads:
        resp = await client.request(method, path, json=body, headers=ACME_RO)
        assert resp.status == 200, (method, path, await resp.text())
    for method, path, body in writes:
        resp = await client.request(method, path, json=body, headers=ACME_RO)
        assert resp.status == 403, (method, path)
    for method, path, body in [*reads, *writes]:
        resp = await client.request(method, path, json=body, headers={})
        assert resp.status == 401, (method, path)
    listed = await (await client.get("/api/v1/push-endpoints", headers=BETA)).json()
    assert listed == {"push_endpoints": []}
    for method, path, body in [*reads[1:], *writes[1:]]:
        resp = await client.request(method, path, json=body, headers=BETA)
        assert resp.status == 404, (method, path, await resp.text())
    resp = await client.get(one, headers=ACME)
    assert resp.status == 200 and (await resp.json())["paused"] is False  # beta changed nothing


async def test_an_unknown_or_malformed_endpoint_id_is_404(client):
    for ident in (str(uuid.uuid4()), "not-a-uuid"):
        resp = await client.get(f"/api/v1/push-endpoints/{ident}", headers=ACME)
        assert resp.status == 404


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (endpoint(url="ftp://example.com/x"), "http:// or https://"),
        (endpoint(url="http:///nohost"), "no host"),
        (endpoint(url="https://user:pw@example.com/"), "credentials"),
        (endpoint(queues=[]), "queues"),
        (endpoint(concurrency=0), "concurrency"),
        (endpoint(timeout_secs=901), "timeout_secs"),
        (endpoint(headers={"webhook-signature": "x"}), "set by every delivery"),
        (endpoint(headers={"X-Bad": "a\r\nInjected: 1"}), "line"),
        (endpoint(headers={"bad name": "x"}), "field name"),
        ({"url": "https://example.com", "queues": ["q"]}, "name"),
    ],
)
async def test_a_malformed_endpoint_is_400_naming_the_problem(client, body, says):
    status, answer = await create(client, body)
    assert status == 400 and says in answer["error"], answer


# --- the SSRF rules at creation ------------------------------------------------------------------


@pytest.fixture
async def strict(api):
    """An api without --push-allow-cidrs: the defaults refuse every non-public address."""
    return await api(dev=False, api_keys=KEYS, worker_token="w")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://[::1]:8080/hook", "loopback"),
        ("http://[::ffff:127.0.0.1]:8080/hook", "loopback"),
        ("http://[fd00:ec2::254]/", "metadata"),
        ("http://10.1.2.3/hook", "private"),
        ("http://192.168.0.10/hook", "private"),
        ("http://[fe80::1]/hook", "link-local"),
        ("http://224.0.0.1/hook", "multicast"),
        ("http://0.0.0.0:8080/hook", "unspecified"),
        ("http://localhost:8080/hook", "loopback"),
    ],
)
async def test_an_address_deliveries_may_not_reach_is_refused_at_creation(strict, url, why):
    status, answer = await create(strict, endpoint(url=url))
    assert status == 400 and why in answer["error"], answer


async def test_a_name_that_resolves_to_a_refused_address_is_refused_at_creation(strict):
    # The machine's own name resolves (through /etc/hosts or its resolver) to an address of this
    # machine: loopback or private, never one deliveries may reach by default.
    host = socket.gethostname()
    addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    assert addresses, host
    status, answer = await create(strict, endpoint(url=f"http://{host}:8080/hook"))
    assert status == 400 and "resolves to" in answer["error"], answer


async def test_the_metadata_address_is_refused_even_inside_an_allowed_range(api):
    client = await api(dev=False, api_keys=KEYS, worker_token="w", push_allow_cidrs=("169.254.0.0/16",))
    status, answer = await create(client, endpoint(url="http://169.254.169.254/"))
    assert status == 400 and "metadata" in answer["error"]
    status, answer = await create(client, endpoint(url="http://169.254.10.10/"))
    assert status == 201, answer


async def test_an_allowed_range_lets_loopback_through(client):
    for number, url in enumerate(("http://127.0.0.1:8080/hook", "http://localhost:1/x")):
        status, answer = await create(client, endpoint(url=url, name=f"n{number}", queues=[f"q{number}"]))
        assert status == 201, answer
