"""/openapi.json and /openapi.yaml: one document, generated from the route table and the msgspec
wire types, built once per process. Its `servers` entry is relative ("/"), so a client or Swagger UI
calls the host it loaded the document from."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import msgspec
from aiohttp import web

import shared
from services.api.routes import PUBLIC_DOCS, ROUTES
from shared import wire

_LIST_PARAMS = [
    ("status", "string", "Filter by status (jobs)."),
    ("queue", "string", "Filter by queue name (jobs and dead letters)."),
    ("task_name", "string", "Filter by task name (jobs and dead letters)."),
    ("replayed", "boolean", "Dead letters only: false for entries not yet replayed, true for replayed ones."),
    ("limit", "integer", "Page size, clamped to 1..=100 (default 50)."),
    ("offset", "integer", "Rows to skip (default 0); ignored with a cursor."),
    ("order_by", "string", "`created_at ASC` or `created_at DESC` (default)."),
    ("include_total", "boolean", "Add the exact `total` (an extra count)."),
    ("cursor", "string", "Opaque keyset cursor from a previous page's `next_cursor`."),
    ("created_after", "string", "Rows created at or after this RFC 3339 instant."),
    ("created_before", "string", "Rows created strictly before this RFC 3339 instant."),
]


@cache
def build_spec() -> dict[str, Any]:
    types: list[Any] = [wire.ErrorBody]
    types.extend(t for route in ROUTES for t in (route.request, route.response) if isinstance(t, type))
    types.extend(t for *_, t in PUBLIC_DOCS)
    schemas, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    by_type = dict(zip(types, schemas, strict=True))
    error = {"description": "Error", "content": {"application/json": {"schema": by_type[wire.ErrorBody]}}}

    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary,
            "tags": [route.tag],
            "security": [{"bearerAuth": []}],
            "parameters": [
                {
                    "name": name,
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer", "format": "int64"}
                    if route.tag == "dlq" and name == "id"
                    else {"type": "string"},
                }
                for name in re.findall(r"{(\w+)}", route.path)
            ],
            "responses": {},
        }
        if route.operation_id.startswith("list"):
            op["parameters"] += [
                {"name": n, "in": "query", "required": False, "schema": {"type": t}, "description": d}
                for n, t, d in _LIST_PARAMS
            ]
        if route.operation_id == "createJob":
            op["parameters"].append(
                {"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"}}
            )
        if route.request is not None:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": by_type[route.request]}},
            }
        ok: dict[str, Any] = {"description": "OK"}
        if route.response == "sse":
            ok["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
        elif route.response is not None:
            ok["content"] = {"application/json": {"schema": by_type[route.response]}}
        op["responses"][str(route.status)] = ok
        codes = ["400", "401", "403", "404", "409"] if route.auth != "public" else ["400"]
        for code in codes:
            op["responses"][code] = error
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
def spec_yaml() -> bytes:
    """The same document as YAML (msgspec's encoder, on PyYAML)."""
    return msgspec.yaml.encode(build_spec())


async def openapi_handler(request: web.Request) -> web.Response:
    return web.json_response(build_spec())


async def openapi_yaml_handler(request: web.Request) -> web.Response:
    return web.Response(body=spec_yaml(), content_type="application/yaml", charset="utf-8")
