"""Browser helpers of the single sign-on tests: let a console's tab visit the provider's pages,
sign in there as one of its users (tests/oidc/provider.py), and sign out again."""

from __future__ import annotations

from playwright.async_api import expect

from tests.oidc.provider import OidcProvider, User


def allow_provider(console, provider: OidcProvider) -> None:
    """The provider's pages are the one other host the console's tab may visit; the visits are
    kept in `console.watch.provider_requests`."""
    watch = console.watch
    watch.provider_requests = []
    console.page.remove_listener("request", watch.on_request)

    def on_request(request) -> None:
        if request.url.startswith(provider.issuer + "/"):
            watch.provider_requests.append(request.url)
        else:
            watch.on_request(request)

    console.page.on("request", on_request)


async def sign_in_with_sso(console, provider: OidcProvider, user: User, hash_: str = "#/") -> None:
    """Open the console at `hash_`, sign in on the provider's login page, and wait to be back."""
    page = console.page
    await console.open(hash_)
    await page.get_by_role("button", name="Sign in with single sign-on").click()
    await expect(page.locator("#username")).to_be_visible()
    await page.locator("#username").fill(user.username)
    await page.locator("#password").fill(user.password)
    await page.get_by_role("button", name="Login").click()
    await expect(page.locator("#identity")).to_be_visible()
    await expect(page.locator("#identity-name")).to_have_text(user.name)


async def sign_out(console) -> None:
    """Sign out (here and, RP-initiated, at the provider) and wait for the sign-in page."""
    await console.page.get_by_role("button", name="Sign out").click()
    await expect(console.page.locator("#signin-message")).to_have_text("Signed out.")
