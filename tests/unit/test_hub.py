"""The in-memory wake-up hub: epochs, parking, and the 'known empty' shortcut for idle long-polls."""

import asyncio

from shared.db.listener import Hub


async def test_a_poke_between_reading_the_epoch_and_parking_is_not_lost():
    hub = Hub()
    seen = hub.epoch("q")
    hub.poke("q")  # arrives after the claim found nothing, before the waiter parks
    assert await hub.wait("q", seen, timeout=5) is True


async def test_one_poke_wakes_one_waiter():
    hub = Hub()
    seen = hub.epoch("q")
    waiters = [asyncio.create_task(hub.wait("q", seen, timeout=0.3)) for _ in range(3)]
    await asyncio.sleep(0)  # let them park
    hub.poke("q")
    assert sorted(await asyncio.gather(*waiters)) == [False, False, True]


async def test_known_empty_needs_a_connected_listener_an_unmoved_epoch_and_a_fresh_check():
    hub = Hub()
    seen = hub.epoch("q")
    hub.claimed("q", seen, may_have_more=False)
    assert hub.known_empty("q", seen, max_age=5) is False  # listener not connected: trust nothing
    hub.connected = True
    assert hub.known_empty("q", seen, max_age=5) is True
    assert hub.known_empty("q", seen, max_age=0) is False  # the safety poll is due
    hub.poke("q")
    assert hub.known_empty("q", hub.epoch("q"), max_age=5) is False  # something was announced


async def test_a_claim_that_found_work_clears_known_empty():
    hub = Hub()
    hub.connected = True
    seen = hub.epoch("q")
    hub.claimed("q", seen, may_have_more=False)
    hub.claimed("q", seen, may_have_more=True)
    assert hub.known_empty("q", seen, max_age=5) is False


async def test_a_tenants_drained_claim_says_nothing_of_the_other_tenants_or_the_queue():
    hub = Hub()
    seen = hub.epoch("q")
    hub.tenant_claimed("q", "acme", seen, may_have_more=False)
    assert hub.tenant_known_empty("q", "acme", seen, max_age=5) is False  # listener not connected
    hub.connected = True
    assert hub.tenant_known_empty("q", "acme", seen, max_age=5) is True
    assert hub.tenant_known_empty("q", "acme", seen, max_age=0) is False  # the safety poll is due
    assert hub.tenant_known_empty("q", "globex", seen, max_age=5) is False
    assert hub.known_empty("q", seen, max_age=5) is False
    hub.tenant_claimed("q", "acme", seen, may_have_more=True)
    assert hub.tenant_known_empty("q", "acme", seen, max_age=5) is False


async def test_a_tenant_is_known_empty_when_the_queue_is_and_until_the_next_poke():
    hub = Hub()
    hub.connected = True
    seen = hub.epoch("q")
    hub.tenant_claimed("q", "acme", seen, may_have_more=False)
    hub.poke("q")
    assert hub.tenant_known_empty("q", "acme", hub.epoch("q"), max_age=5) is False
    seen = hub.epoch("q")
    hub.claimed("q", seen, may_have_more=False)  # every tenant's jobs: none left
    assert hub.tenant_known_empty("q", "globex", seen, max_age=5) is True


async def test_a_withdrawn_waiter_is_not_woken_by_a_poke():
    hub = Hub()
    seen = hub.epoch("q")
    mine: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    parked = asyncio.create_task(hub.wait("q", seen, timeout=5, waiter=mine))
    await asyncio.sleep(0)
    hub.withdraw("q", mine)
    hub.poke("q")
    await asyncio.sleep(0)
    assert not mine.done()  # answered another way, by whoever withdrew it
    mine.set_result(["a lease"])
    assert await parked is True
