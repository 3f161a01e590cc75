"""Single sign-on in the console, end to end in headless Chromium against the real provider: the
operator signs in on the provider's login page and comes back to the view they asked for; the
session rides an HttpOnly cookie (no token in the page); changes need the session's CSRF token;
the access token is renewed with the refresh token as it nears its end, across a rotation of the
provider's signing keys; a refused renewal sends the operator back to the sign-in; logout ends
the session here and at the provider."""

from __future__ import annotations

import aiohttp
import jwt
import pytest
from playwright.async_api import expect

from tests.console.helpers import create_job
from tests.oidc.browser import allow_provider, sign_in_with_sso
from tests.oidc.provider import USERS
from tests.support.waiting import eventually

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(240)]


async def session_row(db) -> dict:
    rows = await db.fetch("SELECT * FROM queueflow.console_sessions")
    assert len(rows) == 1, rows
    return dict(rows[0])


@pytest.fixture
async def server(oidc_server):
    return await oidc_server()


@pytest.fixture
async def console(server, provider, open_console):
    opened = await open_console(server.base_url)
    allow_provider(opened, provider)
    return opened


@pytest.fixture
async def client(server):
    async with aiohttp.ClientSession(
        base_url=server.base_url, headers={"Authorization": "Bearer rw"}
    ) as http:
        yield http


async def test_signing_in_through_the_provider_opens_the_view_asked_for_with_a_cookie_only(
    console, provider, client, db
):
    page = console.page
    job_id = await create_job(client, queue="emails")
    await console.open(f"#/jobs/{job_id}")
    await expect(page.get_by_role("heading", name="Sign in to the QueueFlow console")).to_be_visible()
    # Without --console-token-login, single sign-on is the only way in.
    await expect(page.get_by_role("button", name="Sign in with single sign-on")).to_be_visible()
    await expect(page.locator("#signin-form")).to_be_hidden()

    await page.get_by_role("button", name="Sign in with single sign-on").click()
    await expect(page.locator("#username")).to_be_visible()
    assert page.url.startswith(provider.issuer + "/login/")
    await page.locator("#username").fill(USERS["operator"].username)
    await page.locator("#password").fill(USERS["operator"].password)
    await page.get_by_role("button", name="Login").click()

    # Back on the deep link, signed in as the provider's user, with the mapped role.
    await expect(page.locator("#identity")).to_be_visible()
    await expect(page.locator("#identity-name")).to_have_text("Olga Operator")
    await expect(page.locator("#identity")).to_contain_text("Tenant acme")
    await expect(page.locator("#identity-access")).to_have_text("operator")
    assert page.url == f"{console.base_url}/ui/#/jobs/{job_id}"

    # The console works: an operator cancels the job, through the session (cookie + CSRF token).
    await page.get_by_role("button", name="Cancel job").click()
    await console.confirm("Cancel job")
    await expect(page.locator(".page-head .badge")).to_have_text("cancelled")

    # Nothing in the page holds a credential: the session is an HttpOnly, SameSite=Lax cookie.
    assert console.watch.authorizations == set()
    assert await page.evaluate("sessionStorage.length") == 0
    assert await page.evaluate("localStorage.length") == 0
    assert await page.evaluate("document.cookie") == ""
    (cookie,) = [c for c in await page.context.cookies(console.base_url) if c["name"] == "qf_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/"
    assert not cookie["secure"]  # (an http:// --public-url: the loopback case; https makes it Secure)
    # The server keeps the session under the cookie's digest, never the cookie itself.
    row = await session_row(db)
    assert (row["subject"], row["tenant_id"], row["role"]) == ("u-olga", "acme", "operator")
    assert cookie["value"] not in {str(v) for v in row.values()}
    await console.screenshot("sso-signed-in")


async def test_a_change_without_the_sessions_csrf_token_is_403(console, provider):
    await sign_in_with_sso(console, provider, USERS["operator"])
    console.watch.allow(403, "/api/v1/jobs")
    statuses = await console.page.evaluate(
        """async () => {
          const body = JSON.stringify({ task_name: "t", payload: {} });
          const post = (headers) => fetch("/api/v1/jobs", { method: "POST", body,
            headers: { "Content-Type": "application/json", ...headers } });
          const session = await (await fetch("/ui/auth/session")).json();
          const without = await post({});
          const wrong = await post({ "X-CSRF-Token": "not-it" });
          const right = await post({ "X-CSRF-Token": session.session.csrf_token });
          return [without.status, wrong.status, right.status, (await without.json()).error];
        }"""
    )
    assert statuses == [403, 403, 201, "access denied: the console's CSRF token is missing or wrong"]


async def test_a_viewer_signs_in_read_only(console, provider):
    await sign_in_with_sso(console, provider, USERS["viewer"], "#/jobs")
    await expect(console.page.locator("#identity-access")).to_have_text("viewer")
    await console.heading("Jobs")
    await expect(console.page.get_by_role("button", name="Cancel matching jobs")).to_have_count(0)


async def test_the_access_token_is_renewed_before_it_ends_across_a_key_rotation(console, provider, db):
    await provider.set_access_token_lifetime(4)
    try:
        await sign_in_with_sso(console, provider, USERS["operator"], "#/queues")
        first = (await session_row(db))["access_token"]

        async def renewed_from(token: str) -> str:
            row = await session_row(db)
            assert row["access_token"] != token
            return row["access_token"]

        # The console's own polling renews it (a quarter of its life before the end).
        second = await eventually(lambda: renewed_from(first), timeout=30)
        await console.heading("Queues")

        # The provider rotates its keys (to ES256, the old key retired): the next renewal's token
        # has a kid the server has not seen, which makes it fetch the JWKS again.
        kid = await provider.rotate("ES256", retire=True)
        third = await eventually(lambda: renewed_from(second), timeout=30)
        assert jwt.get_unverified_header(third)["kid"] == kid
        await console.go("#/jobs")
        await console.heading("Jobs")
        await expect(console.page.locator("#identity")).to_be_visible()
    finally:
        await provider.set_access_token_lifetime(300)


async def test_a_refused_renewal_sends_the_operator_back_to_sign_in(console, provider, db):
    await provider.set_access_token_lifetime(4)
    try:
        await sign_in_with_sso(console, provider, USERS["operator"], "#/queues")
        console.watch.allow(401, "/api/v1/")
        # The provider no longer knows the refresh token (as after a revocation).
        await db.execute("UPDATE queueflow.console_sessions SET refresh_token = 'revoked'")
        await expect(console.page.locator("#signin-message")).to_have_text(
            "Your single sign-on session has ended. Sign in again.", timeout=30_000
        )
        assert await db.fetchval("SELECT count(*) FROM queueflow.console_sessions") == 0
    finally:
        await provider.set_access_token_lifetime(300)


async def test_sign_out_ends_the_session_here_and_at_the_provider(console, provider, db):
    page = console.page
    await sign_in_with_sso(console, provider, USERS["operator"], "#/queues")
    assert await db.fetchval("SELECT count(*) FROM queueflow.console_sessions") == 1
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.locator("#signin-message")).to_have_text("Signed out.")
    assert page.url == f"{console.base_url}/ui/"
    # RP-initiated logout: the browser went through the provider's end_session_endpoint.
    end_session = (await provider.discovery())["end_session_endpoint"]
    assert any(url.startswith(end_session + "?") for url in console.watch.provider_requests)
    assert await db.fetchval("SELECT count(*) FROM queueflow.console_sessions") == 0
    assert [c for c in await page.context.cookies(console.base_url) if c["name"] == "qf_session"] == []


async def test_token_login_stays_beside_sso_only_with_console_token_login(
    oidc_server, provider, open_console
):
    server = await oidc_server("--console-token-login")
    console = await open_console(server.base_url)
    await console.open("#/")
    await expect(console.page.get_by_role("button", name="Sign in with single sign-on")).to_be_visible()
    await console.page.get_by_label("Tenant token", exact=True).fill("rw")
    await console.page.get_by_role("button", name="Sign in", exact=True).click()
    await expect(console.page.locator("#identity-access")).to_have_text("admin")
    assert console.watch.authorizations == {"Bearer rw"}
