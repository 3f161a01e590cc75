"""The console by role (docs/access.md): a viewer sees no action, an operator cancels a job but is
shown no worker-key minting (and the API refuses it), an admin mints a worker key, and each action
shows in the audit view with its actor."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import expect

from shared.domain.access import key_id
from tests.console.helpers import READ_ONLY_BUTTONS, call, create_job, job

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(180)]

CREDENTIALS = ["--api-keys", "v:acme:viewer,o:acme:operator,a:acme:admin", "--worker-token", "w"]


@pytest.fixture
async def server(database_url, service):
    return await service(database_url, mode="all", dev=False, extra_args=CREDENTIALS)


async def _buttons(console) -> set[str]:
    return set(await console.page.locator("#view button").all_inner_texts())


async def test_a_viewer_sees_no_action_buttons(server, open_console, http):
    admin = await http(server.base_url, "a")
    pending = await create_job(admin)
    console = await open_console(server.base_url)
    await console.sign_in("v")
    await expect(console.page.locator("#identity-access")).to_have_text("viewer")
    await expect(console.page.locator('#nav a[data-view="audit"]')).to_be_hidden()
    for link in (f"#/jobs/{pending}", "#/jobs", "#/queues", "#/worker-keys", "#/limits", "#/cron"):
        await console.go(link)
        await expect(console.page.locator("#view table, #view .empty, #view dl.facts").first).to_be_visible()
        assert await _buttons(console) <= READ_ONLY_BUTTONS, link
        assert await console.page.locator("#view details.create").count() == 0, link


async def test_an_operator_cancels_a_job_but_is_offered_no_worker_key_and_is_refused_one(
    server, open_console, http
):
    admin = await http(server.base_url, "a")
    pending = await create_job(admin)
    console = await open_console(server.base_url)
    await console.sign_in("o", f"#/jobs/{pending}")
    await expect(console.page.locator("#identity-access")).to_have_text("operator")
    await console.page.get_by_role("button", name="Cancel job").click()
    await console.page.locator("#confirm-yes").click()
    await expect(console.page.locator("#view")).to_contain_text("cancelled")
    assert (await job(admin, pending))["status"] == "cancelled"

    await console.go("#/worker-keys")
    await console.heading("Worker keys")
    await expect(console.page.locator("#view .empty")).to_be_visible()
    assert await console.page.get_by_text("Mint a worker key").count() == 0
    assert "Revoke key" not in await _buttons(console)
    await expect(console.page.locator('#nav a[data-view="audit"]')).to_be_hidden()

    operator = await http(server.base_url, "o")
    refused = await call(operator, "POST", "/api/v1/worker-keys", {"name": "w"}, expect=(403,))
    assert "needs the admin role" in refused["error"]


async def test_an_admin_mints_a_worker_key_cancels_and_sees_both_in_the_audit_view(
    server, open_console, http
):
    admin = await http(server.base_url, "a")
    pending = await create_job(admin)
    console = await open_console(server.base_url)
    await console.sign_in("a", f"#/jobs/{pending}")
    await expect(console.page.locator("#identity-access")).to_have_text("admin")
    await expect(console.page.get_by_role("button", name="Cancel job")).to_be_visible()

    await console.go("#/worker-keys")
    await console.page.get_by_text("Mint a worker key").click()
    await console.page.get_by_label("Name", exact=True).fill("billing")
    await console.page.get_by_role("button", name="Mint worker key").click()
    token = console.page.locator("[data-token]")
    await expect(token).to_have_text(re.compile(r"^\S{20,}$"))
    keys = (await call(admin, "GET", "/api/v1/worker-keys"))["worker_keys"]
    assert [k["name"] for k in keys] == ["billing"]
    await expect(console.page.locator(f'tr[data-worker-key="{keys[0]["id"]}"]')).to_be_visible()

    operator = await http(server.base_url, "o")
    await call(operator, "POST", f"/api/v1/jobs/{pending}/cancel")

    await expect(console.page.locator('#nav a[data-view="audit"]')).to_be_visible()
    await console.go("#/audit")
    await console.heading("Audit log")
    minted = console.page.locator('#view tr[data-action="createWorkerKey"]')
    cancelled = console.page.locator('#view tr[data-action="cancelJob"]')
    await expect(minted.locator('[data-col="actor"]')).to_contain_text(f"key:{key_id('a')}")
    await expect(minted.locator('[data-col="role"]')).to_have_text("admin")
    await expect(cancelled.locator('[data-col="actor"]')).to_contain_text(f"key:{key_id('o')}")
    await expect(cancelled.locator('[data-col="role"]')).to_have_text("operator")
    assert keys[0]["id"] in await minted.inner_text()
    await console.screenshot("audit-log")
