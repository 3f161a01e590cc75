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

from unofficial_queueflow_client import Backoff, Worker  # noqa: E402  (importable once src is on the path)

FAST = Backoff(initial=0.01, maximum=0.05)


async def until(condition: Callable[[], Any], timeout: float = 5.0) -> None:
    """Wait until `condition()` holds, polling (the stub's request log has no events to wait on)."""
    async with asyncio.timeout(timeout):
        while True:
            if condition():
                return
            await asyncio.sleep(0.005)


async def run_until(worker: Worker, done: Callable[[], bool], timeout: float = 10.0) -> None:
    """Run the worker; stop it once `done()` holds."""
    runner = asyncio.create_task(worker.run())

    async def watch() -> None:
        while True:
            if done():
                break
            await asyncio.sleep(0.01)  # polling the stub's request log
        worker.stop()

    watcher = asyncio.create_task(watch())
    try:
        async with asyncio.timeout(timeout):
            await runner
    finally:
        watcher.cancel()


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


BATCH_ROUTE = "/api/v1/jobs/complete"


class Stub:
    """A fake QueueFlow server: records every request; `lease_answers` and the `on_*` hooks decide
    the answers. By default jobs in `queue` are leased, heartbeats answer running, reports 204.

    The batch acknowledgement (`POST /api/v1/jobs/complete`) is there when `offer_batch` is set
    (`/openapi.json` lists it then; otherwise that answers 404, as the route does): `openapi_answers`
    and `batch_answers` come first (one whole answer per call, in order), then `item_status` answers
    each item (default 204); `batch_delay` holds each call that long, and `max_batches_in_flight`
    records how many were ever answered at once.

    Job logs (`POST /api/v1/jobs/{id}/logs`) are stored in `logs` (job id -> lines) and answered
    `{stored, dropped: 0, last_seq}` unless `logs_answer` answers for them. A job's `traces` entry
    (`{"traceparent": ..., "tracestate": ...}`) goes on its lease item."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.queue: list[dict[str, Any]] = []
        self.lease_answers: list[Callable[[], web.Response]] = []
        self.heartbeat_status: dict[str, str] = {}
        self.heartbeat_answer: Callable[[str], web.Response | None] = lambda job_id: None
        self.report_answer: Callable[[str, str], web.Response | None] = lambda kind, job_id: None
        self.routes: dict[tuple[str, str], Callable[[web.Request], Any]] = {}
        self.offer_batch = False
        self.openapi_answers: list[Callable[[], web.Response]] = []
        self.batch_answers: list[Callable[[], web.Response]] = []
        self.item_status: Callable[[str], int] = lambda job_id: 204
        self.batch_delay = 0.0
        self.batches_in_flight = 0
        self.max_batches_in_flight = 0
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self.logs_answer: Callable[[str], web.Response | None] = lambda job_id: None
        self.traces: dict[str, dict[str, str]] = {}
        self.server: TestServer | None = None

    def add_jobs(self, *jobs: dict[str, Any]) -> list[str]:
        self.queue.extend(jobs)
        return [j["id"] for j in jobs]

    def calls(self, kind: str, job_id: str | None = None) -> list[Any]:
        """Bodies of the per-job calls `kind` (lease, heartbeat, complete, fail), optionally of one job."""
        return [
            body
            for method, path, _, body in self.requests
            if path.endswith(f"/{kind}") and path != BATCH_ROUTE and (job_id is None or f"/{job_id}/" in path)
        ]

    def log_calls(self, job_id: str | None = None) -> list[list[dict[str, Any]]]:
        """The lines of every logs call (of one job), in order."""
        return [body["lines"] for body in self.calls("logs", job_id)]

    def order(self, job_id: str) -> list[str]:
        """The kinds of the job's per-job calls in the order they came (``logs``, ``heartbeat``, ...)."""
        return [path.rsplit("/", 1)[-1] for _, path, _, _ in self.requests if f"/{job_id}/" in path]

    def batches(self) -> list[list[dict[str, Any]]]:
        """The items of every batch acknowledgement call, in order."""
        return [body["jobs"] for method, path, _, body in self.requests if method == "POST" and path == BATCH_ROUTE]

    def batch_acked(self) -> list[str]:
        """Job ids sent through the batch route, every call and every item."""
        return [item["id"] for batch in self.batches() for item in batch]

    def probes(self) -> int:
        return sum(1 for method, path, _, _ in self.requests if path == "/openapi.json")

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
        if request.path == "/openapi.json":
            if self.openapi_answers:
                return self.openapi_answers.pop(0)()
            paths: dict[str, Any] = {"/api/v1/jobs/{id}/complete": {"post": {}}}
            if self.offer_batch:
                paths[BATCH_ROUTE] = {"post": {"operationId": "completeJobs"}}
            return web.json_response({"openapi": "3.1.0", "info": {"title": "stub"}, "paths": paths})
        if request.path == BATCH_ROUTE:
            return await self.batch(request.method, body)
        parts = request.path.strip("/").split("/")
        if request.method == "POST" and parts[-1] == "lease":
            if self.lease_answers:
                return self.lease_answers.pop(0)()
            take = self.queue[: body.get("max_jobs", 1)]
            del self.queue[: len(take)]
            if not take:
                await asyncio.sleep(0.02)
            items = [{"job": j, "lease_token": str(uuid.uuid4()), **self.traces.get(j["id"], {})} for j in take]
            return web.json_response({"jobs": items})
        if request.method == "POST" and parts[-1] == "heartbeat":
            job_id = parts[-2]
            answer = self.heartbeat_answer(job_id)
            if answer is not None:
                return answer
            return web.json_response({"status": self.heartbeat_status.get(job_id, "running")})
        if request.method == "POST" and parts[-1] == "logs":
            answer = self.logs_answer(parts[-2])
            if answer is not None:
                return answer
            stored = self.logs.setdefault(parts[-2], [])
            stored.extend(body["lines"])
            return web.json_response({"stored": len(body["lines"]), "dropped": 0, "last_seq": len(stored)})
        if request.method == "POST" and parts[-1] in ("complete", "fail"):
            answer = self.report_answer(parts[-1], parts[-2])
            return answer if answer is not None else web.Response(status=204)
        return error(404, "not found")

    async def batch(self, method: str, body: Any) -> web.Response:
        if not self.offer_batch:
            return error(404, "not found")
        if method != "POST":
            return error(405, "method not allowed")
        self.batches_in_flight += 1
        self.max_batches_in_flight = max(self.max_batches_in_flight, self.batches_in_flight)
        try:
            if self.batch_delay:
                await asyncio.sleep(self.batch_delay)
            if self.batch_answers:
                return self.batch_answers.pop(0)()
            assert 1 <= len(body["jobs"]) <= 100, len(body["jobs"])
            results = []
            for item in body["jobs"]:
                status = self.item_status(item["id"])
                outcome = {204: "completed", 409: "conflict", 404: "not_found"}.get(status, "conflict")
                result = {"id": item["id"], "outcome": outcome, "status": status}
                if status != 204:
                    result["error"] = f"item answered {status}"
                results.append(result)
            return web.json_response({"results": results})
        finally:
            self.batches_in_flight -= 1


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
