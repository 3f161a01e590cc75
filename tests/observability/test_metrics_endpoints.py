"""/metrics of real processes, one per mode: the documented metrics are there, the queue gauges
read a seeded backlog from the database, and the HTTP and handler metrics count what happened."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import asyncpg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devkit.procs import ServiceProcess
from shared.db.pool import init_connection
from tests.observability.catalog import documented_metrics
from tests.support.waiting import eventually

DEV = {"Authorization": "Bearer dev"}


async def scrape(proc: ServiceProcess) -> str:
    async with aiohttp.ClientSession() as http, http.get(proc.metrics_url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/plain"
        return await resp.text()


def exposed_types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample `name{labels}`, or None when there is none."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


@pytest.mark.parametrize("mode", ["api", "janitor", "workflow", "worker", "all"])
async def test_every_mode_exposes_every_documented_metric_with_its_type(database_url, service, mode):
    proc = await service(database_url, mode=mode)

    exposed = exposed_types(await scrape(proc))

    documented = {name: kind for name, (kind, _labels) in documented_metrics().items()}
    assert len(documented) >= 20
    assert {n: exposed.get(n) for n in documented} == documented


async def seed_backlog(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    await init_connection(conn)
    try:
        async with conn.transaction():
            for _ in range(3):  # due for ten minutes: claimable, and old
                await conn.execute(
                    "SELECT queueflow.enqueue('acme', 'echo', queue => 'alpha', "
                    "run_at => now() - interval '10 minutes')"
                )
            for _ in range(2):
                await conn.execute(
                    "SELECT queueflow.enqueue('acme', 'echo', queue => 'beta', "
                    "run_at => now() + interval '1 hour')"
                )
            running = await conn.fetchval("SELECT queueflow.enqueue('acme', 'echo', queue => 'gamma')")
            await conn.execute(
                "UPDATE queueflow.jobs SET status = 'running', lease_token = gen_random_uuid(), "
                "locked_until = now() + interval '1 hour' WHERE id = $1",
                running,
            )
    finally:
        await conn.close()


async def test_queue_gauges_reflect_a_seeded_backlog(database_url, service):
    await seed_backlog(database_url)
    proc = await service(database_url, mode="janitor")  # no workers: the backlog stays put

    text = await scrape(proc)

    assert sample(text, "queueflow_store_up") == 1.0
    assert sample(text, "queueflow_queue_pending_jobs", queue="alpha") == 3.0
    assert sample(text, "queueflow_queue_scheduled_jobs", queue="beta") == 2.0
    assert sample(text, "queueflow_queue_running_jobs", queue="gamma") == 1.0
    assert sample(text, "queueflow_queue_pending_jobs", queue="beta") == 0.0
    assert (sample(text, "queueflow_queue_oldest_pending_age_seconds", queue="alpha") or 0) >= 600
    assert sample(text, "queueflow_queue_oldest_pending_age_seconds", queue="beta") == 0.0


async def test_queue_gauges_are_the_same_whichever_process_is_scraped(database_url, service):
    await seed_backlog(database_url)
    api = await service(database_url, mode="api")
    janitor = await service(database_url, mode="janitor")

    readings = [
        sample(await scrape(p), "queueflow_queue_pending_jobs", queue="alpha") for p in (api, janitor)
    ]

    assert readings == [3.0, 3.0]


async def test_http_metrics_count_requests_by_route_template_and_status(database_url, service):
    proc = await service(database_url, mode="api")
    async with aiohttp.ClientSession(headers=DEV) as http:
        async with http.post(proc.base_url + "/api/v1/jobs", json={"task_name": "noop"}) as resp:
            job_id = (await resp.json())["job_id"]
        for _ in range(2):
            async with http.get(f"{proc.base_url}/api/v1/jobs/{job_id}") as resp:
                assert resp.status == 200
        async with http.get(f"{proc.base_url}/api/v1/jobs/{job_id[:-1]}0x") as resp:
            assert resp.status == 404

    text = await scrape(proc)

    route = "/api/v1/jobs/{id}"
    assert (
        sample(text, "queueflow_http_requests_total", method="POST", route="/api/v1/jobs", status="201")
        == 1.0
    )
    assert sample(text, "queueflow_http_requests_total", method="GET", route=route, status="200") == 2.0
    assert sample(text, "queueflow_http_requests_total", method="GET", route=route, status="404") == 1.0
    assert sample(text, "queueflow_http_request_duration_seconds_count", method="GET", route=route) == 3.0
    assert sample(text, "queueflow_jobs_created_total") == 1.0
    assert job_id not in text  # labels never carry ids


async def test_a_worker_records_handler_duration_queue_wait_and_completions(database_url, service, db):
    proc = await service(database_url, mode="worker")
    job_id = await db.fetchval("SELECT queueflow.enqueue('acme', 'echo', queue => 'default')")

    await eventually(lambda: job_status(db, job_id, "completed"))

    async def recorded() -> str | None:
        text = await scrape(proc)
        return text if sample(text, "queueflow_jobs_completed_total") == 1.0 else None

    text = await eventually(recorded)
    assert sample(text, "queueflow_handler_duration_seconds_count", task="echo") == 1.0
    assert sample(text, "queueflow_job_queue_wait_seconds_count", queue="default") == 1.0
    assert sample(text, "queueflow_long_poll_waiters") is not None


async def job_status(db: Any, job_id: Any, status: str) -> bool:
    return await db.fetchval("SELECT status FROM queueflow.jobs WHERE id = $1", job_id) == status
