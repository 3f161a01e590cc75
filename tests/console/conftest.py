"""Fixtures for the console's browser tests: a real headless Chromium (Debian's, driven by the
Python playwright package; never a browser Playwright downloads), a page that fails the test on any
browser console error, uncaught exception, failed request or request to another host, and helpers
to sign in, open a deep link and save a screenshot.

Screenshots go to the test's tmp dir, or to the folder named by QUEUEFLOW_SCREENSHOTS (read at
import: the suite scrubs QUEUEFLOW_* from the environment before any fixture runs), e.g.
`QUEUEFLOW_SCREENSHOTS=docs/console .venv/bin/python -m pytest tests/console -q`.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import ConsoleMessage, Page, Request, Response, async_playwright, expect

from tests.push.receiver import receivers

__all__ = ["receivers"]  # push receivers on loopback for the push endpoints' pages

CHROMIUM = os.environ.get("QUEUEFLOW_TEST_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = os.environ.get("QUEUEFLOW_SCREENSHOTS") or None
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Every expect() waits at most this long for its condition (a deadline, not a sleep).
expect.set_options(timeout=15_000)
CALL_REPORT = pytest.StashKey[pytest.TestReport]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep the call phase's report, so that fixtures know at teardown whether the test passed."""
    report = yield
    if report.when == "call":
        item.stash[CALL_REPORT] = report
    return report


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if SCREENSHOTS:
        path = Path(SCREENSHOTS)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("console-screenshots")


@pytest.fixture(scope="session")
def chromium_profile() -> Iterator[Path]:
    """A fresh, empty user-data dir for the session's browser."""
    path = Path(tempfile.mkdtemp(prefix="qf-chromium-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
async def browser(chromium_profile: Path) -> AsyncIterator[Any]:
    if not os.path.exists(CHROMIUM):  # noqa: ASYNC240 (once per session, before the browser)
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    async with async_playwright() as pw:
        # A persistent context is how Playwright takes a user-data dir of ours; each test then
        # gets its own page, whose sessionStorage is its own.
        context = await pw.chromium.launch_persistent_context(
            str(chromium_profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 860},
            service_workers="block",
        )
        try:
            yield context
        finally:
            await context.close()


@dataclass
class PageWatch:
    """What went wrong in a page: console errors, uncaught exceptions, failed requests, error
    responses, and requests to any other origin. A test that provokes an error response on
    purpose says so first with `allow(status, path_fragment)`."""

    origin: str
    problems: list[str] = field(default_factory=list)
    allowed: list[tuple[int, str]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    api_requests: list[str] = field(default_factory=list)
    authorizations: set[str] = field(default_factory=set)

    def allow(self, status: int, fragment: str = "") -> None:
        self.allowed.append((status, fragment))

    def _is_allowed(self, status: int, url: str) -> bool:
        return any(status == s and fragment in url for s, fragment in self.allowed)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type != "error":
            return
        text = message.text
        # Chromium logs every error response as "Failed to load resource: ... status of N";
        # those are judged by on_response, which knows the URL.
        if re.match(r"Failed to load resource: the server responded with a status of \d+", text):
            return
        self.problems.append(f"console error: {text} ({message.location.get('url', '')})")

    def on_page_error(self, error: Any) -> None:
        self.problems.append(f"uncaught exception: {error}")

    def on_request(self, request: Request) -> None:
        url = request.url
        if url.startswith(("data:", "about:", "blob:")):
            return
        self.requests.append(url)
        if not url.startswith(self.origin + "/"):
            self.problems.append(f"request to another host: {request.method} {url}")
        if "/api/v1/" in url:
            self.api_requests.append(url)
            auth = request.headers.get("authorization")
            if auth:
                self.authorizations.add(auth)

    def on_request_failed(self, request: Request) -> None:
        failure = request.failure or ""
        # A cancellation, not a failure: the console aborts its fetches (and SSE streams) when the
        # operator leaves a view, and a reload or navigation aborts what the page was loading.
        if failure == "net::ERR_ABORTED" and request.url.startswith(self.origin + "/"):
            return
        self.problems.append(f"request failed: {request.method} {request.url}: {failure}")

    def on_response(self, response: Response) -> None:
        if response.status >= 400 and not self._is_allowed(response.status, response.url):
            self.problems.append(
                f"error response: {response.status} {response.request.method} {response.url}"
            )

    def check(self) -> None:
        assert not self.problems, "the page had problems:\n" + "\n".join(self.problems)


@dataclass
class Console:
    """A browser page on one server's console."""

    page: Page
    base_url: str
    watch: PageWatch
    screenshots: Path

    async def open(self, hash_: str = "#/") -> None:
        """Load the console at a deep link (a full page load, as a pasted link or a reload)."""
        await self.page.goto(f"{self.base_url}/ui/{hash_}")

    async def go(self, hash_: str) -> None:
        """Follow an in-page link (the hash changes; no reload)."""
        await self.page.evaluate("h => { location.hash = h; }", hash_)

    async def sign_in(self, token: str, hash_: str = "#/") -> None:
        await self.open(hash_)
        await self.page.get_by_label("Tenant token", exact=True).fill(token)
        await self.page.get_by_role("button", name="Sign in").click()
        await expect(self.page.locator("#identity")).to_be_visible()

    async def heading(self, text: str | re.Pattern[str]) -> None:
        await expect(self.page.locator("#view h1")).to_have_text(text)

    async def screenshot(self, name: str, full_page: bool = True) -> Path:
        path = self.screenshots / f"{name}.png"
        # A settled page: no running animation, the caret hidden.
        await self.page.screenshot(path=str(path), full_page=full_page, animations="disabled", caret="hide")
        return path

    def button(self, name: str, *, within: Any = None) -> Any:
        scope = within if within is not None else self.page
        return scope.get_by_role("button", name=name)

    async def confirm(self, name: str) -> None:
        """Press the confirmation dialog's button `name`."""
        dialog = self.page.locator("dialog#confirm")
        await expect(dialog).to_be_visible()
        await dialog.get_by_role("button", name=name, exact=True).click()
        await expect(dialog).to_be_hidden()


@pytest.fixture
async def open_console(
    browser: Any, screenshot_dir: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Any]:
    """`console = await open_console(base_url)`: a fresh page (its own sessionStorage), watched.

    The page's problems fail a test that otherwise passed; a test that failed (or xfailed) already
    has its verdict, and its page's problems are printed with it."""
    pages: list[tuple[Page, PageWatch]] = []

    async def make(base_url: str, viewport: dict[str, int] | None = None) -> Console:
        page = await browser.new_page()
        if viewport:
            await page.set_viewport_size(viewport)
        watch = PageWatch(origin=base_url)
        page.on("console", watch.on_console)
        page.on("pageerror", watch.on_page_error)
        page.on("request", watch.on_request)
        page.on("requestfailed", watch.on_request_failed)
        page.on("response", watch.on_response)
        pages.append((page, watch))
        return Console(page, base_url, watch, screenshot_dir)

    yield make
    problems: list[str] = []
    for page, watch in pages:
        problems.extend(watch.problems)
        # Close first so that the page's open streams end as a leaving operator's would.
        page.remove_listener("requestfailed", watch.on_request_failed)
        page.remove_listener("console", watch.on_console)
        await page.close()
    report = request.node.stash.get(CALL_REPORT, None)
    if report is not None and not report.passed:
        if problems:
            print("the page had problems:\n" + "\n".join(problems))
        return
    assert not problems, "the page had problems:\n" + "\n".join(problems)


@pytest.fixture
async def http() -> AsyncIterator[Any]:
    """`client = await http(base_url, token)`: an aiohttp session with a bearer token."""
    sessions: list[aiohttp.ClientSession] = []

    async def make(base_url: str, token: str = "dev") -> aiohttp.ClientSession:
        session = aiohttp.ClientSession(base_url=base_url, headers={"Authorization": f"Bearer {token}"})
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        await session.close()
