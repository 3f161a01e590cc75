"""Roles through single sign-on, end to end in headless Chromium against the real provider (the
issue's scenario; docs/access.md): a viewer signs in and is offered no action on any page; an
operator cancels a job through the console, is offered no worker-key minting, and the API refuses
them one (403, naming the admin role) when the session asks anyway; an admin mints a worker key,
its token shown once; and the admin's audit view, like GET /api/v1/audit, shows each of those
changes with its actor (`oidc:<sub>`), name, role and outcome."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import expect

from tests.console.helpers import READ_ONLY_BUTTONS, call, create_job, dead_letters, failed_job, job
from tests.oidc.browser import allow_provider, sign_in_with_sso, sign_out
from tests.oidc.provider import USERS

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(300)]

VIEWER, OPERATOR, ADMIN = USERS["viewer"], USERS["operator"], USERS["admin"]
# What a page shows once loaded: a table's first row, or a detail page's facts.
LOADED = "#view tbody tr, #view dl.facts"
# The forms and bulk-action bars only a role that may change things is shown.
ACTION_FORMS = "#view details.create, #view [role=group][aria-label^=Bulk]"


@pytest.fixture
async def server(oidc_server):
    # (push endpoints on loopback: the one endpoint here is never delivered to)
    return await oidc_server("--push-allow-cidrs", "127.0.0.0/8")


@pytest.fixture
async def client(server, http):
    """The tenant's read-write API key (an admin), to set the scene and to check effects."""
    return await http(server.base_url, "rw")


@pytest.fixture
async def console(server, provider, open_console):
    opened = await open_console(server.base_url)
    allow_provider(opened, provider)
    return opened


async def scene(client, worker) -> dict[str, str]:
    """Something on every page a role changes: a pending job, a dead letter, a cron schedule, a
    limit, a worker key and a push endpoint; the ids of what the pages are about."""
    pending = await create_job(client, queue="emails")
    await failed_job(client, worker, "imports")
    entry = (await dead_letters(client))[0]["id"]
    await call(
        client, "POST", "/api/v1/cron", {"name": "hourly", "cron_expr": "0 * * * *", "task_name": "echo"}
    )
    await call(client, "PUT", "/api/v1/limits/customer:*", {"concurrency": 2})
    await call(client, "POST", "/api/v1/worker-keys", {"name": "existing"})
    endpoint = await call(
        client,
        "POST",
        "/api/v1/push-endpoints",
        {"name": "hooks", "url": "http://127.0.0.1:9/hook", "queues": ["hooks"]},
    )
    return {"pending": pending, "entry": str(entry), "endpoint": endpoint["id"]}


def pages(ids: dict[str, str]) -> list[str]:
    return [
        "#/jobs",
        f"#/jobs/{ids['pending']}",
        "#/queues",
        "#/dlq",
        f"#/dlq/{ids['entry']}",
        "#/cron",
        "#/limits",
        "#/worker-keys",
        "#/push-endpoints",
        f"#/push-endpoints/{ids['endpoint']}",
    ]


async def actions_on(console, link: str) -> tuple[set[str], int]:
    """The buttons a page shows beyond the read-only ones, and how many action forms or bars."""
    await console.go(link)
    await expect(console.page.locator(LOADED).first).to_be_visible()
    buttons = set(await console.page.locator("#view button").all_inner_texts())
    return buttons - READ_ONLY_BUTTONS, await console.page.locator(ACTION_FORMS).count()


async def audit_entries(client, actor: str) -> list[dict[str, Any]]:
    return (await call(client, "GET", f"/api/v1/audit?actor={actor}"))["entries"]


async def test_each_role_sees_and_may_do_what_it_should_and_the_admin_audits_it_all(
    server, client, http, console, provider
):
    ids = await scene(client, await http(server.base_url, "w"))
    page = console.page

    # A viewer: every page, and not one action on any of them.
    await sign_in_with_sso(console, provider, VIEWER, "#/jobs")
    await expect(page.locator("#identity-access")).to_have_text("viewer")
    await expect(page.locator('#nav a[data-view="audit"]')).to_be_hidden()
    for link in pages(ids):
        assert await actions_on(console, link) == (set(), 0), f"{link} offers a viewer actions"
    await sign_out(console)

    # An operator: cancels the pending job through the console.
    await sign_in_with_sso(console, provider, OPERATOR, f"#/jobs/{ids['pending']}")
    await expect(page.locator("#identity-access")).to_have_text("operator")
    await page.get_by_role("button", name="Cancel job").click()
    await console.confirm("Cancel job")
    await expect(page.locator(".page-head .badge")).to_have_text("cancelled")
    assert (await job(client, ids["pending"]))["status"] == "cancelled"
    # ... is shown no way to mint a worker key (nor to revoke one) ...
    await console.go("#/worker-keys")
    await expect(page.locator("#view tr[data-worker-key]")).to_have_count(1)
    assert await page.get_by_text("Mint a worker key").count() == 0
    assert await actions_on(console, "#/worker-keys") == (set(), 0)
    # ... and when the session asks the API anyway, as the console sends its calls (the session
    # cookie and its CSRF token), the answer is 403 naming the role needed.
    console.watch.allow(403, "/api/v1/worker-keys")
    refused = await page.evaluate(
        """async () => {
          const session = await (await fetch("/ui/auth/session")).json();
          const resp = await fetch("/api/v1/worker-keys", { method: "POST",
            body: JSON.stringify({ name: "operators-own" }),
            headers: { "Content-Type": "application/json",
                       "X-CSRF-Token": session.session.csrf_token } });
          return { status: resp.status, body: await resp.json() };
        }"""
    )
    assert refused["status"] == 403, refused
    assert "needs the admin role" in refused["body"]["error"]
    assert "operator" in refused["body"]["error"]
    keys = (await call(client, "GET", "/api/v1/worker-keys"))["worker_keys"]
    assert [k["name"] for k in keys] == ["existing"]
    await sign_out(console)

    # An admin: is offered the actions the viewer was not, on every page ...
    await sign_in_with_sso(console, provider, ADMIN, "#/worker-keys")
    await expect(page.locator("#identity-access")).to_have_text("admin")
    for link in pages(ids):
        buttons, forms = await actions_on(console, link)
        assert buttons or forms, f"{link} offers an admin no action (so the viewer's check proves nothing)"
    # ... and mints a worker key, its token shown once.
    await console.go("#/worker-keys")
    await page.get_by_text("Mint a worker key").click()
    await page.get_by_label("Name", exact=True).fill("billing")
    await page.get_by_role("button", name="Mint worker key").click()
    token = page.locator("[data-token]")
    await expect(token).to_have_text(re.compile(r"^\S{20,}$"))
    keys = (await call(client, "GET", "/api/v1/worker-keys"))["worker_keys"]
    [minted] = [k for k in keys if k["name"] == "billing"]
    assert "token" not in minted
    await expect(page.locator(f'tr[data-worker-key="{minted["id"]}"]')).to_be_visible()
    await console.go("#/queues")
    await console.heading("Queues")
    await console.go("#/worker-keys")
    await expect(page.locator(f'tr[data-worker-key="{minted["id"]}"]')).to_be_visible()
    await expect(token).to_have_count(0)

    # The admin's audit view: each change, with who made it, their role and how it went.
    olga, ada = f"oidc:{OPERATOR.id}", f"oidc:{ADMIN.id}"
    await expect(page.locator('#nav a[data-view="audit"]')).to_be_visible()
    await console.go("#/audit")
    await console.heading("Audit log")
    rows = page.locator("#view tr[data-audit]")
    cancelled = rows.filter(has=page.locator('[data-col="action"]', has_text="cancelJob"))
    refused_row = rows.filter(has=page.locator('[data-col="actor"]', has_text=olga)).filter(
        has=page.locator('[data-col="action"]', has_text="createWorkerKey")
    )
    minted_row = rows.filter(has=page.locator('[data-col="actor"]', has_text=ada))
    await expect(cancelled).to_have_count(1)
    await expect(cancelled.locator('[data-col="actor"]')).to_contain_text(olga)
    await expect(cancelled.locator('[data-col="actor"]')).to_contain_text(OPERATOR.name)
    await expect(cancelled.locator('[data-col="role"]')).to_have_text("operator")
    await expect(cancelled.locator('[data-col="outcome"]')).to_have_text("success")
    await expect(cancelled).to_contain_text(ids["pending"])
    await expect(refused_row).to_have_count(1)
    await expect(refused_row.locator('[data-col="actor"]')).to_contain_text(OPERATOR.name)
    await expect(refused_row.locator('[data-col="role"]')).to_have_text("operator")
    await expect(refused_row.locator('[data-col="outcome"]')).to_have_text("denied")
    await expect(refused_row.locator("td.num")).to_have_text("403")
    await expect(minted_row).to_have_count(1)
    await expect(minted_row.locator('[data-col="actor"]')).to_contain_text(ADMIN.name)
    await expect(minted_row.locator('[data-col="action"]')).to_have_text("createWorkerKey")
    await expect(minted_row.locator('[data-col="role"]')).to_have_text("admin")
    await expect(minted_row.locator('[data-col="outcome"]')).to_have_text("success")
    await expect(minted_row).to_contain_text(minted["id"])
    await console.screenshot("sso-audit-log")

    # The same entries through the API, and none for the viewer, who changed nothing.
    by_olga = await audit_entries(client, olga)
    assert [(e["action"], e["role"], e["outcome"], e["status"], e["actor_name"]) for e in by_olga] == [
        ("createWorkerKey", "operator", "denied", 403, OPERATOR.name),
        ("cancelJob", "operator", "success", 204, OPERATOR.name),
    ]
    assert ids["pending"] in by_olga[1]["targets"]
    [by_ada] = await audit_entries(client, ada)
    assert (by_ada["action"], by_ada["role"], by_ada["outcome"], by_ada["status"]) == (
        "createWorkerKey",
        "admin",
        "success",
        201,
    )
    assert (by_ada["tenant_id"], by_ada["actor_name"]) == ("acme", ADMIN.name)
    assert minted["id"] in by_ada["targets"]
    assert await audit_entries(client, f"oidc:{VIEWER.id}") == []
