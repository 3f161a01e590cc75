"""GET /api/v1/stats/series and /api/v1/stats/failing-tasks: each metric's series adds up to the
jobs of a known workload (jobs with known timestamps) step by step; empty steps are zeros; the
caller's tenant only; read-only keys may read; bad parameters are 400s that say why."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest

from shared.db import jobs as jobs_db
from shared.db import queues
from shared.domain.jobs import NewJob, Retention
from shared.domain.stats import Metric
from tests.api.helpers import ACME, ACME_RO, GLOBEX, STRICT, expect_error, list_json, parse_time
from tests.support.api import database_of
from tests.support.stats import current_minute, make_jobs, make_retries, roll_up_now

ALL = ",".join(Metric)


async def series(client: Any, headers: dict[str, str] = ACME, **params: str) -> dict[str, Any]:
    return await list_json(client, "/api/v1/stats/series", headers, **params)


def by_metric(body: dict[str, Any]) -> dict[str, list[float]]:
    return {s["metric"]: s["values"] for s in body["series"]}


def at(body: dict[str, Any], minute: datetime) -> int:
    """The index of the step that starts at `minute`."""
    return [parse_time(t) for t in body["timestamps"]].index(minute)


@pytest.fixture
async def workload(api):
    """acme's jobs on `mail` and `sms` over the last 10 minutes, globex's on `mail` (never acme's)."""
    client = await api(**STRICT)
    pool = database_of(client).pool
    now = await current_minute(pool)
    base = now - timedelta(minutes=10)
    m = lambda k: base + timedelta(minutes=k)  # noqa: E731
    await make_jobs(pool, "acme", "mail", "completed", m(1) + timedelta(seconds=5), 4, wait=2.0, run=3.0)
    await make_jobs(pool, "acme", "mail", "completed", m(3) + timedelta(seconds=5), 1, wait=2.0, run=40.0)
    await make_jobs(pool, "acme", "mail", "failed", m(3), 2, wait=0.5, run=1.0, task="charge")
    await make_jobs(pool, "acme", "sms", "completed", m(4), 3, wait=1.0, run=0.25)
    await make_retries(pool, "acme", "mail", m(8), 2)  # (first: it claims the queue's due jobs)
    await make_jobs(pool, "acme", "mail", "pending", m(6), 3)
    await make_jobs(pool, "acme", "mail", "scheduled", m(6), 2)
    await make_jobs(pool, "acme", "mail", "running", m(7), 1, wait=1.0)
    await make_jobs(pool, "globex", "mail", "completed", m(1), 7, wait=9.0, run=9.0)
    await make_jobs(pool, "globex", "mail", "pending", m(2), 5)
    await roll_up_now(pool, base)
    return client, m


async def test_every_count_adds_up_to_the_jobs_of_the_window_step_by_step(workload):
    client, m = workload
    body = await series(client, metric=ALL, window="15m", queue="mail")
    assert body["step"] == "1m" and body["step_secs"] == 60 and body["queue"] == "mail"
    assert len(body["timestamps"]) == 15
    values = by_metric(body)
    assert all(len(v) == 15 for v in values.values())
    expected = {
        "enqueued": {m(1): 4, m(3): 3, m(6): 5, m(7): 1, m(8): 2},
        "completed": {m(1): 4, m(3): 1},  # the first four finish at m(1) + 10 s, the fifth at m(3) + 47 s
        "failed": {m(3): 2},
        "retried": {m(8): 2},
    }
    for metric, steps in expected.items():
        want = [0] * 15
        for minute, n in steps.items():
            want[at(body, minute)] = n
        assert values[metric] == want, metric
        assert sum(values[metric]) == sum(steps.values())


async def test_the_tenants_queues_together_add_up_to_each_queues(workload):
    client, _ = workload
    total = by_metric(await series(client, metric=ALL, window="15m"))
    mail = by_metric(await series(client, metric=ALL, window="15m", queue="mail"))
    sms = by_metric(await series(client, metric=ALL, window="15m", queue="sms"))
    for metric in ("enqueued", "completed", "failed", "retried", "pending", "scheduled", "running"):
        assert total[metric] == [a + b for a, b in zip(mail[metric], sms[metric], strict=True)], metric
    assert sum(total["completed"]) == 8 and sum(total["enqueued"]) == 18


async def test_backlog_is_the_last_sample_of_its_step(workload):
    client, _ = workload
    body = await series(client, metric="pending,scheduled,running", window="15m", queue="mail")
    values = by_metric(body)
    sampled = at(body, parse_time(body["timestamps"][-1]))  # filed under the last counted minute
    assert [values[k][sampled] for k in ("pending", "scheduled", "running")] == [3, 2, 1]
    assert all(v == 0 for k in values for i, v in enumerate(values[k]) if i != sampled)


async def test_percentiles_are_the_wait_and_run_times_of_the_jobs_that_finished_in_the_step(workload):
    client, m = workload
    body = await series(client, metric="wait_p50,wait_p95,run_p50,run_p95", window="15m", queue="mail")
    values = by_metric(body)
    assert {s["unit"] for s in body["series"]} == {"seconds"}

    def near(got: float, want: float) -> bool:  # within the histogram's half bucket (2^(1/8))
        return want / 1.0906 <= got <= want * 1.0906

    one, three = at(body, m(1)), at(body, m(3))
    assert near(values["wait_p50"][one], 2.0) and near(values["run_p50"][one], 3.0)
    assert near(values["run_p95"][one], 3.0)
    # m(3): two failures (wait 0.5, run 1) and one completion (wait 2, run 40).
    assert near(values["run_p50"][three], 1.0) and near(values["run_p95"][three], 40.0)
    assert near(values["wait_p50"][three], 0.5) and near(values["wait_p95"][three], 2.0)
    empty = [i for i in range(15) if i not in (one, three)]
    assert all(values[k][i] == 0 for k in values for i in empty)


async def test_a_coarser_step_sums_its_minutes(workload):
    client, _ = workload
    body = await series(client, metric="enqueued,completed", window="1h", step="15m", queue="mail")
    assert len(body["timestamps"]) == 4
    values = by_metric(body)
    assert sum(values["enqueued"]) == 15 and sum(values["completed"]) == 5
    step = timedelta(minutes=15)
    assert all(parse_time(b) - parse_time(a) == step for a, b in itertools.pairwise(body["timestamps"]))


async def test_another_tenants_jobs_never_count(workload):
    client, _ = workload
    globex = by_metric(await series(client, GLOBEX, metric=ALL, window="15m"))
    assert sum(globex["enqueued"]) == 12 and sum(globex["completed"]) == 7
    assert max(globex["pending"]) == 5 and max(globex["running"]) == 0


async def test_a_read_only_key_reads_the_series(workload):
    client, _ = workload
    values = by_metric(await series(client, ACME_RO, metric="completed", window="15m"))
    assert sum(values["completed"]) == 8


async def test_an_empty_window_is_zeros_not_gaps(api):
    client = await api(**STRICT)
    for window, points in (("15m", 15), ("1h", 60), ("6h", 72), ("24h", 96)):
        body = await series(client, metric=ALL, window=window)
        assert len(body["timestamps"]) == points
        assert [s["metric"] for s in body["series"]] == list(Metric)
        assert all(s["values"] == [0] * points for s in body["series"]), window


async def test_jobs_of_a_queue_that_removes_them_as_they_complete_are_counted(api):
    client = await api(**STRICT)
    pool = database_of(client).pool
    await queues.set_retention(pool, "acme", "fast", Retention.REMOVE_COMPLETED)
    since = await current_minute(pool)
    await jobs_db.insert_jobs(pool, "acme", [NewJob(task_name="t", queue="fast") for _ in range(5)])
    leases = await jobs_db.claim(pool, "fast", 10, 60, tenant="acme")
    await jobs_db.complete_many(pool, [(lease.job.id, lease.token, {}) for lease in leases])
    assert await pool.fetchval("SELECT count(*) FROM queueflow.jobs WHERE queue_name = 'fast'") == 0
    await roll_up_now(pool, since)
    values = by_metric(await series(client, metric="enqueued,completed,run_p50", window="15m", queue="fast"))
    assert sum(values["enqueued"]) == 5 and sum(values["completed"]) == 5
    assert sum(1 for v in values["run_p50"] if v > 0) == 1


async def test_top_failing_tasks_count_the_windows_dead_letters_per_task(workload):
    client, _ = workload
    body = await list_json(client, "/api/v1/stats/failing-tasks", ACME, queue="mail", window="1h")
    assert [(t["task"], t["failures"]) for t in body["tasks"]] == [("charge", 2)]
    other = await list_json(client, "/api/v1/stats/failing-tasks", ACME, queue="sms", window="1h")
    assert other["tasks"] == []
    assert (await list_json(client, "/api/v1/stats/failing-tasks", GLOBEX))["tasks"] == []


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "metric is required"),
        ({"metric": "throughput"}, "metric must be one of"),
        ({"metric": "completed", "window": "2h"}, "window must be one of"),
        ({"metric": "completed", "step": "7m"}, "step must be one of"),
        ({"metric": "completed", "window": "15m", "step": "1h"}, "step 1h does not divide window 15m"),
        ({"metric": "completed", "window": "15m", "step": "10m"}, "step 10m does not divide window 15m"),
        ({"metric": "completed", "queue": "two words"}, "queue name must be"),
    ],
)
async def test_bad_series_parameters_are_400s_that_say_why(api, params, message):
    client = await api(**STRICT)
    resp = await client.get("/api/v1/stats/series", params=params, headers=ACME)
    await expect_error(resp, 400, "validation error: " + message)


async def test_a_bad_failing_tasks_window_is_a_400(api):
    client = await api(**STRICT)
    resp = await client.get("/api/v1/stats/failing-tasks", params={"window": "1w"}, headers=ACME)
    await expect_error(resp, 400, "validation error: window must be one of")


async def test_the_series_need_a_credential(api):
    client = await api(**STRICT)
    resp = await client.get("/api/v1/stats/series", params={"metric": "completed"})
    await expect_error(resp, 401)
