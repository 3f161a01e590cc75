"""The console in a real headless Chromium against a real server in --dev: every view through its
deep link, every action, and each action's effect checked through the API.

The page fixture fails a test on any browser console error, uncaught exception, failed request or
request to another host. Waits are conditions with deadlines (Playwright's expect, `eventually`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from playwright.async_api import expect

from tests.console.helpers import (
    call,
    complete,
    create_job,
    create_jobs,
    dead_letters,
    fail,
    failed_job,
    job,
    lease_one,
    short_id,
    wait_for_job_status,
)
from tests.support.waiting import eventually

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(180)]


@pytest.fixture
async def server(database_url, service):
    """QueueFlow in --dev, all in one process (in-process workers drain the `default` queue)."""
    return await service(database_url, mode="all", dev=True)


@pytest.fixture
async def client(server, http):
    return await http(server.base_url, "dev")


@pytest.fixture
async def console(server, open_console):
    return await open_console(server.base_url)


def rows(console):
    return console.page.locator("#view tbody tr")


async def row_values(console, attribute: str) -> list[str]:
    return await rows(console).evaluate_all(f"rs => rs.map(r => r.getAttribute('{attribute}'))")


# --- overview and queues ---------------------------------------------------------------------------


async def test_overview_shows_backlog_per_queue_paused_flags_and_totals_and_refreshes_itself(client, console):
    await create_jobs(client, 3, "emails")
    later = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    await call(
        client,
        "POST",
        "/api/v1/jobs",
        {"task_name": "report", "config": {"queue": "reports"}, "run_at": later},
    )
    await call(client, "POST", "/api/v1/queues/reports/pause")
    for n in range(2):
        await create_job(client, "fail", "default", {"n": n}, max_retries=0)
    await eventually(lambda: _count_dead_letters(client, 2), timeout=20)

    await console.sign_in("dev")  # no hash: the overview
    await console.heading("Overview")
    emails = console.page.locator('.backlog-row[data-queue="emails"]')
    reports = console.page.locator('.backlog-row[data-queue="reports"]')
    await expect(emails).to_contain_text("3 pending")
    await expect(reports).to_contain_text("1 scheduled")
    await expect(reports.locator(".badge")).to_have_text("paused")
    await expect(emails.locator(".badge")).to_have_count(0)
    dead = console.page.locator(".card", has_text="Dead letters")
    await expect(dead.locator(".value")).to_have_text("2")
    await expect(
        console.page.locator("section", has_text="Latest failures").locator("tbody tr")
    ).to_have_count(2)

    # It refreshes on its own: a new job shows without a reload or a click.
    await create_job(client, queue="emails")
    await expect(emails).to_contain_text("4 pending")
    await console.screenshot("overview")


async def _count_dead_letters(client, n: int) -> bool:
    return len(await dead_letters(client)) >= n


async def test_queues_view_pauses_and_resumes_a_queue(client, console):
    await create_job(client, queue="emails")
    await console.sign_in("dev", "#/queues")
    await console.heading("Queues")
    row = console.page.locator('tr[data-queue="emails"]')
    await row.get_by_role("button", name="Pause queue").click()
    await console.confirm("Pause queue")
    await expect(row.get_by_role("button", name="Resume queue")).to_be_visible()
    await expect(row.locator(".badge")).to_have_text("paused")
    assert await _paused(client, "emails") is True

    await row.get_by_role("button", name="Resume queue").click()
    await expect(row.get_by_role("button", name="Pause queue")).to_be_visible()
    assert await _paused(client, "emails") is False

    # A queue that has no jobs yet can be paused by name.
    form = console.page.locator("form", has=console.page.get_by_label("Pause a queue by name", exact=True))
    await form.get_by_label("Pause a queue by name", exact=True).fill("invoices")
    await form.get_by_role("button", name="Pause queue").click()
    await console.confirm("Pause queue")
    await expect(console.page.locator('tr[data-queue="invoices"] .badge')).to_have_text("paused")
    assert await _paused(client, "invoices") is True
    await console.screenshot("queues")


async def test_queues_view_makes_a_queue_remove_completed_jobs_and_keep_them_again(client, console):
    await create_job(client, queue="emails")
    await console.sign_in("dev", "#/queues")
    await console.heading("Queues")
    row = console.page.locator('tr[data-queue="emails"]')
    await expect(row.locator("td.retention")).to_have_text("kept")
    await row.get_by_role("button", name="Remove completed jobs").click()
    await console.confirm("Remove completed jobs")
    await expect(row.locator("td.retention")).to_have_text("removed as they complete")
    assert (await call(client, "GET", "/api/v1/queues/emails"))["retention"] == "remove_completed"
    await console.screenshot("queues-retention")

    await row.get_by_role("button", name="Keep completed jobs").click()
    await expect(row.locator("td.retention")).to_have_text("kept")
    assert (await call(client, "GET", "/api/v1/queues/emails"))["retention"] == "keep"


async def _paused(client, queue: str) -> bool | None:
    queues = (await call(client, "GET", "/api/v1/queues"))["queues"]
    return next((q["paused"] for q in queues if q["queue"] == queue), None)


# --- jobs ------------------------------------------------------------------------------------------


async def test_jobs_list_pages_by_cursor_newest_first_filters_from_the_hash_and_stays_live(client, console):
    await create_jobs(client, 120, "emails")
    for n in range(2):
        await create_job(client, "fail", "default", {"n": n}, max_retries=0)

    async def api_page(cursor: str = "", **filters: str) -> dict:
        query = "&".join(f"{k}={v}" for k, v in {"limit": "50", "cursor": cursor, **filters}.items() if v)
        return await call(client, "GET", f"/api/v1/jobs?{query}")

    await console.sign_in("dev", "#/jobs?queue=emails")
    await console.heading("Jobs")
    await expect(rows(console)).to_have_count(50)
    first = await api_page(queue="emails")
    assert await row_values(console, "data-job") == [j["id"] for j in first["jobs"]]

    await console.page.get_by_role("button", name="Next page").click()
    second = await api_page(first["next_cursor"], queue="emails")
    await expect(rows(console).first).to_have_attribute("data-job", second["jobs"][0]["id"])
    assert await row_values(console, "data-job") == [j["id"] for j in second["jobs"]]
    assert "cursor=" in console.page.url

    await console.page.get_by_role("button", name="Next page").click()
    await expect(rows(console)).to_have_count(20)
    await expect(console.page.get_by_role("button", name="Next page")).to_have_count(0)
    await console.page.get_by_role("button", name="Previous page").click()
    await expect(rows(console).first).to_have_attribute("data-job", second["jobs"][0]["id"])

    # The link of page two reloads to page two.
    await console.page.reload()
    await console.heading("Jobs")
    await expect(rows(console).first).to_have_attribute("data-job", second["jobs"][0]["id"])
    await expect(console.page.get_by_label("Queue", exact=True)).to_have_value("emails")

    # Filters: the form writes them into the hash.
    await console.go("#/jobs")
    await expect(rows(console)).to_have_count(50)
    await console.page.get_by_label("Status", exact=True).select_option("failed")
    await console.page.get_by_label("Queue", exact=True).fill("")
    await console.page.get_by_role("button", name="Apply filters").click()
    await expect(console.page).to_have_url(re.compile(r"#/jobs\?status=failed$"))
    await expect(rows(console)).to_have_count(2)
    await expect(rows(console).locator(".badge")).to_have_text(["failed", "failed"])

    # Live: a job enqueued while the first page is open shows up at its top.
    await console.go("#/jobs?queue=emails")
    await expect(rows(console)).to_have_count(50)
    newest = await create_job(client, queue="emails")
    await expect(rows(console).first).to_have_attribute("data-job", newest)

    # No list request asked for an exact total; the operator can ask for one.
    assert console.watch.api_requests
    assert not [u for u in console.watch.api_requests if "include_total" in u]
    await console.page.get_by_role("button", name="Count all").click()
    await expect(console.page.locator(".pager .info")).to_have_text("121 jobs match in all.")
    await console.screenshot("jobs")


async def test_jobs_made_together_show_ids_that_differ_and_copy_the_whole_id(client, server, console):
    # One batch: every id has the same creation millisecond, the top of a UUIDv7.
    ids = await create_jobs(client, 20, "emails")
    await console.sign_in("dev", "#/jobs?queue=emails")
    await expect(rows(console)).to_have_count(20)
    links = rows(console).locator("td:first-child a")
    shown = await links.all_inner_texts()
    assert len(set(shown)) == 20, shown
    by_row = dict(zip(await row_values(console, "data-job"), shown, strict=True))
    assert by_row == {job_id: short_id(job_id) for job_id in ids}
    assert await links.first.get_attribute("title") == (await row_values(console, "data-job"))[0]

    # The copy button beside an id puts the whole id on the clipboard.
    await console.page.context.grant_permissions(
        ["clipboard-read", "clipboard-write"], origin=server.base_url
    )
    target = ids[7]
    row = console.page.locator(f'tr[data-job="{target}"]')
    await row.get_by_role("button", name="Copy job id").click()
    await expect(console.page.locator(".toast", has_text=f"Copied job id {target}.")).to_be_visible()
    assert await console.page.evaluate("navigator.clipboard.readText()") == target

    # So does the one on the job's page, whose heading holds the whole id.
    await row.get_by_role("link").click()
    await expect(console.page.locator("#view h1")).to_have_text(f"Job {target}")
    await console.page.evaluate("navigator.clipboard.writeText('')")
    await console.page.locator(".page-head").get_by_role("button", name="Copy job id").click()
    await eventually(lambda: _clipboard_is(console, target), timeout=5)


async def _clipboard_is(console, text: str) -> bool:
    return await console.page.evaluate("navigator.clipboard.readText()") == text


async def test_a_search_by_a_piece_of_an_id_finds_exactly_that_job(client, console):
    ids = await create_jobs(client, 20, "emails")
    target = ids[11]
    # Eight digits of the random tail that no other job's id holds.
    fragment = next(
        piece
        for piece in (target[-12:][i : i + 8] for i in range(5))
        if not any(piece in other.replace("-", "") for other in ids if other != target)
    )
    await console.sign_in("dev", "#/jobs")
    await expect(rows(console)).to_have_count(20)
    search = console.page.get_by_label("Job id", exact=True)
    await search.fill(fragment.upper())
    await console.page.get_by_role("button", name="Apply filters").click()
    await expect(console.page).to_have_url(re.compile(rf"#/jobs\?id_contains={fragment.upper()}$"))
    await expect(rows(console)).to_have_count(1)
    assert await row_values(console, "data-job") == [target]
    # The bulk actions take no id: they are not offered for a search.
    await expect(console.page.get_by_role("button", name="Cancel matching jobs")).to_have_count(0)

    # An id as the console shows it, pasted back with its ellipsis, and a whole id find it too.
    for written in (short_id(target), f" {target} "):
        await search.fill(written)
        await console.page.get_by_role("button", name="Apply filters").click()
        await expect(search).to_have_value(written.strip().lstrip("\u2026"))
        await expect(rows(console)).to_have_count(1)
        assert await row_values(console, "data-job") == [target]

    # What cannot be part of an id is refused in the form, without asking the server.
    asked = len(console.watch.api_requests)
    await search.fill("not-an-id")
    await console.page.get_by_role("button", name="Apply filters").click()
    assert "hex digits" in await search.evaluate("e => e.validationMessage")
    await expect(search).to_have_value("not-an-id")
    assert not [u for u in console.watch.api_requests[asked:] if "id_contains=not" in u]


async def test_job_detail_shows_everything_and_follows_the_job_live(client, console):
    job_id = await create_job(client, queue="emails", payload={"to": "ops@example.com"}, max_retries=4)
    await console.sign_in("dev", f"#/jobs/{job_id}")
    await expect(console.page.locator("#view h1")).to_contain_text(job_id)
    status = console.page.locator(".page-head .badge")
    await expect(status).to_have_text("pending")
    facts = console.page.locator("dl.facts")
    await expect(facts).to_contain_text("emails")
    await expect(facts).to_contain_text("0 of 4")
    await expect(console.page.locator("section", has_text="Payload").locator("pre")).to_contain_text(
        "ops@example.com"
    )
    created = facts.locator("div", has_text="Created").locator("time")
    assert await created.get_attribute("title")  # the absolute time on hover

    # Live through the job's SSE stream: leased (running), then completed with its result.
    worker_job, token = await lease_one(client, "emails")
    assert worker_job == job_id
    await expect(status).to_have_text("running")
    await complete(client, job_id, token, {"delivered": True})
    await expect(status).to_have_text("completed")
    await expect(console.page.locator("section", has_text="Result").locator("pre")).to_contain_text(
        "delivered"
    )
    await expect(console.page.locator(".live")).to_contain_text("Finished")
    await expect(console.page.get_by_role("button", name="Cancel job")).to_have_count(0)
    await console.screenshot("job")


async def test_cancel_job_button_asks_first_then_cancels(client, console):
    job_id = await create_job(client, queue="emails")
    await console.sign_in("dev", f"#/jobs/{job_id}")
    await console.page.get_by_role("button", name="Cancel job").click()
    # Going back changes nothing.
    await console.page.locator("dialog#confirm").get_by_role("button", name="Go back").click()
    assert (await job(client, job_id))["status"] == "pending"

    await console.page.get_by_role("button", name="Cancel job").click()
    await console.confirm("Cancel job")
    await wait_for_job_status(client, job_id, "cancelled")
    await expect(console.page.locator(".page-head .badge")).to_have_text("cancelled")


async def test_cancel_matching_jobs_cancels_the_filtered_jobs_only(client, console):
    bulk = await create_jobs(client, 5, "bulk")
    others = await create_jobs(client, 2, "emails")
    await console.sign_in("dev", "#/jobs?queue=bulk")
    await expect(rows(console)).to_have_count(5)
    await console.page.get_by_role("button", name="Cancel matching jobs").click()
    await console.confirm("Cancel matching jobs")
    await expect(console.page.locator(".toast", has_text="Cancelled 5 jobs.")).to_be_visible()
    for job_id in bulk:
        assert (await job(client, job_id))["status"] == "cancelled"
    for job_id in others:
        assert (await job(client, job_id))["status"] == "pending"
    await expect(rows(console).locator(".badge")).to_have_text(["cancelled"] * 5)


async def test_retry_job_button_runs_a_failed_job_again(client, console):
    job_id = await failed_job(client, client, "emails")
    await console.sign_in("dev", f"#/jobs/{job_id}")
    await expect(console.page.locator(".page-head .badge")).to_have_text("failed")
    await console.page.get_by_role("button", name="Retry job").click()
    await wait_for_job_status(client, job_id, "pending", "running")
    await expect(console.page.locator(".page-head .badge")).to_have_text("pending")


async def test_retry_matching_jobs_runs_the_filtered_failed_jobs_again(client, console):
    failed = [await failed_job(client, client, "emails") for _ in range(3)]
    kept = await failed_job(client, client, "imports")
    await console.sign_in("dev", "#/jobs?status=failed&queue=emails")
    await expect(rows(console)).to_have_count(3)
    await console.page.get_by_role("button", name="Retry matching jobs").click()
    await console.confirm("Retry matching jobs")
    for job_id in failed:
        await wait_for_job_status(client, job_id, "pending", "running")
    assert (await job(client, kept))["status"] == "failed"
    await expect(console.page.locator(".toast", has_text="Queued 3 jobs to run again.")).to_be_visible()


# --- workflows -------------------------------------------------------------------------------------

WORKFLOW = {
    "name": "nightly-etl",
    "steps": [
        {"name": "fetch", "task_name": "fetch", "queue": "etl"},
        {"name": "parse", "task_name": "parse", "queue": "etl", "depends_on": ["fetch"]},
        {"name": "enrich", "task_name": "enrich", "queue": "etl", "depends_on": ["fetch"]},
        {"name": "store", "task_name": "store", "queue": "etl", "depends_on": ["parse", "enrich"]},
        {"name": "notify", "task_name": "notify", "queue": "etl", "depends_on": ["fetch", "store"]},
    ],
}


async def _steps(client, wf_id: str) -> dict[str, dict]:
    return {s["name"]: s for s in (await call(client, "GET", f"/api/v1/workflows/{wf_id}/steps"))["steps"]}


async def _workflow(client, wf_id: str) -> dict:
    return await call(client, "GET", f"/api/v1/workflows/{wf_id}")


async def _lease_step(client, wf_id: str, step: str) -> tuple[str, str]:
    """Lease the job of `step` from the `etl` queue: (job id, lease token)."""
    step_job = (await eventually(lambda: _step_with_job(client, wf_id, step), timeout=15))["job_id"]
    job_id, token = await lease_one(client, "etl")
    assert job_id == step_job, f"leased {job_id}, expected the job of {step}"
    return job_id, token


async def _step_with_job(client, wf_id: str, step: str) -> dict | None:
    state = (await _steps(client, wf_id))[step]
    return state if state.get("job_id") else None


async def test_workflow_graph_is_drawn_coloured_by_step_state_and_updates_live(client, console):
    wf_id = (await call(client, "POST", "/api/v1/workflows", WORKFLOW))["workflow_id"]
    await console.sign_in("dev", f"#/workflows/{wf_id}")
    await expect(console.page.locator("#view h1")).to_have_text("Workflow nightly-etl")
    nodes = console.page.locator("#graph-panel svg [data-step]")
    await expect(nodes).to_have_count(5)
    await expect(console.page.locator("#graph-panel svg path.edge")).to_have_count(6)

    async def node_status(step: str):
        return console.page.locator(f'#graph-panel svg [data-step="{step}"]')

    fetch_job, token = await _lease_step(client, wf_id, "fetch")
    steps = await _steps(client, wf_id)
    for name, state in steps.items():
        await expect(await node_status(name)).to_have_attribute("data-status", state["status"])

    # fetch completes: the graph follows through the workflow's SSE stream.
    await complete(client, fetch_job, token, {"rows": 42})
    await expect(await node_status("fetch")).to_have_attribute("data-status", "completed")
    await expect(await node_status("fetch")).to_have_class(re.compile(r"\bst-completed\b"))
    await eventually(lambda: _step_with_job(client, wf_id, "parse"), timeout=15)
    parse_state = (await _steps(client, wf_id))["parse"]["status"]
    await expect(await node_status("parse")).to_have_attribute("data-status", parse_state)
    await console.screenshot("workflow")

    # The Mermaid text is the fallback view.
    await console.page.get_by_role("button", name="Mermaid text").click()
    await expect(console.page.locator("#mermaid-text")).to_contain_text("graph TD")
    await expect(console.page.locator("#mermaid-text")).to_contain_text("fetch --> parse")
    await console.page.get_by_role("button", name="Graph").click()
    await expect(console.page.locator("#graph-panel")).to_be_visible()

    # A step's node links to its job, whose page links back to the workflow.
    await console.page.locator('#graph-panel svg a[data-step="fetch"]').click()
    await expect(console.page.locator("#view h1")).to_contain_text(fetch_job)
    await console.page.locator("dl.facts").get_by_role("link", name=short_id(wf_id)).click()
    await expect(console.page.locator("#view h1")).to_have_text("Workflow nightly-etl")

    # The list shows it too.
    await console.go("#/workflows")
    await expect(console.page.locator(f'tr[data-workflow="{wf_id}"]')).to_contain_text("nightly-etl")


async def test_workflow_view_shows_what_sleeping_and_waiting_steps_wait_for(client, console):
    body = {
        "name": "patient",
        "context": {"order": 7},
        "steps": [
            {"name": "cool-off", "sleep_secs": 3600},
            {
                "name": "approval",
                "wait_for_event": {"key": "approval:{{context.order}}"},
                "timeout_secs": 600,
            },
        ],
    }
    wf_id = (await call(client, "POST", "/api/v1/workflows", body))["workflow_id"]
    await console.sign_in("dev", f"#/workflows/{wf_id}")
    sleeping = console.page.locator('tr[data-step="cool-off"]')
    await expect(sleeping.locator("[data-wakes]")).to_contain_text("sleeping · wakes")
    waiting = console.page.locator('tr[data-step="approval"]')
    await expect(waiting.locator("[data-waiting] code")).to_have_text("approval:7")
    await expect(waiting.locator("[data-wakes]")).to_contain_text("times out")

    sent = await call(
        client, "POST", "/api/v1/events", {"key": "approval:7", "payload": {"ok": True}}, expect=(202,)
    )
    assert sent["delivered"] == 1
    await expect(waiting.locator(".badge")).to_have_text("completed")  # live, over the workflow's stream
    await expect(waiting.locator("[data-waiting]")).to_have_count(0)


async def test_workflow_retry_and_cancel_buttons(client, console):
    wf_id = (await call(client, "POST", "/api/v1/workflows", WORKFLOW))["workflow_id"]
    fetch_job, token = await _lease_step(client, wf_id, "fetch")
    await fail(client, fetch_job, token, "upstream 503")
    await eventually(lambda: _workflow_status(client, wf_id, "failed"), timeout=15)

    await console.sign_in("dev", f"#/workflows/{wf_id}")
    status = console.page.locator(".page-head .badge")
    await expect(status).to_have_text("failed")
    await expect(console.page.locator('#graph-panel svg [data-step="fetch"]')).to_have_attribute(
        "data-status", "failed"
    )
    await expect(console.page.locator("tr[data-step=fetch]")).to_contain_text("upstream 503")
    await expect(console.page.get_by_role("button", name="Cancel workflow")).to_have_count(0)

    await console.page.get_by_role("button", name="Retry workflow").click()
    await eventually(lambda: _workflow_status(client, wf_id, "running"), timeout=15)
    await expect(status).to_have_text("running")

    await console.page.get_by_role("button", name="Cancel workflow").click()
    await console.confirm("Cancel workflow")
    await eventually(lambda: _workflow_status(client, wf_id, "cancelled"), timeout=15)
    await expect(status).to_have_text("cancelled")
    await expect(console.page.locator('#graph-panel svg [data-step="notify"]')).to_have_attribute(
        "data-status", "cancelled"
    )


async def _workflow_status(client, wf_id: str, status: str) -> bool:
    return (await _workflow(client, wf_id))["status"] == status


# --- dead letters ----------------------------------------------------------------------------------


async def test_dead_letters_list_detail_replay_one_and_replay_by_filter(client, console):
    for _ in range(2):
        await failed_job(client, client, "emails", "smtp 550: mailbox unavailable")
    for _ in range(2):
        await failed_job(client, client, "imports", "csv row 7: bad date")
    entries = await dead_letters(client)
    assert len(entries) == 4
    by_queue = {q: [e["id"] for e in entries if e["queue_name"] == q] for q in ("emails", "imports")}

    await console.sign_in("dev", "#/dlq")
    await console.heading("Dead letters")
    await expect(rows(console)).to_have_count(4)
    await expect(rows(console).first).to_contain_text("csv row 7")
    await console.screenshot("dead-letters")

    # Each entry shows the job it came from, linked to it.
    for entry in entries:
        cell = console.page.locator(f'tr[data-dead-letter="{entry["id"]}"] td[data-col="job"]')
        await expect(cell.get_by_role("link")).to_have_text(short_id(entry["job_id"]))
        await expect(cell.get_by_role("link")).to_have_attribute("title", entry["job_id"])
    newest = entries[0]
    await console.page.locator(f'tr[data-dead-letter="{newest["id"]}"] td[data-col="job"] a').click()
    await console.heading(f"Job {newest['job_id']}")
    await expect(console.page.locator(".page-head .badge")).to_have_text("failed")
    await console.page.go_back()
    await console.heading("Dead letters")
    # The entry's page names the job whole, and links to it too.
    await console.go(f"#/dlq/{newest['id']}")
    await console.heading(f"Dead letter #{newest['id']}")
    job_fact = console.page.locator(
        "dl.facts > div", has=console.page.locator("dt", has_text=re.compile("^Job$"))
    )
    await expect(job_fact.get_by_role("link")).to_have_text(newest["job_id"])
    await job_fact.get_by_role("link").click()
    await console.heading(f"Job {newest['job_id']}")
    await console.go("#/dlq")
    await expect(rows(console)).to_have_count(4)

    # Replay one from the list.
    first = by_queue["emails"][0]
    row = console.page.locator(f'tr[data-dead-letter="{first}"]')
    await row.get_by_role("button", name="Replay").click()
    await expect(row.get_by_role("link", name=re.compile(r"^job "))).to_be_visible()
    replayed = await call(client, "GET", f"/api/v1/dlq/{first}")
    assert replayed["replayed_at"] and replayed["replay_job_id"]

    # Replay one from its detail page.
    second = by_queue["emails"][1]
    await console.go(f"#/dlq/{second}")
    await console.heading(f"Dead letter #{second}")
    await expect(console.page.locator("pre.error")).to_have_text("smtp 550: mailbox unavailable")
    await expect(console.page.locator("section", has_text="Payload").locator("pre")).to_contain_text(
        "ops@example"
    )
    await console.page.get_by_role("button", name="Replay dead letter").click()
    await expect(console.page.locator("dl.facts")).to_contain_text("Replayed as")
    assert (await call(client, "GET", f"/api/v1/dlq/{second}"))["replay_job_id"]

    # Replay many: the filtered ones only.
    await console.go("#/dlq?queue=imports")
    await expect(rows(console)).to_have_count(2)
    await console.page.get_by_role("button", name="Replay matching dead letters").click()
    await console.confirm("Replay matching dead letters")
    await expect(console.page.locator(".toast", has_text="Replayed 2 dead letters.")).to_be_visible()
    for entry in by_queue["imports"]:
        assert (await call(client, "GET", f"/api/v1/dlq/{entry}"))["replay_job_id"]
    await expect(rows(console).get_by_role("link", name=re.compile(r"^job "))).to_have_count(2)


async def test_ten_thousand_dead_letters_are_paged_not_loaded(client, console, database_url):
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """
            WITH failed AS (
                INSERT INTO queueflow.jobs (id, queue_name, task_name, config, status, tenant_id, error_message)
                SELECT gen_random_uuid(), 'imports', 'import_row', '{}', 'failed', 'tenant1', 'bad row ' || g
                FROM generate_series(1, 10000) AS g
                RETURNING id, queue_name, task_name, tenant_id, error_message
            )
            INSERT INTO queueflow.dead_letters (job_id, queue_name, task_name, reason, error_message, tenant_id)
            SELECT id, queue_name, task_name, 'non_retryable', error_message, tenant_id FROM failed
            """
        )
    finally:
        await conn.close()

    await console.sign_in("dev", "#/dlq")
    await expect(rows(console)).to_have_count(50)
    seen = set(await row_values(console, "data-dead-letter"))
    for _ in range(2):
        top = await rows(console).first.get_attribute("data-dead-letter")
        await console.page.get_by_role("button", name="Next page").click()
        await expect(rows(console).first).not_to_have_attribute("data-dead-letter", top or "")
        await expect(rows(console)).to_have_count(50)
        page_ids = set(await row_values(console, "data-dead-letter"))
        assert not page_ids & seen
        seen |= page_ids
    # The page answers at once, and never asked for the whole list or a count.
    assert await console.page.evaluate("document.querySelectorAll('#view tbody tr').length") == 50
    dlq_requests = [u for u in console.watch.api_requests if "/api/v1/dlq" in u]
    assert dlq_requests and all("limit=50" in u for u in dlq_requests)
    assert not [u for u in console.watch.api_requests if "include_total" in u]


# --- cron, tasks -----------------------------------------------------------------------------------


async def test_cron_view_creates_pauses_resumes_and_deletes_a_schedule(client, console):
    await console.sign_in("dev", "#/cron")
    await console.heading("Cron schedules")
    await console.page.get_by_text("New schedule").click()
    await console.page.get_by_label("Name", exact=True).fill("nightly-report")
    await console.page.get_by_label("Cron expression", exact=True).fill("15 3 * * *")
    await console.page.get_by_label("Task", exact=True).fill("echo")
    await console.page.get_by_label("Payload (JSON object, optional)", exact=True).fill('{"report": "daily"}')
    await console.page.get_by_role("button", name="Create schedule").click()

    row = console.page.locator('tr[data-cron="nightly-report"]')
    await expect(row.locator("code")).to_have_text("15 3 * * *")
    crons = (await call(client, "GET", "/api/v1/cron"))["crons"]
    assert [(c["name"], c["cron_expr"], c["payload"]) for c in crons] == [
        ("nightly-report", "15 3 * * *", {"report": "daily"})
    ]
    cron = crons[0]
    next_firing = row.locator("time").first
    shown = await next_firing.get_attribute("datetime")
    assert datetime.fromisoformat(shown.replace("Z", "+00:00")) == datetime.fromisoformat(
        cron["next_run_at"].replace("Z", "+00:00")
    )
    assert await next_firing.get_attribute("title")

    # The server's validation message is shown as it is.
    console.watch.allow(400, "/api/v1/cron")
    await console.page.get_by_label("Name", exact=True).fill("broken")
    await console.page.get_by_label("Cron expression", exact=True).fill("every tuesday")
    await console.page.get_by_label("Task", exact=True).fill("echo")
    await console.page.get_by_role("button", name="Create schedule").click()
    await expect(console.page.locator("details.create [role=alert]")).to_contain_text("cron")
    await console.page.get_by_label("Name", exact=True).fill("")
    await console.screenshot("cron")

    await row.get_by_role("button", name="Pause schedule").click()
    await expect(row.locator(".badge")).to_have_text("paused")
    assert (await call(client, "GET", f"/api/v1/cron/{cron['id']}"))["enabled"] is False
    await row.get_by_role("button", name="Resume schedule").click()
    await expect(row.locator(".badge")).to_have_text("active")
    assert (await call(client, "GET", f"/api/v1/cron/{cron['id']}"))["enabled"] is True

    await row.get_by_role("button", name="Delete schedule").click()
    await console.confirm("Delete schedule")
    await expect(console.page.locator("#view .empty")).to_have_text("No cron schedules yet.")
    await call(client, "GET", f"/api/v1/cron/{cron['id']}", expect=(404,))


async def test_cron_view_creates_a_schedule_in_a_time_zone_and_shows_its_next_firing_on_that_clock(
    client, console
):
    await console.sign_in("dev", "#/cron")
    await console.heading("Cron schedules")
    await console.page.get_by_text("New schedule").click()
    await console.page.get_by_label("Name", exact=True).fill("berlin-report")
    await console.page.get_by_label("Cron expression", exact=True).fill("0 9 * * *")
    await console.page.get_by_label("Task", exact=True).fill("echo")
    await console.page.get_by_label("Time zone (optional)", exact=True).fill("Europe/Berlin")
    await console.page.get_by_role("button", name="Create schedule").click()

    row = console.page.locator('tr[data-cron="berlin-report"]')
    await expect(row.locator("code")).to_have_text("0 9 * * *")  # created (the list shows it)
    cron = (await call(client, "GET", "/api/v1/cron"))["crons"][0]
    assert cron["timezone"] == "Europe/Berlin"
    local = cron["next_run_local"]
    assert local[11:16] == "09:00"
    await expect(row.locator("[data-local]")).to_have_text(f"{local[:10]} 09:00 Europe/Berlin")

    console.watch.allow(400, "/api/v1/cron")
    await console.page.get_by_label("Name", exact=True).fill("nowhere")
    await console.page.get_by_label("Cron expression", exact=True).fill("0 9 * * *")
    await console.page.get_by_label("Task", exact=True).fill("echo")
    await console.page.get_by_label("Time zone (optional)", exact=True).fill("Nowhere/Town")
    await console.page.get_by_role("button", name="Create schedule").click()
    await expect(console.page.locator("details.create [role=alert]")).to_contain_text("Nowhere/Town")


async def test_limits_view_sets_shows_live_figures_and_deletes_a_limit(client, console):
    await console.sign_in("dev", "#/limits")
    await console.heading("Limits")
    await expect(console.page.locator("#view .empty")).to_have_text("No limits yet: every key is unlimited.")
    await console.page.get_by_text("Set a limit").click()
    await console.page.get_by_label("Key", exact=True).fill("customer:*")
    await console.page.get_by_label("Concurrency (optional)", exact=True).fill("2")
    await console.page.get_by_role("button", name="Set limit").click()
    row = console.page.locator('tr[data-limit="customer:*"]')
    await expect(row.locator('[data-col="concurrency"]')).to_have_text("2")
    await expect(row.locator('[data-col="running"]')).to_have_text("0")
    assert (await call(client, "GET", "/api/v1/limits/customer:*"))["concurrency"] == 2

    # a leased job of a governed key shows as running (the view polls)
    await call(
        client,
        "POST",
        "/api/v1/jobs/batch",
        {"jobs": [{"task_name": "t", "config": {"queue": "lim", "limits": ["customer:1"]}}] * 3},
        expect=(201,),
    )
    leased = await call(client, "POST", "/api/v1/queues/lim/lease", {"max_jobs": 10})
    assert len(leased["jobs"]) == 2  # the policy the console set holds
    await expect(row.locator('[data-col="running"]')).to_have_text("2", timeout=15_000)

    # the server's validation message is shown as it is
    console.watch.allow(400, "/api/v1/limits/")
    await console.page.get_by_label("Key", exact=True).fill("nothing")
    await console.page.get_by_role("button", name="Set limit").click()
    await expect(console.page.locator("details.create [role=alert]")).to_contain_text("concurrency, a rate")

    await row.get_by_role("button", name="Delete limit").click()
    await console.confirm("Delete limit")
    await expect(console.page.locator("#view .empty")).to_have_text("No limits yet: every key is unlimited.")
    await call(client, "GET", "/api/v1/limits/customer:*", expect=(404,))


async def test_tasks_view_lists_the_in_process_tasks(console):
    await console.sign_in("dev", "#/tasks")
    await console.heading("Tasks")
    await expect(console.page.locator("#view tbody tr code")).to_have_text(
        ["echo", "fail", "log", "sleep"], timeout=30_000
    )
    await console.page.locator('tr[data-task="fail"]').get_by_role("link", name="Failed").click()
    await expect(console.page).to_have_url(re.compile(r"#/jobs\?task_name=fail&status=failed$"))
    await console.heading("Jobs")


# --- links, errors, keyboard, narrow screens -------------------------------------------------------


async def test_every_deep_link_shows_its_view_and_a_reload_shows_it_again(client, console):
    job_id = await failed_job(client, client, "emails")
    entry = (await dead_letters(client))[0]["id"]
    wf_id = (await call(client, "POST", "/api/v1/workflows", WORKFLOW))["workflow_id"]
    links = {  # link: (heading, screenshot)
        "#/": ("Overview", "view-overview"),
        "#/queues": ("Queues", "view-queues"),
        "#/jobs": ("Jobs", "view-jobs"),
        "#/jobs?status=failed&queue=emails": ("Jobs", "view-jobs-failed"),
        f"#/jobs/{job_id}": (f"Job {job_id}", "view-job"),
        "#/workflows": ("Workflows", "view-workflows"),
        f"#/workflows/{wf_id}": ("Workflow nightly-etl", "view-workflow"),
        "#/dlq": ("Dead letters", "view-dead-letters"),
        f"#/dlq/{entry}": (f"Dead letter #{entry}", "view-dead-letter"),
        "#/cron": ("Cron schedules", "view-cron"),
        "#/tasks": ("Tasks", "view-tasks"),
    }
    await console.sign_in("dev")
    for link, (title, screenshot) in links.items():
        await console.open(link)
        await console.heading(title)
        await console.page.reload()
        await console.heading(title)
        await expect(
            console.page.locator("#view table:visible, #view .empty:visible, #view dl.facts:visible").first
        ).to_be_visible()
        await console.screenshot(screenshot)
    # The filters of a link are the view's filters.
    await console.open("#/jobs?status=failed&queue=emails")
    await expect(console.page.get_by_label("Status", exact=True)).to_have_value("failed")
    await expect(rows(console)).to_have_count(1)


async def test_api_errors_show_the_servers_message(client, console):
    console.watch.allow(404, "/api/v1/jobs/")
    console.watch.allow(404, "/api/v1/workflows/")
    await console.sign_in("dev", "#/jobs/00000000-0000-4000-8000-000000000000")
    await expect(console.page.locator(".error-panel")).to_contain_text(
        "job not found: 00000000-0000-4000-8000-000000000000"
    )
    await console.go("#/workflows/no-such-workflow")
    await expect(console.page.locator(".error-panel")).to_contain_text("workflow not found: no-such-workflow")
    await console.go("#/nowhere")
    await console.heading("Nothing here")


async def test_keyboard_shortcuts_move_between_views(console):
    await console.sign_in("dev")
    await console.heading("Overview")
    await console.page.keyboard.press("g")
    await console.page.keyboard.press("j")
    await console.heading("Jobs")
    await expect(console.page.locator("#view .empty")).to_have_text("No jobs match.")
    await console.page.keyboard.press("/")
    await expect(console.page.get_by_label("Job id", exact=True)).to_be_focused()
    await console.page.evaluate("document.activeElement.blur()")
    await console.page.keyboard.press("?")
    await expect(console.page.locator("dialog#shortcuts")).to_be_visible()
    await console.page.keyboard.press("Escape")
    await expect(console.page.locator("dialog#shortcuts")).to_be_hidden()
    await console.page.keyboard.press("g")
    await console.page.keyboard.press("d")
    await console.heading("Dead letters")


# Elements that stick out of the screen on the right (tables scroll inside their wrapper: left out).
WIDER_THAN_THE_SCREEN = """() => [...document.querySelectorAll("body *")]
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest(".table-wrap"))
    .slice(0, 8).map(e => `${e.tagName}.${e.className}`)"""


async def test_narrow_screen_has_no_sideways_scrolling(client, server, open_console):
    await create_jobs(client, 3, "emails")
    narrow = await open_console(server.base_url, viewport={"width": 390, "height": 844})
    await narrow.sign_in("dev", "#/jobs")
    await expect(rows(narrow)).to_have_count(3)
    for link in ("#/", "#/queues", "#/jobs", "#/workflows", "#/dlq", "#/cron", "#/tasks"):
        await narrow.go(link)
        await expect(narrow.page.locator("#view table:visible, #view .empty:visible").first).to_be_visible()
        overflow = await narrow.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        wide = await narrow.page.evaluate(WIDER_THAN_THE_SCREEN) if overflow > 0 else []
        assert overflow <= 0, f"{link} is {overflow}px wider than the screen: {wide}"
    await expect(narrow.page.locator("#nav").get_by_role("link", name="Dead letters")).to_be_visible()
    await narrow.go("#/")
    await narrow.heading("Overview")
    await narrow.screenshot("narrow-overview")
