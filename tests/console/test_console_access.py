"""Signing in to the console against a server with real credentials (no --dev): the token in
sessionStorage only, sent as a bearer token; a 401 brings the sign-in back; a read-only credential
sees every view and no action. And /docs: Swagger UI running from this server alone."""

from __future__ import annotations

import json
import re

import pytest
from playwright.async_api import Route, expect

from tests.console.helpers import READ_ONLY_BUTTONS, call, create_job, dead_letters, failed_job

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(180)]

CREDENTIALS = ["--api-keys", "rw:acme,ro:acme:ro", "--worker-token", "w"]


@pytest.fixture
async def server(database_url, service):
    return await service(database_url, mode="all", dev=False, extra_args=CREDENTIALS)


@pytest.fixture
async def console(server, open_console):
    return await open_console(server.base_url)


async def stored_token(console) -> str | None:
    return await console.page.evaluate("sessionStorage.getItem('queueflow.token')")


async def test_sign_in_keeps_the_token_in_session_storage_only_and_sends_it_as_a_bearer_token(console):
    page = console.page
    console.watch.allow(401, "/api/v1/whoami")
    await console.open("#/jobs?queue=emails")
    await expect(page.get_by_role("heading", name="Sign in to the QueueFlow console")).to_be_visible()
    await expect(page.locator("#nav")).to_be_hidden()

    # A token the server does not know: a clear message, nothing kept.
    await page.get_by_label("Tenant token", exact=True).fill("not-a-key")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#signin-message")).to_have_text(
        "The server did not accept the token: unauthorized. Sign in again."
    )
    assert await stored_token(console) is None

    await page.get_by_label("Tenant token", exact=True).fill("rw")
    await page.get_by_role("button", name="Sign in").click()
    # The deep link the operator opened is the view shown after signing in.
    await console.heading("Jobs")
    await expect(page.get_by_label("Queue", exact=True)).to_have_value("emails")
    await expect(page.locator("#identity")).to_contain_text("Tenant acme")
    await expect(page.locator("#identity-access")).to_have_text("admin")
    assert await stored_token(console) == "rw"
    assert await page.evaluate("localStorage.length") == 0
    assert await page.evaluate("document.cookie") == ""
    assert await page.context.cookies(console.base_url) == []
    assert console.watch.authorizations == {"Bearer not-a-key", "Bearer rw"}

    # A reload keeps the session (and the view); signing out forgets the token.
    await page.reload()
    await console.heading("Jobs")
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_role("heading", name="Sign in to the QueueFlow console")).to_be_visible()
    assert await stored_token(console) is None
    await console.screenshot("sign-in")


async def test_a_401_while_in_use_brings_the_sign_in_back_with_the_reason(console):
    page = console.page
    await console.sign_in("rw", "#/queues")
    await console.heading("Queues")

    # The credential stops working (an expired JWT, a key removed from the server).
    async def expired(route: Route) -> None:
        body = {"error": "unauthorized", "timestamp": "2026-01-01T00:00:00Z"}
        await route.fulfill(status=401, content_type="application/json", body=json.dumps(body))

    console.watch.allow(401, "/api/v1/")
    await page.route("**/api/v1/**", expired)
    await console.go("#/jobs")
    await expect(page.locator("#signin-message")).to_have_text(
        "The server did not accept the token: unauthorized. Sign in again."
    )
    await expect(page.get_by_label("Tenant token", exact=True)).to_be_focused()
    assert await stored_token(console) is None
    await page.unroute("**/api/v1/**", expired)

    # Signing in again returns to the same view.
    await page.get_by_label("Tenant token", exact=True).fill("rw")
    await page.get_by_role("button", name="Sign in").click()
    await console.heading("Jobs")


async def test_a_stored_token_that_no_longer_works_asks_for_a_new_one_on_load(console):
    console.watch.allow(401, "/api/v1/whoami")
    await console.sign_in("rw", "#/cron")
    await console.page.evaluate("sessionStorage.setItem('queueflow.token', 'revoked-key')")
    await console.page.reload()
    await expect(console.page.locator("#signin-message")).to_contain_text("did not accept the token")
    assert await stored_token(console) is None


async def test_read_only_credential_sees_every_view_and_no_action(server, console, http):
    rw = await http(server.base_url, "rw")
    worker = await http(server.base_url, "w")
    pending = await create_job(rw, queue="emails")
    failed = await failed_job(rw, worker, "imports")
    entry = (await dead_letters(rw))[0]["id"]
    workflow = {
        "name": "ro-check",
        "steps": [
            {"name": "a", "task_name": "a", "queue": "etl"},
            {"name": "b", "task_name": "b", "queue": "etl", "depends_on": ["a"]},
        ],
    }
    wf_id = (await call(rw, "POST", "/api/v1/workflows", workflow))["workflow_id"]
    await call(rw, "POST", "/api/v1/cron", {"name": "hourly", "cron_expr": "0 * * * *", "task_name": "echo"})
    await call(rw, "POST", "/api/v1/queues/emails/pause")

    await console.sign_in("ro")
    await expect(console.page.locator("#identity-access")).to_have_text("viewer")
    content = "#view table, #view .empty, #view dl.facts, #view .backlog"
    for link in [
        "#/",
        "#/queues",
        "#/jobs",
        f"#/jobs/{pending}",
        f"#/jobs/{failed}",
        "#/workflows",
        f"#/workflows/{wf_id}",
        "#/dlq",
        f"#/dlq/{entry}",
        "#/cron",
        "#/tasks",
    ]:
        await console.go(link)
        await expect(console.page.locator(content).first).to_be_visible()
        if link.startswith("#/workflows/"):
            await expect(console.page.locator("#graph-panel svg [data-step]")).to_have_count(2)
        if link in ("#/queues", "#/dlq", "#/cron"):
            await expect(console.page.locator("#view tbody tr").first).to_be_visible()
        buttons = set(await console.page.locator("#view button").all_inner_texts())
        assert buttons <= READ_ONLY_BUTTONS, f"{link} shows actions to a read-only credential: {buttons}"
        assert (
            await console.page.locator("#view details.create, #view [role=group][aria-label^=Bulk]").count()
            == 0
        )
    await console.go("#/queues")
    await expect(console.page.locator('tr[data-queue="emails"] .badge')).to_have_text("paused")
    await console.screenshot("read-only-queues")

    # The server refuses anyway.
    ro = await http(server.base_url, "ro")
    refused = await call(ro, "POST", f"/api/v1/jobs/{pending}/cancel", expect=(403,))
    assert refused["error"].startswith("access denied")


async def test_docs_page_runs_swagger_ui_from_this_server_alone(server, console):
    page = console.page
    await page.goto(f"{server.base_url}/docs")
    tasks = page.locator(
        ".opblock", has=page.locator(".opblock-summary-path", has_text=re.compile(r"^/api/v1/tasks$"))
    )
    await expect(tasks).to_be_visible()
    await expect(page.locator(".servers select")).to_contain_text(server.base_url)
    assert f"{server.base_url}/openapi.json" in console.watch.requests

    # "Try it out" calls this server (the page names it as the server): no token, so a 401.
    console.watch.allow(401, "/api/v1/tasks")
    await tasks.locator(".opblock-summary").click()
    await tasks.get_by_role("button", name="Try it out").click()
    await tasks.get_by_role("button", name="Execute").click()
    await expect(tasks.locator(".live-responses-table .response .response-col_status")).to_contain_text("401")
    assert f"{server.base_url}/api/v1/tasks" in console.watch.requests
    await console.screenshot("docs", full_page=False)
