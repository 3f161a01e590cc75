"""/openapi.json documents exactly what the server serves, and everything the older published spec
and the 0.5 client name that this server implements."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import queueflow
import yaml

import shared
from services.api.routes import PUBLIC_DOCS, ROUTES

# The older published spec, vendored under tests/reference (its README says where it came from).
REFERENCE = Path(__file__).resolve().parents[1] / "reference"
OLD_SPEC = json.loads((REFERENCE / "queueflow-openapi.json").read_text())
CLIENT_API = Path(queueflow.__file__).parent / "api"
METHODS = {"get", "post", "put", "patch", "delete"}

# Routes of the older spec this server does not serve (yet). Keep this set exact: the test fails
# both when a listed route lands (so it must come off the list, documented) and when a served one
# disappears. Workflows and cron were once here; every old-spec route is now served.
EXPECTED_MISSING_FROM_OLD_SPEC: set[tuple[str, str]] = set()
# Routes the 0.5 client calls that this server does not serve (same rule).
EXPECTED_MISSING_FROM_CLIENT: set[tuple[str, str]] = set()
# Served but not API operations: the document itself (JSON and YAML), and the console's and
# Swagger UI's pages.
UNDOCUMENTED = {
    ("GET", "/openapi.json"),
    ("GET", "/openapi.yaml"),
    *(("GET", page) for page in ("/ui", "/ui/", "/ui/{path}", "/docs", "/docs/", "/docs/{path}")),
    # The console's sign-in (services/api/console/auth.py): the browser's, not the API's.
    *(("GET", page) for page in ("/ui/auth/session", "/ui/auth/login", "/ui/auth/callback")),
    ("POST", "/ui/auth/logout"),
}


def _ops(spec: dict) -> set[tuple[str, str]]:
    return {(m.upper(), p) for p, item in spec["paths"].items() for m in item if m in METHODS}


def _client_ops() -> set[tuple[str, str]]:
    found = set()
    for module in CLIENT_API.glob("*_api.py"):
        text = module.read_text()
        found |= set(re.findall(r"method='(\w+)',\s*resource_path='([^']+)'", text))
    assert len(found) > 30  # the pattern still matches the generated code
    return found


@pytest.fixture
async def spec(api):
    client = await api()
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    return client, await resp.json()


async def test_openapi_is_public_3x_and_versioned_like_the_server(api):
    client = await api(dev=False, worker_token="w", api_keys="k:t")
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    body = await resp.json()
    assert body["openapi"].startswith("3.")
    assert body["info"]["version"] == shared.__version__
    assert body["info"]["title"]


async def test_openapi_yaml_is_public_and_exactly_the_json_document(api):
    client = await api(dev=False, worker_token="w", api_keys="k:t")
    as_json = await (await client.get("/openapi.json")).json()
    resp = await client.get("/openapi.yaml")
    assert resp.status == 200
    assert resp.content_type == "application/yaml"
    text = await resp.text()
    assert yaml.safe_load(text) == as_json
    # Built once: a second answer is the same bytes.
    assert await (await client.get("/openapi.yaml")).text() == text


async def test_the_document_names_no_host_so_clients_call_the_one_they_loaded_it_from(spec):
    _, body = spec
    assert body["servers"] == [{"url": "/"}]


async def test_every_route_in_the_route_table_is_documented(spec):
    _, body = spec
    documented = _ops(body)
    for route in ROUTES:
        assert (route.method, route.path) in documented, route.path
    for method, path, *_ in PUBLIC_DOCS:
        assert (method, path) in documented


async def test_documented_routes_are_exactly_the_served_routes(spec):
    client, body = spec
    served = set()
    for route in client.server.app.router.routes():
        if route.method in ("HEAD", "*"):
            continue
        served.add((route.method, route.resource.canonical))
    assert served - UNDOCUMENTED == _ops(body)


async def test_every_old_spec_route_is_documented_except_the_expected_missing_ones(spec):
    _, body = spec
    assert _ops(OLD_SPEC) - _ops(body) == EXPECTED_MISSING_FROM_OLD_SPEC


async def test_every_route_the_client_calls_is_documented_except_the_expected_missing_ones(spec):
    _, body = spec
    assert _client_ops() - _ops(body) == EXPECTED_MISSING_FROM_CLIENT


async def test_shared_operations_keep_the_old_operation_ids_and_success_codes(spec):
    _, body = spec
    for method, path in _ops(OLD_SPEC) & _ops(body):
        old = OLD_SPEC["paths"][path][method.lower()]
        new = body["paths"][path][method.lower()]
        assert new["operationId"] == old["operationId"], (method, path)
        old_ok = {c for c in old["responses"] if c.startswith("2")}
        new_ok = {c for c in new["responses"] if c.startswith("2")}
        assert new_ok == old_ok, (method, path)


async def test_operation_ids_are_unique(spec):
    _, body = spec
    ids = [op["operationId"] for item in body["paths"].values() for m, op in item.items() if m in METHODS]
    assert len(ids) == len(set(ids))


async def test_shared_operations_document_the_old_parameters(spec):
    _, body = spec
    for method, path in _ops(OLD_SPEC) & _ops(body):
        new = {(p["name"], p["in"]) for p in body["paths"][path][method.lower()].get("parameters", [])}
        for param in OLD_SPEC["paths"][path][method.lower()].get("parameters", []):
            assert (param["name"], param["in"]) in new, (method, path, param["name"])


async def test_path_and_query_parameter_types_match_the_old_spec(spec):
    """A client generated from our document must type the dead-letter id as an integer, as the
    server parses it (a non-integer is a 400) and the 0.5 client sends it."""
    _, body = spec
    for method, path in _ops(OLD_SPEC) & _ops(body):
        new = {
            (p["name"], p["in"]): p["schema"]
            for p in body["paths"][path][method.lower()].get("parameters", [])
        }
        for param in OLD_SPEC["paths"][path][method.lower()].get("parameters", []):
            if param["in"] == "header":
                continue
            ours = new[(param["name"], param["in"])]
            assert ours.get("type") == param["schema"]["type"], (method, path, param["name"], ours)


async def test_every_schema_reference_resolves(spec):
    _, body = spec
    schemas = body["components"]["schemas"]
    refs = set(re.findall(r'"\$ref":\s*"#/components/schemas/([^"]+)"', json.dumps(body)))
    assert refs
    assert refs <= set(schemas), refs - set(schemas)


async def test_old_schemas_fields_are_all_present_in_ours(spec):
    _, body = spec
    ours = body["components"]["schemas"]
    shared_names = set(OLD_SPEC["components"]["schemas"]) & set(ours)
    assert {
        "Job",
        "CreateJobRequest",
        "JobConfigRequest",
        "DeadLetter",
        "StatsSnapshot",
        "ErrorBody",
        "ListJobsResponse",
        "LeaseJobsRequest",
        "HealthStatus",
    } <= shared_names
    for name in shared_names:
        old_props = set(OLD_SPEC["components"]["schemas"][name].get("properties", {}))
        new_props = set(ours[name].get("properties", {}))
        assert old_props <= new_props, (name, old_props - new_props)
        # Nothing the old spec left optional became required in a request.
        if name.endswith("Request"):
            old_required = set(OLD_SPEC["components"]["schemas"][name].get("required", []))
            assert set(ours[name].get("required", [])) <= old_required, name


async def test_tenant_and_worker_routes_require_bearer_auth_and_probes_do_not(spec):
    _, body = spec
    assert body["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    public = {(m, p) for m, p, *_ in PUBLIC_DOCS}
    for method, path in _ops(body):
        op = body["paths"][path][method.lower()]
        if (method, path) in public:
            assert not op.get("security"), path
        else:
            assert op["security"] == [{"bearerAuth": []}], path
            assert "401" in op["responses"], path


async def test_json_operations_document_their_bodies_and_error_responses(spec):
    _, body = spec
    for route in ROUTES:
        op = body["paths"][route.path][route.method.lower()]
        assert str(route.status) in op["responses"], route.path
        if route.request is not None:
            assert "application/json" in op["requestBody"]["content"], route.path
        if route.events is not None:
            assert "text/event-stream" in op["responses"][str(route.status)]["content"], route.path
        error = op["responses"]["401"]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ErrorBody"}, route.path


async def test_create_job_documents_the_idempotency_key_header(spec):
    _, body = spec
    params = body["paths"]["/api/v1/jobs"]["post"]["parameters"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in params)


async def test_list_operations_document_the_shared_list_parameters(spec):
    _, body = spec
    for path in ("/api/v1/jobs", "/api/v1/dlq"):
        names = {p["name"] for p in body["paths"][path]["get"]["parameters"] if p["in"] == "query"}
        assert {
            "limit",
            "offset",
            "order_by",
            "include_total",
            "cursor",
            "created_after",
            "created_before",
        } <= names, path


async def test_tasks_and_queues_take_no_query_parameters(spec):
    """Neither listing pages or filters (upstream's neither; the 0.5 client sends none)."""
    _, body = spec
    for path in ("/api/v1/tasks", "/api/v1/queues"):
        assert not [p for p in body["paths"][path]["get"]["parameters"] if p["in"] == "query"], path


async def test_only_the_dead_letter_listing_documents_replayed(spec):
    _, body = spec
    for path in ("/api/v1/jobs", "/api/v1/workflows", "/api/v1/cron", "/api/v1/dlq"):
        names = {p["name"] for p in body["paths"][path]["get"]["parameters"]}
        assert ("replayed" in names) == (path == "/api/v1/dlq"), path


@pytest.mark.parametrize(
    ("path", "event_type"),
    [("/api/v1/jobs/{id}/events", "Job"), ("/api/v1/workflows/{id}/events", "WorkflowEvent")],
)
async def test_event_streams_describe_their_events(spec, path, event_type):
    """Each event of a text/event-stream answer is `event: status` with the JSON of a Job or a
    WorkflowEvent as its data (OpenAPI 3.1: the media type's schema describes one event); a job's
    stream also has `progress` and `log` events (docs/visibility.md)."""
    _, body = spec
    schema = body["paths"][path]["get"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    variants = schema.get("oneOf", [schema])
    events = {}
    for event in variants:
        assert event["required"] == ["event", "data"]
        data = event["properties"]["data"]
        assert data["contentMediaType"] == "application/json"
        events[event["properties"]["event"]["const"]] = data["contentSchema"]["$ref"].rsplit("/", 1)[1]
    extra = {"progress": "Progress", "log": "LogLine"} if event_type == "Job" else {}
    assert events == {"status": event_type, **extra}
    for name in events.values():
        assert name in body["components"]["schemas"]


async def test_the_batch_limits_follow_the_server_settings(api):
    client = await api(max_batch=7)
    body = await (await client.get("/openapi.json")).json()
    batch = body["components"]["schemas"]["CreateBatchJobsRequest"]["properties"]["jobs"]
    assert (batch["minItems"], batch["maxItems"]) == (1, 7)
    cancel = body["components"]["schemas"]["CancelJobsRequest"]["properties"]["limit"]["anyOf"][0]
    assert cancel["maximum"] == 7


def _validator(document: dict, component: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        {"$ref": f"#/components/schemas/{component}", "components": document["components"]}
    )


# Bodies the document refuses: the server refuses each with a 400 (a previous fuzzing run found
# these accepted by the document and refused by the server).
REFUSED = [
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": ""}),
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": " \t"}),
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": "t", "run_at": "tomorrow"}),
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": "t", "run_at": "0001-01-01T00:00:00Z"}),
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": "t", "config": {"queue": "a b"}}),
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": "t", "payload": {"k": "a\u0000b"}}),
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": "t", "payload": {"a\u0000": 1}}),
    ("/api/v1/jobs/batch", "CreateBatchJobsRequest", {"jobs": []}),
    ("/api/v1/jobs/cancel", "CancelJobsRequest", {"created_after": ""}),
    ("/api/v1/jobs/cancel", "CancelJobsRequest", {"limit": 1001}),
    ("/api/v1/workflows", "CreateWorkflowRequest", {"name": "w", "steps": []}),
    ("/api/v1/workflows", "CreateWorkflowRequest", {"name": " ", "steps": [{"name": "a", "task_name": "t"}]}),
    ("/api/v1/workflows", "CreateWorkflowRequest", {"name": "w", "steps": [{"name": "a"}]}),
    ("/api/v1/workflows", "CreateWorkflowRequest", {"name": "w", "steps": [{"name": "a", "task_name": ""}]}),
    (
        "/api/v1/workflows",
        "CreateWorkflowRequest",
        {"name": "w", "steps": [{"name": "a", "task_name": "t", "workflow": {"name": "s", "steps": [{"name": "b", "task_name": "t"}]}}]},
    ),
    (
        "/api/v1/workflows",
        "CreateWorkflowRequest",
        {"name": "w", "steps": [{"name": "a", "task_name": "t", "when": {"path": "x", "op": "gt"}}]},
    ),
    (
        "/api/v1/workflows",
        "CreateWorkflowRequest",
        {"name": "w", "steps": [{"name": "a", "task_name": "t", "when": {"path": "x", "all": []}}]},
    ),
    (
        "/api/v1/workflows",
        "CreateWorkflowRequest",
        {"name": "w", "steps": [{"name": "a", "task_name": "t", "when": {"path": "x", "op": "in", "value": 1}}]},
    ),
    ("/api/v1/cron", "CreateCronRequest", {"name": "c", "cron_expr": "", "task_name": "t"}),
    ("/api/v1/cron", "CreateCronRequest", {"name": "c", "cron_expr": "61 * * * *", "task_name": "t"}),
]  # fmt: skip

# Bodies the document allows, at the edges of the rules above: the server takes each.
ACCEPTED = [
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": " t ", "run_at": "0002-01-01T00:00:00+23:59"}),
    ("/api/v1/jobs", "CreateJobRequest", {"task_name": "t", "config": {"queue": "é-ü.q", "max_retries": 2.0}}),
    ("/api/v1/jobs/cancel", "CancelJobsRequest", {}),
    ("/api/v1/jobs/cancel", "CancelJobsRequest", {"created_after": "9998-12-28T23:59:59.5-23:00", "limit": 1000}),
    (
        "/api/v1/workflows",
        "CreateWorkflowRequest",
        {"name": "w", "steps": [{"name": "a", "task_name": " ", "workflow": {"name": "s", "steps": [{"name": "b", "task_name": "t"}]}}]},
    ),
    (
        "/api/v1/workflows",
        "CreateWorkflowRequest",
        {"name": "w", "steps": [{"name": "a", "task_name": "t", "when": {"all": [{"path": "x"}, {"not": {"path": "y", "op": "in", "value": [1]}}]}}]},
    ),
    ("/api/v1/cron", "CreateCronRequest", {"name": " ", "cron_expr": "*/5 1-3,7 1 JAN-MAR MON", "task_name": "t"}),
]  # fmt: skip


@pytest.mark.parametrize(("path", "component", "body"), REFUSED)
async def test_what_the_document_refuses_the_server_refuses(spec, path, component, body):
    client, document = spec
    assert not _validator(document, component).is_valid(body)
    resp = await client.post(path, json=body, headers={"Authorization": "Bearer dev"})
    assert resp.status == 400, await resp.text()


@pytest.mark.parametrize(("path", "component", "body"), ACCEPTED)
async def test_what_the_document_allows_the_server_takes(spec, path, component, body):
    client, document = spec
    _validator(document, component).validate(body)
    resp = await client.post(path, json=body, headers={"Authorization": "Bearer dev"})
    assert resp.status in (200, 201), await resp.text()


@pytest.mark.parametrize(
    ("path", "query", "valid"),
    [
        ("/api/v1/jobs", {"status": "nope"}, False),
        ("/api/v1/jobs", {"status": ""}, True),
        ("/api/v1/jobs", {"created_after": "2020-13-01T00:00:00Z"}, False),
        ("/api/v1/jobs", {"created_after": ""}, True),
        ("/api/v1/jobs", {"cursor": "12:not-a-uuid"}, False),
        ("/api/v1/jobs", {"cursor": "1700000000000000:00000000-0000-4000-8000-000000000000"}, True),
        ("/api/v1/dlq", {"cursor": "1700000000000000:x"}, False),
        ("/api/v1/workflows", {"status": "pending"}, False),
        ("/api/v1/workflows", {"status": "running", "queue": "ignored"}, True),
        ("/api/v1/jobs", {"id_contains": "0199-AbC"}, True),
        ("/api/v1/jobs", {"id_contains": ""}, True),
        ("/api/v1/jobs", {"id_contains": "f" * 36}, True),
        ("/api/v1/jobs", {"id_contains": "f" * 37}, False),
        ("/api/v1/jobs", {"id_contains": "0199%"}, False),
    ],
)
async def test_list_parameters_are_exactly_what_the_listing_accepts(spec, path, query, valid):
    client, document = spec
    params = {p["name"]: p["schema"] for p in document["paths"][path]["get"]["parameters"]}
    assert all(jsonschema.Draft202012Validator(params[k]).is_valid(v) for k, v in query.items()) == valid
    resp = await client.get(path, params=query, headers={"Authorization": "Bearer dev"})
    assert resp.status == (200 if valid else 400), await resp.text()
