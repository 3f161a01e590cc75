"""The console's visibility views (docs/visibility.md) in a real headless Chromium against a real
server in --dev: a job's progress bar, live log tail and attempts table, and the workers page. Each
update is made through the API, as a remote worker would, and awaited on the page."""

from __future__ import annotations

import pytest
from playwright.async_api import expect

from tests.console.helpers import call, create_job
from tests.console.test_console_views import WIDER_THAN_THE_SCREEN

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(180)]


@pytest.fixture
async def server(database_url, service):
    return await service(database_url, mode="all", dev=True)


@pytest.fixture
async def client(server, http):
    return await http(server.base_url, "dev")


@pytest.fixture
async def console(server, open_console):
    return await open_console(server.base_url)


async def lease(client, queue: str, worker_id: str, **worker: str) -> tuple[str, str]:
    body = {"max_jobs": 1, "wait_secs": 10, "worker_id": worker_id, **({"worker": worker} if worker else {})}
    leased = await call(client, "POST", f"/api/v1/queues/{queue}/lease", body)
    assert len(leased["jobs"]) == 1, leased
    return leased["jobs"][0]["job"]["id"], leased["jobs"][0]["lease_token"]


async def test_job_page_shows_progress_a_live_log_tail_and_the_attempts(client, console):
    job_id = await create_job(
        client, task_name="render", queue="renders", retry_delay_secs=0, jitter_factor=0
    )
    await console.sign_in("dev", f"#/jobs/{job_id}")
    status = console.page.locator(".page-head .badge")
    await expect(status).to_have_text("pending")
    attempts = console.page.locator("section", has=console.page.locator("#attempts-title"))
    await expect(attempts.locator(".empty")).to_contain_text("No attempt yet")
    await expect(console.page.locator(".progress-panel")).to_be_hidden()

    leased, token = await lease(client, "renders", "render-box-1")
    assert leased == job_id
    await expect(status).to_have_text("running")
    await expect(attempts.locator("tbody tr")).to_have_count(1)
    await expect(attempts.locator("tbody tr").first).to_contain_text("render-box-1")

    # Progress, from a heartbeat, arrives over the job's stream.
    body = {
        "lease_token": token,
        "extend_secs": 30,
        "progress": {"percent": 40, "message": "frame 40 of 100"},
    }
    await call(client, "POST", f"/api/v1/jobs/{job_id}/heartbeat", body)
    bar = console.page.get_by_role("progressbar", name="Job progress")
    await expect(bar).to_have_attribute("aria-valuenow", "40")
    await expect(console.page.locator(".progress-panel")).to_contain_text("frame 40 of 100")

    # Log lines, as they are posted.
    lines = [
        {"message": "loading scene", "level": "info"},
        {"message": "texture missing", "level": "warning"},
    ]
    await call(client, "POST", f"/api/v1/jobs/{job_id}/logs", {"lease_token": token, "lines": lines})
    log = console.page.locator(".log-lines li")
    await expect(log).to_have_count(2)
    await expect(log.nth(1)).to_contain_text("texture missing")
    await expect(console.page.locator(".log-panel")).to_contain_text("2 lines")
    await console.screenshot("job-visibility")

    # It fails and is retried by another worker: the attempts table shows both, in order.
    body = {"lease_token": token, "error": "GPU lost", "retryable": True}
    await call(client, "POST", f"/api/v1/jobs/{job_id}/fail", body)
    await expect(status).to_have_text("retrying")
    _, token = await lease(client, "renders", "render-box-2")
    await expect(status).to_have_text("running")
    await call(
        client, "POST", f"/api/v1/jobs/{job_id}/logs", {"lease_token": token, "lines": [{"message": "again"}]}
    )
    await expect(log).to_have_count(3)
    await call(client, "POST", f"/api/v1/jobs/{job_id}/complete", {"lease_token": token, "result": {}})
    await expect(status).to_have_text("completed")
    rows = attempts.locator("tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.nth(0)).to_contain_text("retry")
    await expect(rows.nth(0)).to_contain_text("render-box-1")
    await expect(rows.nth(0)).to_contain_text("GPU lost")
    await expect(rows.nth(1)).to_contain_text("completed")
    await expect(rows.nth(1)).to_contain_text("render-box-2")

    # A reload shows the same: the log from the stream's start, the progress from the job.
    await console.page.reload()
    await expect(log).to_have_count(3)
    await expect(rows).to_have_count(2)


async def test_workers_page_lists_the_workers_that_leased_the_tenants_jobs(client, console):
    await create_job(client, queue="renders")
    await lease(client, "renders", "render-box-9", hostname="render-9.local", sdk="python", version="2.0")
    await console.sign_in("dev", "#/workers")
    await console.heading("Workers")
    row = console.page.locator('#view tr[data-worker="render-box-9"]')
    await expect(row).to_contain_text("live")
    await expect(row).to_contain_text("render-9.local")
    await expect(row).to_contain_text("python 2.0")
    await expect(row.locator("td.num")).to_have_text("1")
    await row.get_by_role("link", name="renders").click()
    await console.heading("Jobs")
    await console.go("#/workers")
    await console.heading("Workers")
    await console.page.keyboard.press("g")
    await console.page.keyboard.press("o")
    await console.heading("Overview")
    await console.page.keyboard.press("g")
    await console.page.keyboard.press("k")
    await console.heading("Workers")
    await console.screenshot("workers")


async def test_narrow_screen_job_page_and_workers_page_have_no_sideways_scrolling(
    client, server, open_console
):
    job_id = await create_job(client, queue="renders")
    _, token = await lease(
        client, "renders", "a-worker-with-a-rather-long-name-" + "x" * 60, hostname="h" * 80
    )
    body = {"lease_token": token, "extend_secs": 30, "progress": {"percent": 12.5, "message": "m" * 300}}
    await call(client, "POST", f"/api/v1/jobs/{job_id}/heartbeat", body)
    lines = [{"message": "unbroken" * 60, "level": "warning"}, {"message": "short"}]
    await call(client, "POST", f"/api/v1/jobs/{job_id}/logs", {"lease_token": token, "lines": lines})
    narrow = await open_console(server.base_url, viewport={"width": 390, "height": 844})
    await narrow.sign_in("dev", f"#/jobs/{job_id}")
    await expect(narrow.page.locator(".log-lines li")).to_have_count(2)
    await expect(narrow.page.get_by_role("progressbar", name="Job progress")).to_have_attribute(
        "aria-valuenow", "12.5"
    )
    for link in (f"#/jobs/{job_id}", "#/workers"):
        await narrow.go(link)
        await expect(narrow.page.locator("#view table, #view .empty").first).to_be_visible()
        overflow = await narrow.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        wide = await narrow.page.evaluate(WIDER_THAN_THE_SCREEN) if overflow > 0 else []
        assert overflow <= 0, f"{link} is {overflow}px wider than the screen: {wide}"
    await narrow.screenshot("narrow-job-visibility")
