"""/openapi.json and /openapi.yaml: one document, generated from the route table and the msgspec
wire types, built once per process. Its `servers` entry is relative ("/"), so a client or Swagger UI
calls the host it loaded the document from.

The document says exactly what the server accepts, so that a request valid by the document is
never answered 400 and an invalid one never succeeds (tests/api/test_schema_fuzz.py checks both
with Schemathesis). msgspec's schemas carry the types and the `Meta` bounds; the rules the server
checks in code are added here from the same constants (`_refine`): non-blank names, queue names,
timestamps PostgreSQL can store, no NUL character anywhere (PostgreSQL text and jsonb cannot hold
one), a step with exactly one of `task_name` and `workflow`, the shapes of a step condition, and
the batch limits of this server's settings. What JSON Schema cannot say (unique step names,
dependencies that name a step of the same workflow and form no cycle, JSON nested at most 100 deep,
a cron expression that fires, this server's size caps on payloads and results) is in the
descriptions.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from functools import cache
from typing import Any
from zoneinfo import available_timezones

import msgspec
from aiohttp import web

import shared
from services.api.routes import PUBLIC_DOCS, ROUTES, fixed_siblings
from shared import wire
from shared.config import Settings
from shared.domain.caps import MAX_ERROR_BYTES
from shared.domain.cron import CRON_PATTERN, MAX_CRON_EXPR
from shared.domain.jobs import (
    CONTROL_CHARS,
    MAX_LIMIT_KEY_BYTES,
    MAX_QUEUE_BYTES,
    MAX_UNIQUE_KEY_BYTES,
    NON_BLANK_PATTERN,
    QUEUE_NAME_PATTERN,
    SPACE_CHARS,
    JobStatus,
)
from shared.domain.paging import ID_FRAGMENT_PATTERN, MAX_OFFSET
from shared.domain.push import MAX_HEADER_VALUE_CHARS, MAX_HEADERS, RESERVED_HEADERS
from shared.domain.stats import DEFAULT_STEPS, METRICS_PATTERN, STEPS, WINDOWS, Metric
from shared.domain.visibility import DEFAULT_LOG_PAGE, MAX_LOG_PAGE
from shared.domain.workflows import MAX_EVENT_KEY_BYTES, MAX_WORKFLOW_STEPS, WorkflowStatus
from shared.runtime.keys import SETTINGS

REF = "#/components/schemas/{name}"
NO_NUL = r"^[^\x00]*$"

# RFC 3339 instants. The server takes any instant from 0001-01-02 to 9999-12-30 UTC (PostgreSQL's
# finite range as asyncpg writes it); the pattern keeps to years 0002-9998 and to days 01-28, so
# that every string it allows is a real instant in range whatever its offset.
_YEAR = r"(000[2-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-8][0-9]{3}|9[0-8][0-9]{2}|99[0-8][0-9]|999[0-8])"
_DAY = r"(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
_TIME = r"([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
INSTANT = f"{_YEAR}-{_DAY}T{_TIME}"
INSTANT_SCHEMA = {
    "type": "string",
    "format": "date-time",
    "pattern": f"^{INSTANT}$",
    "description": "An RFC 3339 instant between 0001-01-02 and 9999-12-30 UTC (no offset means UTC).",
}
QUEUE_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_QUEUE_BYTES,
    "pattern": QUEUE_NAME_PATTERN,
    "description": f"A queue name: 1 to {MAX_QUEUE_BYTES} bytes of UTF-8, no whitespace, no control characters.",
}
NAME_SCHEMA = {"type": "string", "pattern": NON_BLANK_PATTERN, "description": "Not blank."}
PUSH_URL_SCHEMA = {
    "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[^\\x00-\\x20/?#@]+([/?][^\\x00-\\x20#]*)?$",
    "description": "An http:// or https:// URL with a host, no credentials and no fragment, whose host"
    " is not, and does not resolve to, a loopback, private, link-local, multicast or metadata address"
    " unless the server's --push-allow-cidrs allows it (docs/push.md); refused with 400 otherwise.",
}


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in word)


PUSH_HEADERS_SCHEMA = {
    "type": "object",
    "maxProperties": MAX_HEADERS,
    "propertyNames": {
        "pattern": f"^(?!(?:{'|'.join(_any_case(h) for h in sorted(RESERVED_HEADERS))})$)"
        "[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
    },
    "additionalProperties": {
        "type": "string",
        "maxLength": MAX_HEADER_VALUE_CHARS,
        "pattern": "^[^\\x00-\\x08\\x0a-\\x1f\\x7f]*$",
    },
    "description": "Static headers sent with every delivery: HTTP field names (each once, in any case),"
    " not one a delivery sets itself; values without line breaks or control characters.",
}
LIMIT_KEY_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_LIMIT_KEY_BYTES,
    "pattern": QUEUE_NAME_PATTERN,
    "description": f"A limit key: 1 to {MAX_LIMIT_KEY_BYTES} bytes of UTF-8, no whitespace, no control characters.",
}

# The shared list parameters, and which listing each filter means something to. A listing ignores
# the filters it does not have (as upstream does), so those stay documented as plain strings where
# the older spec or the 0.5 client names them.
_PAGING: list[tuple[str, dict[str, Any], str]] = [
    ("limit", {"type": "integer", "format": "int64"}, "Page size, clamped to 1..=100 (default 50)."),
    ("offset", {"type": "integer", "format": "int64", "maximum": MAX_OFFSET}, f"Rows to skip, negative clamped to 0 (default 0), at most {MAX_OFFSET}; ignored with a cursor. Page deeper with `cursor`."),
    ("order_by", {"type": "string", "pattern": NO_NUL}, "`created_at ASC`, or anything else for `created_at DESC` (the default)."),
    ("include_total", {"type": "boolean"}, "Add the exact `total` (an extra count)."),
    ("created_after", {"type": "string", "pattern": f"^({INSTANT})?$"}, "Rows created at or after this RFC 3339 instant; empty is no filter."),
    ("created_before", {"type": "string", "pattern": f"^({INSTANT})?$"}, "Rows created strictly before this RFC 3339 instant; empty is no filter."),
]  # fmt: skip
_CURSOR_ID = {
    "uuid": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "bigint": "-?[0-9]{1,18}",
    "text": "[^\\x00]+",
}
_TEXT = {"type": "string", "pattern": NO_NUL}


# W3C Trace Context on the creation of jobs, batches and workflows (docs/tracing.md). Any value is
# taken: a malformed one is ignored (the job starts a trace of its own), never a 400.
_TRACE_HEADERS: list[dict[str, Any]] = [
    {
        "name": "traceparent",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "W3C Trace Context: `00-<trace-id>-<parent-id>-<flags>`. Kept with the job (a"
        " workflow's step jobs inherit the workflow's) and handed to the worker that leases it, in the"
        " lease answer's `traceparent`. A malformed or repeated header is ignored.",
    },
    {
        "name": "tracestate",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "W3C Trace Context vendor entries, kept with a valid `traceparent` (at most 32"
        " entries; past 512 characters the longest entries and then the last are dropped). A"
        " malformed one is ignored.",
    },
]


_SEQ = {"type": "integer", "format": "int64", "minimum": 0}
_CLAMPED = {"type": "integer", "format": "int64"}
# Query parameters of routes that are not listings (visibility's, docs/visibility.md).
_QUERY_PARAMS: dict[str, list[tuple[str, dict[str, Any], str]]] = {
    "getJobLogs": [
        ("after", _SEQ, "Lines after this seq (default 0: from the first)."),
        (
            "limit",
            _CLAMPED,
            f"At most this many lines, clamped to 1..={MAX_LOG_PAGE} (default {DEFAULT_LOG_PAGE}).",
        ),
    ],
    "streamJobEvents": [
        ("log_after", _SEQ, "Send `log` events for the lines after this seq (default 0: every line)."),
    ],
    "getStatsSeries": [
        (
            "metric",
            {"type": "string", "pattern": METRICS_PATTERN},
            "Required: one or more of " + ", ".join(f"`{m}`" for m in Metric) + ", comma-separated (or"
            " the parameter repeated). Counts are jobs per step, backlog the last sample in the step,"
            " percentiles seconds (0 when no job finished in the step).",
        ),
        ("queue", QUEUE_SCHEMA, "Only this queue (default: every queue of the tenant together)."),
        ("window", {"type": "string", "enum": list(WINDOWS)}, "How far back (default `1h`)."),
        (
            "step",
            {"type": "string", "enum": list(STEPS)},
            "One figure per step (default: "
            + ", ".join(f"{w} `{s}`" for w, s in DEFAULT_STEPS.items())
            + "); it must divide the window.",
        ),
    ],
    "getFailingTasks": [
        ("queue", QUEUE_SCHEMA, "Only this queue (default: any)."),
        ("window", {"type": "string", "enum": list(WINDOWS)}, "How far back (default `1h`)."),
    ],
    "listPushDeliveries": [
        ("limit", _CLAMPED, "At most this many deliveries, clamped to 1..=500 (default 50)."),
    ],
}

_REQUIRED_QUERY = {("getStatsSeries", "metric")}


def _status(values: type[JobStatus] | type[WorkflowStatus] | None) -> dict[str, Any]:
    if values is None:
        return _TEXT
    return {"type": "string", "enum": ["", *(str(v) for v in values)]}


# An extension of the job listing (the 0.5 client sends no such parameter).
_ID_CONTAINS = (
    {"type": "string", "pattern": ID_FRAGMENT_PATTERN},
    (
        "Only jobs whose id contains this piece of an id: hex digits, dashes and case ignored; empty"
        " is no filter. A whole id is looked up by its key; a shorter piece is searched for in the"
        " tenant's jobs, newest first, until the page is full (one that matches nothing reads them"
        " all, as `include_total` does)."
    ),
)

# operationId: (status values or None, filters that apply, cursor id kind)
_LISTINGS: dict[str, tuple[Any, dict[str, tuple[dict[str, Any], str]], str]] = {
    "listJobs": (JobStatus, {"queue": (_TEXT, "Only this queue."), "task_name": (_TEXT, "Only this task."), "id_contains": _ID_CONTAINS}, "uuid"),
    "listWorkflows": (WorkflowStatus, {"queue": (_TEXT, "Ignored."), "task_name": (_TEXT, "Ignored.")}, "text"),
    "listCrons": (None, {"queue": (_TEXT, "Ignored."), "task_name": (_TEXT, "Ignored.")}, "text"),
    "listAudit": (
        None,
        {
            "actor": (_TEXT, "Only this actor (`key:<id>`, `jwt:<sub>`, `oidc:<sub>`)."),
            "action": (_TEXT, "Only this action (an operation id, e.g. `cancelJob`)."),
            "target": (_TEXT, "Only entries naming this id among their targets."),
            "since": ({"type": "string", "pattern": f"^({INSTANT})?$"}, "Entries at or after this RFC 3339 instant (as `created_after`)."),
            "until": ({"type": "string", "pattern": f"^({INSTANT})?$"}, "Entries strictly before this RFC 3339 instant (as `created_before`)."),
        },
        "bigint",
    ),
    "listDeadLetters": (
        None,
        {
            "queue": (_TEXT, "Only this queue."),
            "task_name": (_TEXT, "Only this task."),
            "replayed": ({"type": "boolean"}, "false: entries not yet replayed; true: replayed ones."),
        },
        "bigint",
    ),
}  # fmt: skip


def _list_params(operation_id: str) -> list[dict[str, Any]]:
    statuses, filters, id_kind = _LISTINGS[operation_id]
    status_help = "Only this status; empty is no filter." if statuses else "Ignored."
    params = [("status", _status(statuses), status_help)]
    params += [(name, schema, text) for name, (schema, text) in filters.items()]
    params += _PAGING
    params.append(
        (
            "cursor",
            {"type": "string", "pattern": f"^(-?[0-9]{{1,16}}:{_CURSOR_ID[id_kind]})?$"},
            "Opaque keyset cursor from a previous page's `next_cursor`; empty is none.",
        )
    )
    return [
        {"name": n, "in": "query", "required": False, "schema": s, "description": d} for n, s, d in params
    ]


def _path_param(path: str, route_tag: str, name: str) -> dict[str, Any]:
    if route_tag == "dlq" and name == "id":
        schema: dict[str, Any] = {"type": "integer", "format": "int64"}
    elif name == "queue":
        schema = dict(QUEUE_SCHEMA)
    elif name == "key":
        schema = {
            **LIMIT_KEY_SCHEMA,
            "description": "A limit key; a trailing `*` names a wildcard policy (for every key with that prefix).",
            "not": {"const": "*"},
        }
    else:
        schema = {"type": "string", "minLength": 1, "pattern": NO_NUL}
    siblings = fixed_siblings(path, name)
    if siblings and schema["type"] == "string":
        schema["not"] = {"enum": siblings}  # those name other routes
    return {"name": name, "in": "path", "required": True, "schema": schema}


# Free-form JSON as the server accepts it: anything but a NUL character in a string or a key.
JSON_SCHEMAS = {
    "JsonValue": {
        "description": "Any JSON value without a NUL character (nested at most 100 deep).",
        "anyOf": [
            {"type": ["null", "boolean", "number"]},
            {"type": "string", "pattern": NO_NUL},
            {"type": "array", "items": {"$ref": REF.format(name="JsonValue")}},
            {"$ref": REF.format(name="JsonObject")},
        ],
    },
    "JsonObject": {
        "description": "A JSON object without a NUL character in any key or string (nested at most 100 deep).",
        "type": "object",
        "propertyNames": {"pattern": NO_NUL},
        "additionalProperties": {"$ref": REF.format(name="JsonValue")},
    },
}


def _nul_free(schema: Any) -> Any:
    """Every string of a request without its own pattern, enum or format gets NO_NUL; free-form
    objects and values become JsonObject and JsonValue."""
    if isinstance(schema, list):
        return [_nul_free(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if schema == {}:
        return {"$ref": REF.format(name="JsonValue")}
    if schema.get("type") == "object" and "properties" not in schema:
        return {"$ref": REF.format(name="JsonObject")}
    out = {k: (v if k in ("enum", "default", "required") else _nul_free(v)) for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {name: _nul_free(p) for name, p in schema["properties"].items()}
    if out.get("type") == "string" and not {"pattern", "enum", "format"} & set(out):
        out["pattern"] = NO_NUL
    return out


def _replace(prop: dict[str, Any], schema: dict[str, Any]) -> None:
    """Put `schema` in place of a property's non-null branch."""
    branches: list[dict[str, Any]] | None = prop.get("anyOf")
    if branches is None:
        prop.clear()
        prop.update(copy.deepcopy(schema))
        return
    for index, branch in enumerate(branches):
        if branch.get("type") != "null":
            branches[index] = copy.deepcopy(schema)


def _narrow(prop: dict[str, Any], extra: dict[str, Any]) -> None:
    """Add `extra` to a property's non-null branch (msgspec writes an optional one as anyOf)."""
    for branch in prop.get("anyOf", [prop]):
        if branch.get("type") != "null":
            branch.update(copy.deepcopy(extra))


def _condition_schema() -> dict[str, Any]:
    """StepCondition: a leaf (`path`, with `op` and `value`), or exactly one of `all`, `any`, `not`
    (shared/domain/workflows.py `_validate_condition`)."""
    ref = {"$ref": REF.format(name="StepCondition")}
    none: dict[str, Any] = {"type": "null"}
    value = {"$ref": REF.format(name="JsonValue")}
    compare = ["eq", "ne", "gt", "gte", "lt", "lte", "contains"]

    def leaf(op: dict[str, Any], required: list[str], value_schema: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "path": NAME_SCHEMA,
                "op": op,
                "value": value_schema,
                "all": none,
                "any": none,
                "not": none,
            },
            "required": ["path", *required],
            "additionalProperties": False,
        }

    def combination(key: str, schema: dict[str, Any]) -> dict[str, Any]:
        props = {"op": none, "path": none, "all": none, "any": none, "not": none, key: schema}
        return {"type": "object", "properties": props, "required": [key], "additionalProperties": False}

    return {
        "title": "StepCondition",
        "description": (
            "A leaf compares the context value at `path` with `value` by `op` (`eq` when a value is"
            " given, else `exists`; `in` takes a list); a combination holds `all`, `any` or `not`."
        ),
        "oneOf": [
            leaf({"anyOf": [{"const": "exists"}, none]}, [], value),
            leaf({"enum": compare}, ["op", "value"], value),
            leaf({"const": "in"}, ["op", "value"], {"type": "array", "items": value}),
            combination("all", {"type": "array", "items": ref}),
            combination("any", {"type": "array", "items": ref}),
            combination("not", ref),
        ],
    }


def _step_variants(step: dict[str, Any]) -> None:
    """A step runs a task (a non-blank `task_name`, optionally a `fan_out`), a sub-workflow
    (`workflow`), a sleep (`sleep_secs` or `sleep_until`) or a wait for an event
    (`wait_for_event`, optionally `timeout_secs`): exactly one of them."""
    blank = {"anyOf": [{"type": "null"}, {"type": "string", "pattern": f"^[{SPACE_CHARS}]*$"}]}
    null = {"type": "null"}
    kinds = ("task_name", "workflow", "sleep_secs", "sleep_until", "wait_for_event")

    def variant(kind: str, schema: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
        props: dict[str, Any] = {k: (blank if k == "task_name" else null) for k in kinds if k != kind}
        props[kind] = schema
        if kind != "task_name":
            props["fan_out"] = null
        if kind != "wait_for_event":
            props["timeout_secs"] = null
        for name in extra:
            props.pop(name, None)
        return {"required": [kind], "properties": props}

    step["oneOf"] = [
        variant("task_name", NAME_SCHEMA),
        variant("workflow", {"$ref": REF.format(name="WorkflowDefinition")}),
        variant("sleep_secs", {"type": "integer"}),
        variant("sleep_until", {"type": "string"}),
        variant("wait_for_event", {"$ref": REF.format(name="WaitForEvent")}),
    ]
    step["description"] = (
        "One step: a task (`task_name`), a sub-workflow (`workflow`), a sleep (`sleep_secs` or"
        " `sleep_until`) or a wait for an event (`wait_for_event`, optionally `timeout_secs`), exactly"
        " one of them. Step names are unique within their workflow; `depends_on` names steps of the"
        " same workflow, without cycles; sub-workflows nest at most 8 deep."
    )


def _cron_variants(cron: dict[str, Any]) -> None:
    """A schedule of a task or of a workflow (which carries its own payload, queue and config)."""
    null = {"type": "null"}
    cron["oneOf"] = [
        {"required": ["task_name"], "properties": {"task_name": NAME_SCHEMA, "workflow": null}},
        {
            "required": ["workflow"],
            "properties": {
                "workflow": {"$ref": REF.format(name="WorkflowDefinition")},
                "task_name": null,
                "payload": null,
                "queue": null,
                "config": null,
            },
        },
    ]


def _refine(schemas: dict[str, Any], request_names: set[str], caps: _Caps) -> None:
    max_batch = caps.max_batch
    for name in request_names:
        schemas[name] = _nul_free(schemas[name])
    props = {name: schemas[name]["properties"] for name in request_names if "properties" in schemas[name]}
    for owner in ("CreateJobRequest", "CreateCronRequest"):
        _narrow(props[owner]["task_name"], NAME_SCHEMA)
    for owner in ("JobConfigRequest", "CreateCronRequest", "WorkflowStep"):
        _narrow(props[owner]["queue"], QUEUE_SCHEMA)
    for owner in ("CreateWorkflowRequest", "WorkflowDefinition", "WorkflowStep"):
        _narrow(props[owner]["name"], NAME_SCHEMA)
    for owner in ("CreateWorkflowRequest", "WorkflowDefinition"):
        _narrow(props[owner]["steps"], {"minItems": 1, "maxItems": MAX_WORKFLOW_STEPS})
    for owner in ("CancelJobsRequest", "RetryJobsRequest", "ReplayDeadLettersRequest"):
        _narrow(props[owner]["limit"], {"maximum": max_batch})
        for field in ("created_after", "created_before"):
            _narrow(props[owner][field], INSTANT_SCHEMA)
    _narrow(props["CreateJobRequest"]["run_at"], INSTANT_SCHEMA)
    _narrow(props["LogLineRequest"]["ts"], INSTANT_SCHEMA)
    _narrow(
        props["PostJobLogsRequest"]["lines"],
        {
            "description": "At most 100 lines, whose messages take at most 64 KiB (65,536 bytes of UTF-8) in all."
        },
    )
    _narrow(props["WorkflowStep"]["sleep_until"], INSTANT_SCHEMA)
    _narrow(
        props["WaitForEvent"]["key"],
        {
            "maxLength": MAX_EVENT_KEY_BYTES,
            # Braces only in well-formed placeholders (the server takes single braces too).
            "pattern": "^([^{}\\x00]|\\{\\{ ?context\\.[A-Za-z0-9_.]+ ?\\}\\})*$",
            "description": "1 to 256 bytes; `{{context.path}}` placeholders are resolved from the workflow context"
            " when the step starts.",
        },
    )
    _narrow(props["PostEventRequest"]["key"], {"pattern": NO_NUL})
    for owner in ("JobConfigRequest", "PartialJobConfig"):
        _narrow(
            props[owner]["limits"],
            {
                "uniqueItems": True,
                "items": LIMIT_KEY_SCHEMA,
                "description": "Flow-control keys (docs/limits.md): the job starts only when every key's"
                " policy has room. Left out of responses when the job has none.",
            },
        )
    _narrow(
        props["UniquePolicy"]["key"],
        {
            "pattern": f"^[^{CONTROL_CHARS}]+$",
            "description": f"1 to {MAX_UNIQUE_KEY_BYTES} bytes of UTF-8, no control characters; per tenant.",
        },
    )
    _narrow(
        props["JobConfigRequest"]["unique"],
        {
            "description": "Unique jobs over a window (docs/unique-jobs.md): within `window_secs` of the job"
            " holding `key`, `skip` answers that job and `replace` updates it if it has not started."
            " Left out of responses when the job has none."
        },
    )
    # At least one of the two, and not null (`{"concurrency": null, "rate": null}` limits nothing).
    schemas["PutLimitRequest"]["anyOf"] = [
        {"required": ["concurrency"], "properties": {"concurrency": {"type": "integer"}}},
        {"required": ["rate"], "properties": {"rate": {"type": "object"}}},
    ]
    _narrow(props["CreateWorkerKeyRequest"]["name"], NAME_SCHEMA)
    _narrow(props["CreateWorkerKeyRequest"]["queues"], {"items": QUEUE_SCHEMA})
    _narrow(
        props["CreateWorkerKeyRequest"]["expires_at"],
        {**INSTANT_SCHEMA, "description": "An RFC 3339 instant in the future (no offset means UTC)."},
    )
    _narrow(props["CreateBatchJobsRequest"]["jobs"], {"minItems": 1, "maxItems": max_batch})
    _narrow(
        props["CreateCronRequest"]["cron_expr"],
        {
            "pattern": CRON_PATTERN,
            "description": "5 fields (minute hour day-of-month month day-of-week), or 6 with a leading"
            " seconds field, evaluated in UTC. The pattern covers the usual forms; the server also"
            " takes whatever else croniter parses (a trailing year, `L`, `#`, days 29-31), provided"
            f" the schedule fires again. At most {MAX_CRON_EXPR} characters.",
        },
    )
    for owner in ("CreatePushEndpointRequest", "UpdatePushEndpointRequest"):
        _narrow(props[owner]["name"], NAME_SCHEMA)
        _narrow(props[owner]["queues"], {"items": QUEUE_SCHEMA, "uniqueItems": False})
        _narrow(props[owner]["url"], PUSH_URL_SCHEMA)
        _replace(props[owner]["headers"], PUSH_HEADERS_SCHEMA)
    _step_variants(schemas["WorkflowStep"])
    _cron_variants(schemas["CreateCronRequest"])
    _narrow(
        props["CreateCronRequest"]["timezone"],
        {"enum": sorted(available_timezones()), "description": "An IANA time zone (default UTC)."},
    )
    schemas["StepCondition"] = _condition_schema()
    _document_sizes(props, caps)


def _document_sizes(props: dict[str, Any], caps: _Caps) -> None:
    """The size caps, which JSON Schema cannot say of an object: in the descriptions."""
    payload = (
        f"At most {caps.max_payload_bytes} bytes as JSON (this server's --max-payload-bytes); larger is a 413."
        if caps.max_payload_bytes
        else ""
    )
    result = (
        f"At most {caps.max_result_bytes} bytes as JSON (this server's --max-result-bytes); larger is a 413."
        if caps.max_result_bytes
        else ""
    )
    parts = [
        ("CreateJobRequest", "payload", payload),
        ("CreateJobRequest", "metadata", payload),
        ("CreateCronRequest", "payload", payload),
        ("CreateWorkflowRequest", "context", payload),
        ("CreateWorkflowRequest", "metadata", payload),
        ("WorkflowDefinition", "context", payload),
        ("WorkflowDefinition", "metadata", payload),
        ("WorkflowStep", "payload", payload),
        ("WorkflowStep", "metadata", payload),
        ("CompleteJobRequest", "result", result),
        ("CompletionItem", "result", result),
    ]
    for owner, field, text in parts:
        if text:
            props[owner][field]["description"] = text
    props["FailJobRequest"]["error"]["description"] = (
        f"Any length is taken: past {MAX_ERROR_BYTES} bytes of UTF-8 the server keeps the first"
        " part and a marker saying how much was left out, that many bytes in all."
    )


# Events a stream sends beside `status`, by operation: (event, its data's schema, what it says).
_EXTRA_EVENTS: dict[str, list[tuple[str, str, str]]] = {
    "streamJobEvents": [
        ("progress", "Progress", "the job's progress, whenever its worker reports one"),
        ("log", "LogLine", "one log line, for every line after `?log_after=`"),
    ],
}


def _event_stream(event_type: Any, operation_id: str) -> dict[str, Any]:
    """A text/event-stream answer: the schema describes one event (OpenAPI 3.1 has no itemSchema).
    Each `status` event's data is the JSON of `event_type`; `: keep-alive` comments come between."""

    def event(name: str, schema: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "event": {"const": name},
                "data": {
                    "type": "string",
                    "contentMediaType": "application/json",
                    "contentSchema": {"$ref": REF.format(name=schema)},
                },
            },
            "required": ["event", "data"],
        }

    extra = _EXTRA_EVENTS.get(operation_id, [])
    text = (
        f"One server-sent event: `event: status`, `data:` the {event_type.__name__} as JSON,"
        " one per change until it is terminal."
    )
    if not extra:
        return {"schema": {**event("status", event_type.__name__), "description": text}}
    text += " Between them: " + "; ".join(f"`event: {name}`, {what}" for name, _, what in extra) + "."
    if operation_id == "streamJobEvents":
        text += " The `status` event's job leaves `progress` out (the `progress` event carries it)."
    variants = [event("status", event_type.__name__), *(event(name, schema) for name, schema, _ in extra)]
    return {"schema": {"description": text, "oneOf": variants}}


def _reachable(schemas: dict[str, Any], roots: list[str]) -> set[str]:
    found: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        todo += re.findall(r"#/components/schemas/(\w+)", msgspec.json.encode(schemas[name]).decode())
    return found


@dataclasses.dataclass(frozen=True)
class _Caps:
    """The settings the document states: the batch limits and the size caps."""

    max_batch: int
    max_payload_bytes: int
    max_result_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> _Caps:
        return cls(**{f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)})


# Their defaults, for `queueflow spec` (a server passes its own settings).
DEFAULT_CAPS = _Caps.of(Settings(database_url="postgresql://unused/none"))
# The routes that start a workflow, and so may answer 429 for the running-workflows quota too.
_QUOTA_ROUTES = ("createWorkflow", "retryWorkflow")


@cache
def build_spec(caps: _Caps = DEFAULT_CAPS) -> dict[str, Any]:
    types: list[Any] = [wire.ErrorBody]
    types.extend(
        t for route in ROUTES for t in (route.request, route.response, route.events) if isinstance(t, type)
    )
    types.extend(t for *_, t in PUBLIC_DOCS)
    schemas, components = msgspec.json.schema_components(types, ref_template=REF)
    by_type = dict(zip(types, schemas, strict=True))
    requests = [route.request.__name__ for route in ROUTES if route.request is not None]
    components.update(copy.deepcopy(JSON_SCHEMAS))
    _refine(components, _reachable(components, requests), caps)
    error = {"description": "Error", "content": {"application/json": {"schema": by_type[wire.ErrorBody]}}}
    unavailable = {
        **error,
        "description": 'The database cannot be reached right now (docs/operations.md, "Database outages"): '
        "retry after `Retry-After` seconds",
        "headers": {"Retry-After": {"schema": {"type": "integer", "minimum": 0}}},
    }
    # The caps of docs/operations.md, "Request caps".
    too_large = {
        **error,
        "description": "The body is over --max-body-bytes, or a payload, metadata or result in it over"
        " this server's cap (the error names it)",
    }
    too_many = {
        **unavailable,
        "description": "Too many at once: the caller's tenant holds its share of open streams or parked"
        " long-polls, or its address presented unknown worker keys too fast; retry after"
        " `Retry-After` seconds",
    }
    full = {
        **unavailable,
        "description": "The database cannot be reached right now, or this process holds as many open"
        " streams or parked long-polls as it takes from all callers: retry after `Retry-After` seconds",
    }

    quota = {
        **too_many,
        "description": "The tenant is at its running-workflows quota (--tenant-max-running-workflows),"
        " or its address presented unknown worker keys too fast: retry after `Retry-After` seconds",
    }

    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary,
            "tags": [route.tag],
            "security": [{"bearerAuth": []}],
            "parameters": [
                _path_param(route.path, route.tag, name) for name in re.findall(r"{(\w+)}", route.path)
            ],
            "responses": {},
        }
        if route.role is not None:
            op["x-required-role"] = route.role.value
            op["description"] = (
                f"Needs the `{route.role}` role or above (docs/access.md); a lower one is 403."
            )
        if route.operation_id in _LISTINGS:
            op["parameters"] += _list_params(route.operation_id)
        if route.operation_id == "listEvents":
            op["parameters"] += [
                {
                    "name": "key",
                    "in": "query",
                    "required": False,
                    "schema": _TEXT,
                    "description": "Only this key.",
                },
                {
                    "name": "limit",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "format": "int64"},
                    "description": "At most this many, clamped to 1..=100 (default 50).",
                },
            ]
        if route.operation_id in _QUERY_PARAMS:
            op["parameters"] += [
                {
                    "name": n,
                    "in": "query",
                    "required": (route.operation_id, n) in _REQUIRED_QUERY,
                    "schema": s,
                    "description": d,
                }
                for n, s, d in _QUERY_PARAMS[route.operation_id]
            ]
        if route.operation_id == "createJob":
            op["parameters"].append(
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": False,
                    "schema": {"type": "string", "maxLength": 255, "pattern": "^[ -~]*$"},
                    "description": "Printable ASCII, at most 255 characters once trimmed; wins over the body's.",
                }
            )
        if route.operation_id in ("createJob", "createBatchJobs", "createWorkflow"):
            op["parameters"] += _TRACE_HEADERS
        if route.request is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": by_type[route.request]}},
            }
        ok: dict[str, Any] = {"description": "OK"}
        if route.events is not None:
            ok["content"] = {"text/event-stream": _event_stream(route.events, route.operation_id)}
        elif route.response is not None:
            ok["content"] = {"application/json": {"schema": by_type[route.response]}}
        op["responses"][str(route.status)] = ok
        codes = ["400", "401", "403", "404", "409"] if route.auth != "public" else ["400"]
        for code in codes:
            op["responses"][code] = error
        if route.request is not None:
            op["responses"]["413"] = too_large
        if route.auth != "public":
            op["responses"]["429"] = too_many  # (a worker key's lookup is rate-limited on every route)
            capped = route.events is not None or route.operation_id == "leaseJobs"
            op["responses"]["503"] = full if capped else unavailable
        if route.operation_id in _QUOTA_ROUTES:
            op["responses"]["429"] = quota
        if any(fixed_siblings(route.path, name) for name in re.findall(r"{(\w+)}", route.path)):
            # e.g. GET /api/v1/jobs/batch: that names the batch route, which takes POST only.
            op["responses"]["405"] = {**error, "description": "The path names another route (see `Allow`)"}
        paths.setdefault(route.path, {})[route.method.lower()] = op
    for method, path, tag, op_id, summary, typ in PUBLIC_DOCS:
        paths.setdefault(path, {})[method.lower()] = {
            "operationId": op_id,
            "summary": summary,
            "tags": [tag],
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": by_type[typ]}}},
                "503": error,
            },
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "QueueFlow",
            "version": shared.__version__,
            "description": "PostgreSQL-native job queue and workflow engine (Python server).",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "API Key"}
            },
        },
    }


@cache
def spec_yaml(caps: _Caps = DEFAULT_CAPS) -> bytes:
    """The same document as YAML (msgspec's encoder, on PyYAML)."""
    return msgspec.yaml.encode(build_spec(caps))


async def openapi_handler(request: web.Request) -> web.Response:
    return web.json_response(build_spec(_Caps.of(request.app[SETTINGS])))


async def openapi_yaml_handler(request: web.Request) -> web.Response:
    body = spec_yaml(_Caps.of(request.app[SETTINGS]))
    return web.Response(body=body, content_type="application/yaml", charset="utf-8")
