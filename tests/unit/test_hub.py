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
