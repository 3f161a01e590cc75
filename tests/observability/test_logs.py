"""Logs: JSON lines whose context comes from contextvars. A request's lines carry its request id,
route, method and tenant; an in-process job's lines carry its id, task and queue; the standard
library's loggers render through the same JSON chain (docs/operations.md, Logs)."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest
import structlog

from shared.logs import configure
from tests.support.waiting import eventually


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def test_request_and_job_lines_carry_their_context(database_url, service):
    proc = await service(database_url, mode="all", extra_args=["--log-level", "debug"])
    headers = {"Authorization": "Bearer dev", "X-Request-ID": "req-logs-1"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{proc.base_url}/api/v1/jobs",
            json={"task_name": "log", "payload": {"message": "hi"}},
            headers=headers,
        ) as resp,
    ):
        assert resp.status == 201
        assert resp.headers["X-Request-ID"] == "req-logs-1"
        job_id = (await resp.json())["job_id"]

    def served() -> dict:
        found = [x for x in _lines(proc.log_text()) if x.get("request_id") == "req-logs-1"]
        assert len(found) == 1
        return found[0]

    line = await eventually(served)
    assert line["event"] == "request_served"
    assert (line["route"], line["method"], line["tenant"], line["status"]) == (
        "/api/v1/jobs",
        "POST",
        "tenant1",
        201,
    )

    def logged() -> dict:
        found = [x for x in _lines(proc.log_text()) if x["event"] == "task_logged"]
        assert len(found) == 1
        return found[0]

    line = await eventually(logged)
    assert (line["job_id"], line["task"], line["queue"], line["message"]) == (job_id, "log", "default", "hi")
    assert "request_id" not in line  # the job's context, not the enqueuing request's


@pytest.fixture
def restored_logging():
    """structlog and the root logger as they were, put back after a test that configures them
    (their streams would be its captured stdout, closed when it ends)."""
    root = logging.getLogger()
    saved = (structlog.get_config(), list(root.handlers), root.level)
    yield
    structlog.configure(**saved[0])
    root.handlers, root.level = saved[1], saved[2]


def test_standard_library_loggers_render_as_json(restored_logging, capsys):
    configure("info")
    logging.getLogger("asyncpg").warning("pool %s closed", "p1")
    [line] = _lines(capsys.readouterr().out)
    assert (line["event"], line["level"], line["logger"]) == ("pool p1 closed", "warning", "asyncpg")
    assert line["timestamp"].endswith("Z")
