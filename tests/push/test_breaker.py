"""An endpoint's circuit breaker through its whole cycle, on real `queueflow serve` processes (an api
and a pusher) and a loopback receiver that holds every delivery until the test answers it:
failures in a row open it, its jobs wait while it is open (no delivery, no retry spent), then one
trial delivery goes at a time (half-open); a failed trial opens it again for longer, and a trial
that succeeds closes it and lets the waiting jobs drain. The state is checked in the endpoint's GET
and in the pusher's queueflow_push_breaker_open."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from tests.push.receiver import Received
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

AUTH = {"Authorization": "Bearer dev"}
QUICK = ["--push-allow-cidrs", "127.0.0.0/8", "--worker-poll-secs", "1", "--shutdown-grace-secs", "2"]
# Two retryable failures in a row open the breaker for 1 s, then 2 s after the third, and so on.
BREAKER = ["--push-breaker-failures", "2", "--push-breaker-secs", "1"]
CONCURRENCY = 2  # above one: a half-open endpoint that let its waiting jobs through would show it
RETRY = {"retry_delay_secs": 0, "retry_backoff": "fixed", "jitter_factor": 0, "max_retries": 10}


@dataclass
class Held:
    got: Received
    at: float  # Unix seconds at the receiver
    status: asyncio.Future[int]


@dataclass
class HoldingReceiver:
    """Answers each delivery with the status the test gives it (`release`), or 200 {} at once
    once `recovered`."""

    arrivals: list[Held] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    recovered: bool = False

    async def answer(self, got: Received) -> web.StreamResponse:
        held = Held(got, time.time(), asyncio.get_running_loop().create_future())
        if self.recovered:
            held.status.set_result(200)
        async with self.arrived:
            self.arrivals.append(held)
            self.arrived.notify_all()
        status = await held.status
        if status == 200:
            return web.json_response({"ok": True})
        return web.Response(status=status, text="down", headers={"Retry-After": "3"} if status == 429 else {})

    async def arrival(self, number: int) -> Held:
        async with asyncio.timeout(30), self.arrived:
            await self.arrived.wait_for(lambda: len(self.arrivals) >= number)
        return self.arrivals[number - 1]


def at(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Endpoint:
    def __init__(self, http: aiohttp.ClientSession, metrics_url: str, endpoint_id: str) -> None:
        self.http, self.metrics_url, self.id = http, metrics_url, endpoint_id
        self.states_seen: set[str] = set()

    async def breaker(self) -> dict[str, Any]:
        """The GET's breaker, checked against the clock: `open` while `open_until` is ahead,
        `half_open` once it has passed, `closed` (no `open_until`) otherwise."""
        before = time.time()
        async with self.http.get(f"/api/v1/push-endpoints/{self.id}") as resp:
            assert resp.status == 200
            breaker = dict((await resp.json())["breaker"])
        after = time.time()
        if "open_until" not in breaker:
            assert breaker["state"] == "closed", breaker
        elif at(breaker["open_until"]) > after:
            assert breaker["state"] == "open", breaker
        elif at(breaker["open_until"]) <= before:
            assert breaker["state"] == "half_open", breaker
        self.states_seen.add(breaker["state"])
        return breaker

    async def gauge(self) -> float:
        async with aiohttp.ClientSession() as plain, plain.get(f"{self.metrics_url}/metrics") as resp:
            text = await resp.text()
        for family in text_string_to_metric_families(text):
            if family.name == "queueflow_push_breaker_open":
                for sample in family.samples:
                    if sample.labels.get("endpoint") == "flaky":
                        return float(sample.value)
        raise AssertionError("no queueflow_push_breaker_open sample for the endpoint")


async def test_a_failing_endpoints_breaker_opens_then_lets_one_trial_through_at_a_time_until_one_succeeds(
    database_url, service, receivers
):
    holding = HoldingReceiver()
    receiver = await receivers(holding.answer)
    api = await service(database_url, mode="api", extra_args=QUICK)
    pusher = await service(database_url, mode="pusher", extra_args=[*QUICK, *BREAKER])
    async with aiohttp.ClientSession(base_url=api.base_url, headers=AUTH) as http:

        async def enqueue() -> str:
            body = {"task_name": "hook", "payload": {}, "config": {"queue": "pushed", **RETRY}}
            async with http.post("/api/v1/jobs", json=body) as resp:
                assert resp.status == 201, await resp.text()
                return str((await resp.json())["job_id"])

        async def jobs(ids: list[str]) -> dict[str, dict[str, Any]]:
            found = {}
            for job_id in ids:
                async with http.get(f"/api/v1/jobs/{job_id}") as resp:
                    found[job_id] = dict(await resp.json())
            return found

        body = {"name": "flaky", "url": receiver.url, "queues": ["pushed"], "concurrency": CONCURRENCY}
        async with http.post("/api/v1/push-endpoints", json=body) as resp:
            assert resp.status == 201
            endpoint = Endpoint(http, pusher.metrics_url, (await resp.json())["id"])
        assert (await endpoint.breaker())["state"] == "closed"

        # Two deliveries in flight fail (429s whose Retry-After keeps their jobs from coming back
        # before the breaker has opened): two failures in a row open it.
        failing = [await enqueue() for _ in range(2)]
        first_two = [await holding.arrival(1), await holding.arrival(2)]
        for held in first_two:
            held.status.set_result(429)
        opened = await eventually(
            lambda: _with(endpoint.breaker(), lambda b: b["consecutive_failures"] == 2 and "open_until" in b),
            timeout=30,
        )
        open_until = at(opened["open_until"])
        await eventually(lambda: _equals(endpoint.gauge(), 1.0), timeout=30)

        # Jobs enqueued while it is open wait (and so do the two failed ones, due again in 3 s).
        waiting = [await enqueue() for _ in range(3)]
        everyone = [*failing, *waiting]

        # Half-open: one trial delivery, not before the interval ended, and no other beside it.
        trial = await holding.arrival(3)
        assert trial.at >= open_until, (trial.at, open_until)
        half_open = await endpoint.breaker()
        assert half_open["state"] == "half_open" and half_open["consecutive_failures"] == 2
        assert await endpoint.gauge() == 1.0  # open or half-open: tripped
        running = [j for j in (await jobs(everyone)).values() if j["status"] == "running"]
        assert [j["id"] for j in running] == [trial.got.job_id]
        assert len(holding.arrivals) == 3

        # The trial fails: open again, for longer.
        trial.status.set_result(503)
        failed_at = time.time()
        reopened = await eventually(
            lambda: _with(endpoint.breaker(), lambda b: b["consecutive_failures"] == 3), timeout=30
        )
        reopened_until = at(reopened["open_until"])
        assert reopened_until > failed_at
        assert await endpoint.gauge() == 1.0

        # The receiver recovers; the next trial (held, alone again) succeeds and closes it.
        second_trial = await holding.arrival(4)
        assert second_trial.at >= reopened_until, (second_trial.at, reopened_until)
        half_open = await endpoint.breaker()
        assert half_open["state"] == "half_open" and half_open["consecutive_failures"] == 3
        running = [j for j in (await jobs(everyone)).values() if j["status"] == "running"]
        assert [j["id"] for j in running] == [second_trial.got.job_id]
        assert len(holding.arrivals) == 4
        holding.recovered = True
        second_trial.status.set_result(200)

        closed = await eventually(
            lambda: _with(endpoint.breaker(), lambda b: b["state"] == "closed"), timeout=30
        )
        assert closed == {"state": "closed", "consecutive_failures": 0}
        await eventually(lambda: _equals(endpoint.gauge(), 0.0), timeout=30)

        # The waiting jobs drain; none spent an attempt while the breaker was open.
        done = await eventually(
            lambda: _with(jobs(everyone), lambda js: all(j["status"] == "completed" for j in js.values())),
            timeout=30,
        )
        for held in holding.arrivals[2:]:
            assert held.at >= open_until, "a delivery while the breaker was first open"
            assert not failed_at < held.at < reopened_until, "a delivery while the breaker was open again"
        # Each job was delivered exactly as often as the receiver saw it, and spent a retry only on
        # an answered failure: the three jobs (at least) that only waited were delivered once.
        failed = [first_two[0].got.job_id, first_two[1].got.job_id, trial.got.job_id]
        for job_id, job in done.items():
            seen = sum(1 for held in holding.arrivals if held.got.job_id == job_id)
            assert (job["delivery_count"], job["retry_count"]) == (seen, failed.count(job_id)), job
        only_waited = [j for j in done.values() if j["retry_count"] == 0]
        assert len(only_waited) == len(everyone) - len(set(failed)) >= 2
        assert all(j["delivery_count"] == 1 for j in only_waited)
        assert len(holding.arrivals) == len(everyone) + len(failed)
    assert endpoint.states_seen >= {"closed", "open", "half_open"}, endpoint.states_seen


async def _with(value: Any, check: Any) -> Any:
    """`await value`, returned when `check` holds for it (for `eventually`)."""
    got = await value
    return got if check(got) else None


async def _equals(value: Any, want: Any) -> bool:
    return bool(await value == want)
