"""CORS (shared/web/cors.py): every origin until --cors-origins names some, then only those. A
preflight is answered before routing and auth, and names Authorization explicitly; every answer to
an allowed origin (errors and SSE streams included) carries Access-Control-Allow-Origin and exposes
X-Request-ID; a disallowed origin gets no CORS headers, and its preflight a 403 error body."""

from __future__ import annotations

import re
import uuid

import pytest
import structlog

from services.api.routes import ROUTES
from shared.web.cors import normalize_origin
from tests.api.helpers import ACME, DEV, STRICT, WORKER, create_job, expect_error
from tests.workflow.helpers import create, manual, wait_step_job

A = "https://a.example"
B = "https://b.example"
RESTRICTED = {**STRICT, "cors_origins": (A,)}


def _listed(value: str | None) -> list[str]:
    return [v.strip().lower() for v in (value or "").split(",") if v.strip()]


def _cors_headers(resp) -> dict[str, str]:
    return {k.lower(): v for k, v in resp.headers.items() if k.lower().startswith("access-control-")}


def _concrete(path: str) -> str:
    """A route's path with its parameters filled in (the resources need not exist)."""
    path = path.replace("{queue}", "q-cors")
    return path.replace("{id}", "7" if path.startswith("/api/v1/dlq/") else str(uuid.uuid4()))


async def preflight(client, path: str, origin: str, method: str = "GET", headers: str | None = None):
    sent = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers is not None:
        sent["Access-Control-Request-Headers"] = headers
    return await client.options(path, headers=sent)


def assert_preflight_ok(resp, allow_origin: str, method: str) -> None:
    assert resp.status == 204, resp.status
    assert resp.headers["Access-Control-Allow-Origin"] == allow_origin
    assert method.lower() in _listed(resp.headers["Access-Control-Allow-Methods"])
    # Named, not covered by a `*`: the Fetch standard never lets `*` stand for Authorization.
    assert "authorization" in _listed(resp.headers["Access-Control-Allow-Headers"])
    assert int(resp.headers["Access-Control-Max-Age"]) > 0


def assert_allowed(resp, allow_origin: str) -> None:
    assert resp.headers["Access-Control-Allow-Origin"] == allow_origin
    assert "x-request-id" in _listed(resp.headers["Access-Control-Expose-Headers"])
    assert resp.headers["X-Request-ID"]


# --- permissive (no --cors-origins) ------------------------------------------------------------


async def test_permissive_preflight_for_a_tenant_route_names_authorization_and_the_requested_headers(api):
    client = await api(**STRICT)
    resp = await preflight(
        client, "/api/v1/jobs", "https://anywhere.example", "POST", "Content-Type, Idempotency-Key"
    )
    assert_preflight_ok(resp, "*", "POST")
    allowed = _listed(resp.headers["Access-Control-Allow-Headers"])
    assert {"authorization", "content-type", "idempotency-key"} <= set(allowed)
    assert await resp.read() == b""


async def test_permissive_preflight_requesting_authorization_is_answered_without_credentials(api):
    client = await api(**STRICT)
    resp = await preflight(client, "/api/v1/jobs", "https://anywhere.example", "GET", "authorization")
    assert_preflight_ok(resp, "*", "GET")
    assert _listed(resp.headers["Access-Control-Allow-Headers"]).count("authorization") == 1


async def test_every_served_route_answers_its_preflight_not_404_or_405(api):
    client = await api(**STRICT)
    for route in ROUTES:
        path = _concrete(route.path)
        resp = await preflight(client, path, "https://anywhere.example", route.method, "authorization")
        assert resp.status == 204, (route.method, route.path, resp.status, await resp.text())
        assert_preflight_ok(resp, "*", route.method)
    for path in ("/health", "/ready", "/openapi.json", "/openapi.yaml"):
        assert_preflight_ok(await preflight(client, path, "https://anywhere.example"), "*", "GET")


async def test_permissive_get_carries_allow_origin_and_exposes_the_request_id(api):
    client = await api(**STRICT)
    await create_job(client, ACME)
    resp = await client.get("/api/v1/jobs", headers={**ACME, "Origin": "https://anywhere.example"})
    assert resp.status == 200
    assert_allowed(resp, "*")
    assert "origin" not in _listed(resp.headers.get("Vary"))


async def test_permissive_error_answers_carry_allow_origin(api):
    client = await api(**STRICT)
    origin = {"Origin": "https://anywhere.example"}
    unauthenticated = await client.get("/api/v1/jobs", headers=origin)
    await expect_error(unauthenticated, 401)
    assert_allowed(unauthenticated, "*")
    missing = await client.get(f"/api/v1/jobs/{uuid.uuid4()}", headers={**ACME, **origin})
    await expect_error(missing, 404)
    assert_allowed(missing, "*")
    no_route = await client.get("/api/v1/nothing-here", headers=origin)
    await expect_error(no_route, 404)
    assert_allowed(no_route, "*")
    bad_body = await client.post("/api/v1/jobs", data=b"{", headers={**ACME, **origin})
    await expect_error(bad_body, 400)
    assert_allowed(bad_body, "*")


async def test_an_options_request_that_is_not_a_preflight_is_routed_as_usual(api):
    client = await api()
    resp = await client.options("/api/v1/jobs", headers={"Origin": "https://anywhere.example"})
    await expect_error(resp, 405)
    assert resp.headers["Access-Control-Allow-Origin"] == "*"


async def test_every_service_app_has_cors(api):
    client = await api(mode="janitor")
    resp = await client.get("/health", headers={"Origin": "https://anywhere.example"})
    assert resp.status == 200
    assert_allowed(resp, "*")


# --- restricted (--cors-origins) ---------------------------------------------------------------


async def test_restricted_preflight_from_a_listed_origin_echoes_it_and_varies_by_origin(api):
    client = await api(**RESTRICTED)
    resp = await preflight(client, "/api/v1/jobs", A, "POST", "authorization, content-type")
    assert_preflight_ok(resp, A, "POST")
    assert "origin" in _listed(resp.headers["Vary"])
    assert "content-type" in _listed(resp.headers["Access-Control-Allow-Headers"])


async def test_restricted_allows_any_method_and_any_header(api):
    client = await api(**RESTRICTED)
    resp = await preflight(client, "/api/v1/cron/x", A, "PURGE", "x-custom-one, X-Custom-Two")
    assert_preflight_ok(resp, A, "PURGE")
    assert {"x-custom-one", "x-custom-two"} <= set(_listed(resp.headers["Access-Control-Allow-Headers"]))


async def test_restricted_answers_to_a_listed_origin_carry_it_and_vary_by_origin(api):
    client = await api(**RESTRICTED)
    ok = await client.get("/api/v1/stats", headers={**ACME, "Origin": A})
    assert ok.status == 200
    assert_allowed(ok, A)
    assert "origin" in _listed(ok.headers["Vary"])
    denied = await client.get("/api/v1/stats", headers={"Origin": A})
    await expect_error(denied, 401)
    assert_allowed(denied, A)
    assert "origin" in _listed(denied.headers["Vary"])


async def test_restricted_preflight_from_another_origin_is_403_without_cors_headers(api):
    client = await api(**RESTRICTED)
    resp = await preflight(client, "/api/v1/jobs", B, "POST", "authorization")
    await expect_error(resp, 403)
    assert _cors_headers(resp) == {}
    assert "origin" in _listed(resp.headers["Vary"])


async def test_restricted_answers_to_another_origin_carry_no_cors_headers(api):
    client = await api(**RESTRICTED)
    resp = await client.get("/api/v1/stats", headers={**ACME, "Origin": B})
    assert resp.status == 200  # served: the browser, not the server, withholds it from the page
    assert _cors_headers(resp) == {}
    assert "origin" in _listed(resp.headers["Vary"])
    error = await client.get("/api/v1/stats", headers={"Origin": B})
    await expect_error(error, 401)
    assert _cors_headers(error) == {}
    lookalike = await client.get("/api/v1/stats", headers={**ACME, "Origin": f"{A}.evil.example"})
    assert _cors_headers(lookalike) == {}
    opaque = await preflight(client, "/api/v1/stats", "null")
    await expect_error(opaque, 403)


async def test_restricted_answers_without_an_origin_vary_by_origin_and_carry_no_allow_origin(api):
    client = await api(**RESTRICTED)
    resp = await client.get("/health")
    assert resp.status == 200
    assert _cors_headers(resp) == {}
    assert "origin" in _listed(resp.headers["Vary"])


async def test_several_origins_and_an_origin_written_differently_by_the_operator(api):
    client = await api(cors_origins=("HTTPS://A.Example:443/", "http://localhost:5173"))
    for origin in (A, "http://localhost:5173"):
        assert_preflight_ok(await preflight(client, "/api/v1/jobs", origin), origin, "GET")
    await expect_error(await preflight(client, "/api/v1/jobs", "http://localhost:5174"), 403)


async def test_invalid_origin_entries_are_skipped_with_a_warning(api):
    entries = (A, "not an origin", "https://c.example/app", "ftp//x", "https://d.example:99999")
    with structlog.testing.capture_logs() as logs:
        client = await api(cors_origins=entries)
    skipped = [e["entry"] for e in logs if e["event"] == "cors_origin_skipped"]
    assert skipped == list(entries[1:])
    assert all(e["log_level"] == "warning" for e in logs if e["event"] == "cors_origin_skipped")
    assert_preflight_ok(await preflight(client, "/api/v1/jobs", A), A, "GET")
    await expect_error(await preflight(client, "/api/v1/jobs", "https://c.example"), 403)


async def test_a_list_of_only_invalid_entries_allows_no_origin_rather_than_every_origin(api):
    with structlog.testing.capture_logs() as logs:
        client = await api(cors_origins=("a.example", "https://"))
    assert any(e["event"] == "cors_no_valid_origin" and e["log_level"] == "warning" for e in logs)
    await expect_error(await preflight(client, "/api/v1/jobs", "https://a.example"), 403)
    resp = await client.get("/health", headers={"Origin": "https://a.example"})
    assert _cors_headers(resp) == {}


async def test_a_star_entry_means_every_origin(api):
    client = await api(cors_origins=("*",))
    assert_preflight_ok(await preflight(client, "/api/v1/jobs", B), "*", "GET")


# --- worker routes and SSE ---------------------------------------------------------------------


async def test_worker_routes_preflight_and_answer_a_listed_origin(api):
    client = await api(**RESTRICTED)
    for path in ("/api/v1/queues/q-cors/lease", f"/api/v1/jobs/{uuid.uuid4()}/heartbeat"):
        resp = await preflight(client, path, A, "POST", "authorization, content-type")
        assert_preflight_ok(resp, A, "POST")
    job_id = await create_job(client, ACME, config={"queue": "q-cors"})
    leased = await client.post(
        "/api/v1/queues/q-cors/lease", json={"max_jobs": 1}, headers={**WORKER, "Origin": A}
    )
    assert leased.status == 200
    assert_allowed(leased, A)
    [item] = (await leased.json())["jobs"]
    assert item["job"]["id"] == job_id
    done = await client.post(
        f"/api/v1/jobs/{job_id}/complete",
        json={"lease_token": item["lease_token"], "result": {}},
        headers={**WORKER, "Origin": A},
    )
    assert done.status == 204
    assert_allowed(done, A)
    wrong = await client.post(
        f"/api/v1/jobs/{uuid.uuid4()}/heartbeat",
        json={"lease_token": "nope", "extend_secs": 30},
        headers={**WORKER, "Origin": A},
    )
    await expect_error(wrong, 404)
    assert_allowed(wrong, A)
    tenant = await client.post("/api/v1/queues/q-cors/lease", json={}, headers={**ACME, "Origin": B})
    await expect_error(tenant, 403)
    assert _cors_headers(tenant) == {}


async def test_job_event_stream_carries_allow_origin(api):
    client = await api(**RESTRICTED)
    job_id = await create_job(client, ACME, config={"queue": "q-cors"})
    assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ACME)).status == 204
    preflight_resp = await preflight(client, f"/api/v1/jobs/{job_id}/events", A, "GET", "authorization")
    assert_preflight_ok(preflight_resp, A, "GET")
    resp = await client.get(f"/api/v1/jobs/{job_id}/events", headers={**ACME, "Origin": A})
    assert resp.status == 200
    assert resp.content_type == "text/event-stream"
    assert resp.headers["Access-Control-Allow-Origin"] == A
    assert "origin" in _listed(resp.headers["Vary"])
    assert b"cancelled" in await resp.read()  # the terminal event, then the stream ends


async def test_workflow_event_stream_carries_allow_origin(api):
    client = await api(mode="all")
    wf_id = await create(client, [manual("a")])
    await wait_step_job(client, wf_id, "a")
    assert (await client.post(f"/api/v1/workflows/{wf_id}/cancel", headers=DEV)).status == 204
    origin = "https://anywhere.example"
    assert_preflight_ok(
        await preflight(client, f"/api/v1/workflows/{wf_id}/events", origin, "GET", "authorization"),
        "*",
        "GET",
    )
    resp = await client.get(f"/api/v1/workflows/{wf_id}/events", headers={**DEV, "Origin": origin})
    assert resp.status == 200
    assert resp.content_type == "text/event-stream"
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert b"cancelled" in await resp.read()


# --- origin entries ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "origin"),
    [
        ("https://a.example", "https://a.example"),
        (" https://a.example/ ", "https://a.example"),
        ("HTTPS://A.EXAMPLE", "https://a.example"),
        ("https://a.example:443", "https://a.example"),
        ("http://a.example:80", "http://a.example"),
        ("http://a.example:8443", "http://a.example:8443"),
        ("http://127.0.0.1:3000", "http://127.0.0.1:3000"),
        ("http://[::1]:3000", "http://[::1]:3000"),
        ("chrome-extension://abcdef", "chrome-extension://abcdef"),
        ("a.example", None),
        ("https://", None),
        ("https://a.example/app", None),
        ("https://a.example?x=1", None),
        ("https://a.example#top", None),
        ("https://user@a.example", None),
        ("https://a.example:99999", None),
        ("https://a.example:port", None),
        ("https://a .example", None),
        ("null", None),
        ("", None),
    ],
)
def test_normalize_origin(entry, origin):
    assert normalize_origin(entry) == origin
    if origin is not None:
        assert re.fullmatch(r"[a-z][a-z0-9+.-]*://[^/]+", origin)
