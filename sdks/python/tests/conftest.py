"""Fixtures for the SDK's unit tests: the package on sys.path, and a programmable stub server for
client-side behaviours a real server does not produce on demand (errors, outages, timing)."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "timestamp": datetime.now(UTC).isoformat()}, status=status)


def job_json(task_name: str = "t", payload: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "id": str(uuid.uuid4()),
        "queue_name": "q",
        "task_name": task_name,
        "payload": payload or {},
        "config": {"priority": 0},
        "status": "running",
        "retry_count": 0,
        "delivery_count": 1,
        "created_at": now,
        "scheduled_at": now,
        "metadata": {},
        **extra,
    }


class Stub:
    """A fake QueueFlow server: records every request; `lease_answers` and the `on_*` hooks decide
    the answers. By default jobs in `queue` are leased, heartbeats answer running, reports 204."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.queue: list[dict[str, Any]] = []
        self.lease_answers: list[Callable[[], web.Response]] = []
        self.heartbeat_status: dict[str, str] = {}
        self.heartbeat_answer: Callable[[str], web.Response | None] = lambda job_id: None
        self.report_answer: Callable[[str, str], web.Response | None] = lambda kind, job_id: None
        self.routes: dict[tuple[str, str], Callable[[web.Request], Any]] = {}
        self.server: TestServer | None = None

    def add_jobs(self, *jobs: dict[str, Any]) -> list[str]:
        self.queue.extend(jobs)
        return [j["id"] for j in jobs]

    def calls(self, kind: str, job_id: str | None = None) -> list[Any]:
        return [
            body
            for method, path, _, body in self.requests
            if path.endswith(f"/{kind}") and (job_id is None or f"/{job_id}/" in path)
        ]

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        self.requests.append((request.method, request.path_qs, dict(request.headers), body))
        custom = self.routes.get((request.method, request.path))
        if custom is not None:
            result = custom(request)
            return await result if asyncio.iscoroutine(result) else result
        parts = request.path.strip("/").split("/")
        if request.method == "POST" and parts[-1] == "lease":
            if self.lease_answers:
                return self.lease_answers.pop(0)()
            take = self.queue[: body.get("max_jobs", 1)]
            del self.queue[: len(take)]
            if not take:
                await asyncio.sleep(0.02)
            return web.json_response({"jobs": [{"job": j, "lease_token": str(uuid.uuid4())} for j in take]})
        if request.method == "POST" and parts[-1] == "heartbeat":
            job_id = parts[-2]
            answer = self.heartbeat_answer(job_id)
            if answer is not None:
                return answer
            return web.json_response({"status": self.heartbeat_status.get(job_id, "running")})
        if request.method == "POST" and parts[-1] in ("complete", "fail"):
            answer = self.report_answer(parts[-1], parts[-2])
            return answer if answer is not None else web.Response(status=204)
        return error(404, "not found")


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    s = Stub()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", s.handle)
    s.server = TestServer(app)
    await s.server.start_server()
    try:
        yield s
    finally:
        await s.server.close()
