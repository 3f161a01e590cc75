"""Per-key figures on /metrics: running and throttled claims, fleet-wide from the database, with a
bounded label set (the busiest keys one by one, the rest summed as key `_other`), and tenants
labelled by a hash of their id unless --metrics-tenant-ids asks for the ids."""

from __future__ import annotations

import hashlib

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.xdist_group("processes")

AUTH = {"Authorization": "Bearer dev"}
# The dev tenant's label: the first 12 hex digits of the SHA-256 of its id.
TENANT1 = hashlib.sha256(b"tenant1").hexdigest()[:12]


def samples(text: str, name: str) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[(s.labels["tenant"], s.labels["key"])] = s.value
    return out


async def call(http: aiohttp.ClientSession, method: str, path: str, body: dict) -> dict:
    async with http.request(method, path, json=body, headers=AUTH) as resp:
        assert resp.status in (200, 201), await resp.text()
        return await resp.json()


async def test_per_key_running_and_throttled_claims_with_a_bounded_label_set(database_url, service):
    proc = await service(database_url, mode="api", extra_args=["--limit-metrics-keys", "2"])
    async with aiohttp.ClientSession(base_url=proc.base_url) as http:
        await call(http, "PUT", "/api/v1/limits/k:*", {"concurrency": 1})
        jobs = [
            {"task_name": "t", "config": {"queue": "m", "limits": [key]}}
            for key, n in (("k:a", 3), ("k:b", 2), ("k:c", 2), ("free", 2))
            for _ in range(n)
        ]
        await call(http, "POST", "/api/v1/jobs/batch", {"jobs": jobs})
        leased = await call(http, "POST", "/api/v1/queues/m/lease", {"max_jobs": 50})
        assert len(leased["jobs"]) == 5  # one of each k: key, and both jobs of the key without a policy
        again = await call(http, "POST", "/api/v1/queues/m/lease", {"max_jobs": 50})
        assert again["jobs"] == []  # every k: key is saturated: its jobs are left waiting
    async with aiohttp.ClientSession() as http, http.get(proc.metrics_url + "/metrics") as resp:
        text = await resp.text()

    running = samples(text, "queueflow_limit_running_jobs")
    assert running[(TENANT1, "free")] == 2  # the busiest key first
    assert len(running) == 3  # two keys by name, the rest summed
    assert ("", "_other") in running
    assert sum(running.values()) == 5
    throttled = samples(text, "queueflow_limit_throttled_claims")
    assert set(throttled) == set(running)
    assert sum(throttled.values()) >= 4  # the second lease left the k: keys' 4 waiting jobs


@pytest.mark.parametrize(("flags", "label"), [([], TENANT1), (["--metrics-tenant-ids", "true"], "tenant1")])
async def test_tenants_are_labelled_by_a_hash_of_their_id_unless_the_ids_are_asked_for(
    database_url, service, flags, label
):
    proc = await service(database_url, mode="api", extra_args=flags)
    async with aiohttp.ClientSession(base_url=proc.base_url) as http:
        await call(
            http, "POST", "/api/v1/jobs", {"task_name": "t", "config": {"queue": "m", "limits": ["k"]}}
        )
        assert len((await call(http, "POST", "/api/v1/queues/m/lease", {"max_jobs": 1}))["jobs"]) == 1
    async with aiohttp.ClientSession() as http, http.get(proc.metrics_url + "/metrics") as resp:
        text = await resp.text()

    assert samples(text, "queueflow_limit_running_jobs") == {(label, "k"): 1}
    assert ("tenant1" in text) is (label == "tenant1")  # a hashed id appears nowhere
