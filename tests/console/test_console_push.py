"""The console's push endpoints pages (docs/console.md, docs/push.md) in a real headless Chromium
against a real `serve --mode all` (its pusher included) that delivers to aiohttp receivers on
loopback (tests/push/receiver.py): the list with each endpoint's queues and health, an endpoint's
page with its real recent deliveries linked to their jobs, pause and resume, a rotated secret shown
once and then signing the deliveries, a read-only credential that sees no action, and an endpoint
whose receiver keeps failing shown with an open breaker. Every effect is checked through the API."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from playwright.async_api import expect

from tests.console.helpers import READ_ONLY_BUTTONS, call, create_job, wait_for_job_status
from tests.push.receiver import Received, verify
from tests.support.waiting import eventually

pytestmark = [pytest.mark.xdist_group("console-browser"), pytest.mark.timeout(180)]

BREAKER_FAILURES = 2
SERVER_ARGS = [
    *("--api-keys", "rw:acme,ro:acme:ro", "--worker-token", "w"),
    *("--push-allow-cidrs", "127.0.0.0/8"),
    # The breaker opens after two retryable failures in a row and stays open through the test.
    *("--push-breaker-failures", str(BREAKER_FAILURES), "--push-breaker-secs", "3600"),
    *("--worker-poll-secs", "1"),
]


@pytest.fixture
async def server(database_url, service):
    return await service(database_url, mode="all", dev=False, extra_args=SERVER_ARGS)


@pytest.fixture
async def client(server, http):
    return await http(server.base_url, "rw")


@pytest.fixture
async def console(server, open_console):
    return await open_console(server.base_url)


async def bind(client, url: str, name: str, queues: list[str], **more: Any) -> dict[str, Any]:
    return dict(
        await call(
            client, "POST", "/api/v1/push-endpoints", {"name": name, "url": url, "queues": queues, **more}
        )
    )


async def endpoint(client, endpoint_id: str) -> dict[str, Any]:
    return dict(await call(client, "GET", f"/api/v1/push-endpoints/{endpoint_id}"))


async def answer_as_the_payload_says(got: Received) -> web.StreamResponse:
    """200 with a result, or the status the job's payload names (`{"answer": 404}`)."""
    status = got.body["job"]["payload"].get("answer", 200)
    if status == 200:
        return web.json_response({"done": got.job_id})
    return web.Response(status=status, text=f"answered {status}")


def row(console, endpoint_id: str):
    return console.page.locator(f'tr[data-endpoint="{endpoint_id}"]')


async def test_the_endpoints_page_lists_each_endpoint_with_its_queues_settings_and_health(
    client, console, receivers
):
    receiver = await receivers()
    thumbs = await bind(
        client, receiver.url, "thumbs", ["thumbnails", "previews"], concurrency=7, timeout_secs=12
    )
    mail = await bind(client, receiver.url, "mail", ["emails"])
    await call(client, "PATCH", f"/api/v1/push-endpoints/{mail['id']}", {"paused": True})

    await console.sign_in("rw")
    nav = console.page.locator("#nav").get_by_role("link", name="Push endpoints")
    await nav.click()
    await console.heading("Push endpoints")
    await expect(nav).to_have_attribute("aria-current", "page")
    await expect(console.page.locator("#view tbody tr")).to_have_count(2)

    first = row(console, thumbs["id"])
    await expect(first.get_by_role("link", name="thumbs")).to_have_attribute(
        "href", f"#/push-endpoints/{thumbs['id']}"
    )
    await expect(first).to_contain_text(receiver.url)
    queues = first.locator('[data-col="queues"] a')
    assert sorted(thumbs["queues"]) == ["previews", "thumbnails"]
    await expect(queues).to_have_text(thumbs["queues"])
    await expect(queues.filter(has_text="thumbnails")).to_have_attribute("href", "#/queues/thumbnails")
    await expect(first.locator("td.num").first).to_have_text("7")
    await expect(first).to_contain_text("12 s")
    await expect(first.locator('[data-col="state"]')).to_have_text("active")
    await expect(first.locator('[data-col="health"] [data-breaker]')).to_have_attribute(
        "data-breaker", "closed"
    )
    await expect(first.locator('[data-col="health"]')).to_contain_text("closed")
    await expect(first.locator('[data-col="health"]')).to_contain_text("no failure in a row")

    second = row(console, mail["id"])
    await expect(second.locator('[data-col="state"]')).to_have_text("paused")
    await expect(second.get_by_role("button", name="Resume endpoint")).to_be_visible()
    await expect(first.get_by_role("button", name="Pause endpoint")).to_be_visible()
    await console.screenshot("push-endpoints")


async def test_an_endpoints_page_shows_its_settings_and_its_real_deliveries_linked_to_their_jobs(
    client, console, receivers
):
    receiver = await receivers(answer_as_the_payload_says)
    made = await bind(client, receiver.url, "hooks", ["hooks"], headers={"X-Team": "media"})
    done = await create_job(client, "hook", "hooks", {"answer": 200})
    refused = await create_job(client, "hook", "hooks", {"answer": 404})
    await wait_for_job_status(client, done, "completed")
    await wait_for_job_status(client, refused, "failed")

    await console.sign_in("rw", f"#/push-endpoints/{made['id']}")
    await console.heading("Push endpoint hooks")
    facts = console.page.locator("#view dl.facts")
    await expect(facts.locator('[data-col="url"]')).to_have_text(receiver.url)
    await expect(facts.locator('[data-col="queues"] a')).to_have_text(["hooks"])
    await expect(facts).to_contain_text("10 at a time")
    await expect(facts).to_contain_text("30 s")
    await expect(facts).to_contain_text("X-Team")
    await expect(facts.locator("[data-breaker]")).to_have_attribute("data-breaker", "closed")
    await expect(console.page.locator("#view .subtitle [data-id]")).to_have_attribute("data-id", made["id"])

    deliveries = console.page.locator("#view section.block tbody tr")
    await expect(deliveries).to_have_count(2)
    ok = console.page.locator(f'tr[data-job="{done}"]')
    await expect(ok.locator('[data-col="status"]')).to_have_text("200")
    await expect(ok.locator(".badge")).to_have_text("completed")
    await expect(ok).to_contain_text(f'{{"done": "{done}"}}')
    await expect(ok).to_have_attribute("data-attempt", "1")
    bad = console.page.locator(f'tr[data-job="{refused}"]')
    await expect(bad.locator('[data-col="status"]')).to_have_text("404")
    await expect(bad.locator(".badge")).to_have_text("failed")
    await expect(bad).to_contain_text("answered 404")
    # Newest first, as the API lists them.
    listed = await deliveries.evaluate_all("rs => rs.map(r => r.getAttribute('data-job'))")
    api_order = [
        d["job_id"]
        for d in (await call(client, "GET", f"/api/v1/push-endpoints/{made['id']}/deliveries"))["deliveries"]
    ]
    assert listed == api_order
    await console.screenshot("push-endpoint")

    # A delivery's job id links to the job's page.
    await bad.get_by_role("link").click()
    await console.heading(f"Job {refused}")


async def test_pausing_and_resuming_an_endpoint_changes_the_state_shown_and_in_the_api(
    client, console, receivers
):
    receiver = await receivers()
    made = await bind(client, receiver.url, "thumbs", ["thumbnails"])
    await console.sign_in("rw", f"#/push-endpoints/{made['id']}")
    await console.heading("Push endpoint thumbs")
    state = console.page.locator('#view dl.facts [data-col="state"]')
    await expect(state).to_have_text("active")

    await console.button("Pause endpoint").click()
    await console.confirm("Pause endpoint")
    await expect(state).to_have_text("paused")
    await expect(console.button("Resume endpoint")).to_be_visible()
    assert (await endpoint(client, made["id"]))["paused"] is True
    # Paused, nothing is delivered: the job waits.
    waiting = await create_job(client, "hook", "thumbnails")

    await console.button("Resume endpoint").click()
    await expect(state).to_have_text("active")
    await expect(console.button("Pause endpoint")).to_be_visible()
    assert (await endpoint(client, made["id"]))["paused"] is False
    await wait_for_job_status(client, waiting, "completed")
    assert [got.job_id for got in receiver.received] == [waiting]

    # The list pauses too.
    await console.go("#/push-endpoints")
    await row(console, made["id"]).get_by_role("button", name="Pause endpoint").click()
    await console.confirm("Pause endpoint")
    await expect(row(console, made["id"]).locator('[data-col="state"]')).to_have_text("paused")
    assert (await endpoint(client, made["id"]))["paused"] is True


async def test_rotating_the_secret_shows_the_new_one_only_then_and_it_signs_the_next_delivery(
    server, client, console, receivers
):
    receiver = await receivers()
    made = await bind(client, receiver.url, "thumbs", ["thumbnails"])
    first_secret = made["secret"]
    page = console.page
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base_url)
    await console.sign_in("rw", f"#/push-endpoints/{made['id']}")
    await console.heading("Push endpoint thumbs")
    await expect(page.locator("#new-secret")).to_have_count(0)

    await console.button("Rotate secret").click()
    # The old secret stops signing at once, so only the shown one can verify the next delivery.
    await page.locator("dialog#confirm #rotate-grace").select_option("0")
    await console.confirm("Rotate secret")
    panel = page.locator(".secret-panel")
    await expect(panel).to_contain_text("Shown only now")
    await expect(panel).to_contain_text("The previous secret no longer signs.")
    shown = (await page.locator("#new-secret").inner_text()).strip()
    assert shown.startswith("whsec_") and shown != first_secret
    await panel.get_by_role("button", name="Copy secret").click()
    await expect(page.locator(".toast", has_text="Copied the new secret.")).to_be_visible()
    assert await page.evaluate("navigator.clipboard.readText()") == shown
    await console.screenshot("push-endpoint-secret")

    # The shown secret signs what the pusher sends next; the first no longer does.
    job_id = await create_job(client, "hook", "thumbnails")
    [got] = await receiver.wait_for(1)
    assert got.job_id == job_id
    assert verify(shown, got)
    assert not verify(first_secret, got)
    assert "previous_secret_expires_at" not in await endpoint(client, made["id"])

    # The page keeps it while open, through its refreshes; a reload loses it for good.
    await console.button("Refresh").click()
    await expect(page.locator("#new-secret")).to_have_text(shown)
    await page.reload()
    await console.heading("Push endpoint thumbs")
    await expect(page.locator("#view dl.facts")).to_be_visible()
    await expect(page.locator("#new-secret")).to_have_count(0)
    assert shown not in await page.content()


async def test_a_rotation_with_the_default_grace_says_until_when_the_old_secret_still_signs(
    client, console, receivers
):
    receiver = await receivers()
    made = await bind(client, receiver.url, "thumbs", ["thumbnails"])
    await console.sign_in("rw", f"#/push-endpoints/{made['id']}")
    await console.button("Rotate secret").click()
    await expect(console.page.locator("dialog#confirm #rotate-grace")).to_have_value("86400")
    await console.confirm("Rotate secret")
    await expect(console.page.locator(".secret-panel")).to_contain_text("keeps signing beside it until")
    shown = (await console.page.locator("#new-secret").inner_text()).strip()
    await expect(console.page.locator("#view dl.facts")).to_contain_text("Previous secret signs until")
    assert "previous_secret_expires_at" in await endpoint(client, made["id"])

    # Both sign during the grace.
    job_id = await create_job(client, "hook", "thumbnails")
    [got] = await receiver.wait_for(1)
    assert got.job_id == job_id and verify(shown, got) and verify(made["secret"], got)


async def test_a_read_only_credential_sees_the_endpoints_and_no_pause_resume_or_rotate(
    server, client, console, http, receivers
):
    receiver = await receivers()
    made = await bind(client, receiver.url, "thumbs", ["thumbnails"])
    paused = await bind(client, receiver.url, "mail", ["emails"])
    await call(client, "PATCH", f"/api/v1/push-endpoints/{paused['id']}", {"paused": True})
    await wait_for_job_status(client, await create_job(client, "hook", "thumbnails"), "completed")

    await console.sign_in("ro", "#/push-endpoints")
    await expect(console.page.locator("#identity-access")).to_have_text("viewer")
    await expect(console.page.locator("#view tbody tr")).to_have_count(2)
    await expect(row(console, paused["id"]).locator('[data-col="state"]')).to_have_text("paused")
    buttons = set(await console.page.locator("#view button").all_inner_texts())
    assert buttons <= READ_ONLY_BUTTONS, buttons
    assert await console.page.locator("#view th", has_text="Actions").count() == 0

    await console.go(f"#/push-endpoints/{made['id']}")
    await console.heading("Push endpoint thumbs")
    await expect(console.page.locator("#view section.block tbody tr")).to_have_count(1)
    for name in ("Pause endpoint", "Resume endpoint", "Rotate secret"):
        await expect(console.button(name)).to_have_count(0)
    buttons = set(await console.page.locator("#view button").all_inner_texts())
    assert buttons <= READ_ONLY_BUTTONS, buttons

    # The server refuses anyway.
    ro = await http(server.base_url, "ro")
    await call(ro, "PATCH", f"/api/v1/push-endpoints/{made['id']}", {"paused": True}, expect=(403,))
    await call(ro, "POST", f"/api/v1/push-endpoints/{made['id']}/rotate-secret", {}, expect=(403,))


async def test_an_endpoint_whose_receiver_keeps_failing_shows_an_open_breaker(client, console, receivers):
    async def unavailable(_: Received) -> web.StreamResponse:
        return web.Response(status=503, text="down for maintenance")

    receiver = await receivers(unavailable)
    made = await bind(client, receiver.url, "flaky", ["flaky"], concurrency=1)
    healthy = await bind(client, (await receivers()).url, "steady", ["steady"])
    await console.sign_in("rw", "#/push-endpoints")
    health = row(console, made["id"]).locator('[data-col="health"]')
    await expect(health.locator("[data-breaker]")).to_have_attribute("data-breaker", "closed")

    jobs = [await create_job(client, "hook", "flaky", retry_delay_secs=0, max_retries=10) for _ in range(3)]

    async def opened() -> dict[str, Any] | None:
        found = await endpoint(client, made["id"])
        return found if found["breaker"]["state"] == "open" else None

    await eventually(opened, timeout=30)
    # The list refreshes itself into the open state.
    await expect(health.locator("[data-breaker]")).to_have_attribute("data-breaker", "open")
    await expect(health).to_contain_text("open")
    await expect(health).to_contain_text(f"{BREAKER_FAILURES} failures in a row")
    await expect(health).to_contain_text("half-open in")
    steady = row(console, healthy["id"]).locator('[data-col="health"] [data-breaker]')
    await expect(steady).to_have_attribute("data-breaker", "closed")
    await console.screenshot("push-endpoints-breaker")

    await row(console, made["id"]).locator(f'a[href="#/push-endpoints/{made["id"]}"]').click()
    await console.heading("Push endpoint flaky")
    await expect(console.page.locator("#view dl.facts [data-breaker]")).to_have_attribute(
        "data-breaker", "open"
    )
    deliveries = console.page.locator("#view section.block tbody tr")
    await expect(deliveries).to_have_count(BREAKER_FAILURES)
    for delivery in await deliveries.all():
        await expect(delivery.locator('[data-col="status"]')).to_have_text("503")
        await expect(delivery.locator(".badge")).to_have_text("retry")
        await expect(delivery).to_contain_text("down for maintenance")
        assert await delivery.get_attribute("data-job") in jobs


async def test_the_push_pages_fit_a_narrow_screen_and_g_p_opens_them(client, server, open_console, receivers):
    receiver = await receivers()
    made = await bind(
        client, receiver.url, "a-rather-long-endpoint-name", ["thumbnails", "previews", "avatars"]
    )
    await wait_for_job_status(client, await create_job(client, "hook", "thumbnails"), "completed")
    narrow = await open_console(server.base_url, viewport={"width": 390, "height": 844})
    await narrow.sign_in("rw")
    await narrow.heading("Overview")
    await narrow.page.keyboard.press("g")
    await narrow.page.keyboard.press("p")
    await narrow.heading("Push endpoints")
    for link, heading in [
        ("#/push-endpoints", "Push endpoints"),
        (f"#/push-endpoints/{made['id']}", f"Push endpoint {made['name']}"),
    ]:
        await narrow.go(link)
        await narrow.heading(heading)
        await expect(narrow.page.locator("#view table:visible").first).to_be_visible()
        overflow = await narrow.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{link} is {overflow}px wider than the screen"
    await narrow.button("Rotate secret").click()
    await narrow.confirm("Rotate secret")
    await expect(narrow.page.locator("#new-secret")).to_be_visible()
    overflow = await narrow.page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the shown secret makes the page {overflow}px wider than the screen"
    await narrow.screenshot("narrow-push-endpoint")
