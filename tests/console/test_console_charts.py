"""The console's charts (docs/console.md, "Charts") in a real headless Chromium against a real
server whose janitor rolls up a workload of jobs with known timestamps: one point per step of the
window, the workload's figures, hover and keyboard values, the table view, a read-only token, and
another tenant's jobs never counted."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from playwright.async_api import expect

from tests.console.helpers import call
from tests.support.stats import current_minute, make_jobs, make_retries, recount_from
from tests.support.waiting import eventually

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(180)]

CREDENTIALS = ["--api-keys", "rw:acme,ro:acme:ro,gx:globex", "--worker-token", "w"]


@pytest.fixture
async def server(database_url, service):
    return await service(database_url, mode="all", dev=False, extra_args=CREDENTIALS)


@pytest.fixture
async def workload(server, pool, http):
    """acme: 5 completions and 2 failures on `mail`, 3 completions on `sms`, a backlog on `mail`
    and 2 retries; globex: 7 completions on `mail`. Counted once the janitor's rollup has them."""
    base = await current_minute(pool) - timedelta(minutes=10)
    m = lambda k: base + timedelta(minutes=k)  # noqa: E731
    await make_jobs(pool, "acme", "mail", "completed", m(1) + timedelta(seconds=5), 4, wait=2.0, run=3.0)
    await make_jobs(pool, "acme", "mail", "completed", m(3) + timedelta(seconds=5), 1, wait=2.0, run=40.0)
    await make_jobs(pool, "acme", "mail", "failed", m(3), 2, wait=0.5, run=1.0, task="charge")
    await make_jobs(pool, "acme", "sms", "completed", m(4), 3, wait=1.0, run=0.25)
    await make_retries(pool, "acme", "mail", m(8), 2)
    await make_jobs(pool, "acme", "mail", "pending", m(6), 3)
    await make_jobs(pool, "globex", "mail", "completed", m(1), 7, wait=9.0, run=9.0)
    await recount_from(pool, base)
    client = await http(server.base_url, "rw")

    async def counted() -> bool:
        body = await call(client, "GET", "/api/v1/stats/series?metric=completed,pending&window=15m")
        values = {s["metric"]: s["values"] for s in body["series"]}
        return sum(values["completed"]) == 8 and max(values["pending"]) == 3

    await eventually(counted, timeout=60)
    return m


def chart(console: Any, name: str) -> Any:
    return console.page.locator(f'#view figure[data-chart="{name}"]')


async def point_values(console: Any, name: str, metric: str) -> list[float]:
    return (
        await chart(console, name)
        .locator(f'g[data-metric="{metric}"] circle')
        .evaluate_all("cs => cs.map(c => Number(c.getAttribute('data-value')))")
    )


async def test_the_overview_charts_draw_a_point_per_step_with_the_workloads_figures(
    workload, server, open_console
):
    console = await open_console(server.base_url)
    await console.sign_in("rw", "#/?window=15m")
    await console.heading("Overview")
    for name, metric in [
        ("throughput", "completed"),
        ("enqueued", "enqueued"),
        ("backlog", "pending"),
        ("wait", "wait_p95"),
        ("run", "run_p50"),
    ]:
        await expect(chart(console, name).locator(f'g[data-metric="{metric}"] circle')).to_have_count(15)
    completed = await point_values(console, "throughput", "completed")
    assert sorted(v for v in completed if v) == [1, 3, 4]  # m(1): 4 on mail; m(3): 1; m(4): 3 on sms
    assert sum(await point_values(console, "throughput", "failed")) == 2
    assert sum(await point_values(console, "throughput", "retried")) == 2
    assert max(await point_values(console, "backlog", "pending")) == 3
    await expect(chart(console, "throughput").locator(".chart-unit")).to_have_text("jobs per 1 min")
    await console.screenshot("charts")

    await console.page.get_by_role("radio", name="24 h").check()
    await expect(chart(console, "throughput").locator('g[data-metric="completed"] circle')).to_have_count(96)
    assert sum(await point_values(console, "throughput", "completed")) == 8
    assert console.page.url.endswith("#/?window=24h")


async def test_hovering_a_step_shows_its_values_and_the_keyboard_reads_them_too(
    workload, server, open_console
):
    console = await open_console(server.base_url)
    await console.sign_in("rw", "#/queues/mail?window=15m")
    await console.heading("Queue mail")
    completed = await point_values(console, "throughput", "completed")
    assert len(completed) == 15 and sum(completed) == 5
    busiest = completed.index(4)
    throughput = chart(console, "throughput")
    await throughput.locator(f'rect.hit[data-i="{busiest}"]').hover()
    tip = throughput.locator(".chart-tip")
    await expect(tip).to_be_visible()
    await expect(tip.locator('[data-metric="completed"]')).to_have_text("Completed: 4")
    await expect(tip.locator('[data-metric="failed"]')).to_have_text("Failed: 0")

    run = chart(console, "run")
    await run.locator(".chart-plot").focus()
    for _ in range(14 - busiest):
        await console.page.keyboard.press("ArrowLeft")
    live = run.locator(".chart-plot [aria-live]")
    await expect(live).to_contain_text(re.compile(r"p50 (2\.9\d*|3(\.0\d*)?) s"))  # 3 s runs, within a bucket
    await expect(run.locator(".chart-tip")).to_be_visible()

    table = throughput.locator("details.chart-table")
    await table.locator("summary").click()
    await expect(table.locator("tbody tr")).to_have_count(15)
    await expect(table.locator("tbody tr").nth(busiest).locator("td").first).to_have_text("4")


async def test_a_read_only_token_sees_the_charts_and_the_top_failing_tasks(workload, server, open_console):
    console = await open_console(server.base_url)
    await console.sign_in("ro", "#/queues/mail?window=1h")
    await expect(chart(console, "throughput").locator('g[data-metric="completed"] circle')).to_have_count(60)
    assert sum(await point_values(console, "throughput", "completed")) == 5
    row = console.page.locator('#view tr[data-task="charge"]')
    await expect(row.locator("td").nth(1)).to_have_text("2")
    assert await console.page.locator("#view button").all_inner_texts() == ["Refresh"]


async def test_another_tenants_jobs_never_count_in_the_charts(workload, server, open_console):
    console = await open_console(server.base_url)
    await console.sign_in("gx", "#/?window=15m")
    await expect(chart(console, "throughput").locator('g[data-metric="completed"] circle')).to_have_count(15)
    assert sum(await point_values(console, "throughput", "completed")) == 7
    assert sum(await point_values(console, "throughput", "failed")) == 0
    assert max(await point_values(console, "backlog", "pending")) == 0
