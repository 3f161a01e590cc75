"""A tenant enqueueing on 50,000 distinct queue names grows no process without bound: the LISTEN
hub keeps entries only for queues in use (and a bounded number of idle ones), and the per-queue
metrics keep a bounded label set, while every long-poll still gets its wake-up."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from shared import metrics
from shared.runtime.app import probe_app
from tests.support.api import database_of
from tests.support.waiting import eventually

A = {"Authorization": "Bearer ka"}
W = {"Authorization": "Bearer w"}
NAMES = 50_000
HUB_BOUND = 100  # the hub's idle entries, lowered from MAX_IDLE_QUEUES so that fewer leases show it


def label_values(text: str, metric: str) -> set[str]:
    return {
        s.labels["queue"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(metric)
    }


async def lease(client, queue: str, wait_secs: float = 0) -> list[dict]:
    resp = await client.post(
        f"/api/v1/queues/{queue}/lease", json={"max_jobs": 1, "wait_secs": wait_secs}, headers=W
    )
    assert resp.status == 200, await resp.text()
    return (await resp.json())["jobs"]


async def test_fifty_thousand_queue_names_leave_the_hub_and_the_metrics_bounded(api, clients):
    client = await api(
        dev=False, worker_token="w", api_keys="ka:acme", max_queues_per_tenant=0, worker_poll_secs=60
    )
    hub = database_of(client).hub
    hub.max_idle_queues = HUB_BOUND
    probes = await clients.start(probe_app(client.server.app))

    # 50,000 jobs, each on a queue of its own, through the batch route; every insert announces its
    # queues to every process's listener, and this one's hub hears them all.
    for start in range(0, NAMES, 1000):
        jobs = [{"task_name": "t", "config": {"queue": f"flood-{n}"}} for n in range(start, start + 1000)]
        resp = await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=A)
        assert resp.status == 201, await resp.text()
    assert hub.tracked_queues() <= HUB_BOUND  # a notification for a queue nobody here waits on keeps nothing

    # Workers lease from 400 of them, one after another: each lease makes its queue's entry.
    most = 0
    for n in range(400):
        assert len(await lease(client, f"flood-{n}")) == 1
        most = max(most, hub.tracked_queues())
    assert most <= HUB_BOUND * 3 // 2 + 1

    # Long-polls parked on 50 other queues keep their entries however many idle ones go, and each
    # gets the job that a later batch enqueues on its queue (the hub's wake-up: no safety poll
    # comes within the test's wait).
    parked_on = [f"parked-{n}" for n in range(50)]  # (under the client's 100 connections)
    polls = [asyncio.create_task(lease(client, queue, wait_secs=30)) for queue in parked_on]
    await eventually(lambda: all(hub.waiting(q) == 1 for q in parked_on), timeout=20)
    for n in range(400, 500):  # more entries made and dropped meanwhile
        await lease(client, f"flood-{n}")
    jobs = [{"task_name": "t", "config": {"queue": queue}} for queue in parked_on]
    assert (await client.post("/api/v1/jobs/batch", json={"jobs": jobs}, headers=A)).status == 201
    answers = await asyncio.wait_for(asyncio.gather(*polls), 20)
    assert [[leased["job"]["queue_name"] for leased in jobs] for jobs in answers] == [[q] for q in parked_on]

    text = await (await probes.get("/metrics")).text()
    wait_labels = label_values(text, "queueflow_job_queue_wait_seconds")
    assert len(wait_labels) <= metrics.MAX_QUEUE_LABELS + 1
    assert metrics.OTHER_QUEUES in wait_labels  # 550 queues leased from: most of them as _other
    pending_labels = label_values(text, "queueflow_queue_pending_jobs")
    assert len(pending_labels) == metrics.MAX_QUEUE_LABELS + 1  # the busiest, and the rest summed
    pending = {
        s.labels["queue"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "queueflow_queue_pending_jobs"
    }
    assert sum(pending.values()) == NAMES - 500  # every waiting job is counted, named or not
