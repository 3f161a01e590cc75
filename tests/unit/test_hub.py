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


# --- a bounded hub: idle entries are dropped, and no wake-up with them ---------------------------


async def test_a_poke_while_the_entry_is_dropped_between_reading_the_epoch_and_parking_is_not_lost():
    hub = Hub(max_idle_queues=0)
    seen = hub.epoch("q")  # the claim found nothing ...
    assert hub.sweep() == 1  # ... the entry, idle meanwhile, is dropped ...
    hub.poke("q")  # ... a job arrives, with no entry to record it in ...
    assert hub.tracked_queues() == 0
    assert await hub.wait("q", seen, timeout=5) is True  # ... and the waiter does not park on it


async def test_an_entry_made_again_never_repeats_an_epoch_a_waiter_may_hold():
    hub = Hub(max_idle_queues=0)
    held = set()
    for _ in range(50):
        seen = hub.epoch("q")
        assert seen not in held
        held.add(seen)
        hub.poke("other")  # (no entry: nothing happens)
        hub.sweep()
    assert hub.tracked_queues() == 0


async def test_an_entry_with_a_parked_waiter_or_a_claim_under_way_is_kept_and_still_woken():
    hub = Hub(max_idle_queues=0, idle_queue_secs=0)  # every idle entry goes at the next sweep
    seen = hub.epoch("parked")
    parked = asyncio.create_task(hub.wait("parked", seen, timeout=5))
    await asyncio.sleep(0)
    observed = asyncio.create_task(hub.wait("observed", hub.epoch("observed"), timeout=5, observe=True))
    await asyncio.sleep(0)
    gate = hub.gate("claiming")
    async with gate:
        assert hub.sweep() == 0
        assert hub.tracked_queues() == 3
        hub.poke("parked")
        hub.poke("observed")
        assert await parked is True
        assert await observed is True
        assert hub.gate("claiming") is gate  # the same places: at most two claims at once
    assert hub.sweep() == 3  # nobody parked or claiming any more


async def test_a_waiter_whose_entry_went_before_it_parked_checks_again_at_once():
    hub = Hub(max_idle_queues=0)
    seen = hub.epoch("q")
    parked = asyncio.create_task(hub.wait("q", seen, timeout=5))  # not parked yet
    hub.epoch("other")  # a new entry sweeps first: q's, idle, goes
    hub.poke("q")  # lands on no entry
    assert await parked is True  # a spurious wake-up at worst, never a lost one


async def test_a_claim_waiting_for_a_place_at_the_gate_keeps_the_entry():
    hub = Hub(max_idle_queues=0, idle_queue_secs=0)
    gate = hub.gate("q")
    release = asyncio.Event()

    async def claim() -> None:
        async with gate:
            await release.wait()

    claims = [asyncio.create_task(claim()) for _ in range(3)]  # the third waits for a place
    await asyncio.sleep(0)
    assert hub.sweep() == 0
    release.set()
    await asyncio.gather(*claims)
    assert hub.sweep() == 1


async def test_a_cancelled_wait_for_a_place_at_the_gate_does_not_keep_the_entry_forever():
    hub = Hub(max_idle_queues=0, idle_queue_secs=0)
    gate = hub.gate("q")
    release = asyncio.Event()

    async def claim() -> None:
        async with gate:
            await release.wait()

    holding = [asyncio.create_task(claim()) for _ in range(2)]
    await asyncio.sleep(0)
    waiting = asyncio.create_task(claim())
    await asyncio.sleep(0)
    waiting.cancel()
    release.set()
    await asyncio.gather(*holding, waiting, return_exceptions=True)
    assert hub.sweep() == 1


async def test_idle_entries_past_the_bound_are_dropped_oldest_first():
    hub = Hub(max_idle_queues=10, idle_queue_secs=3600)
    epochs = {f"q{n}": hub.epoch(f"q{n}") for n in range(10)}
    hub.epoch("q0")  # used again: now the newest
    epochs["q10"] = hub.epoch("q10")
    assert hub.sweep() == 1
    assert hub.tracked_queues() == 10
    # A kept entry still answers its epoch; the dropped one (q1, the oldest) is made anew.
    assert [q for q, epoch in epochs.items() if hub.epoch(q) != epoch] == ["q1"]


async def test_entries_untouched_for_the_idle_time_are_dropped_however_few():
    hub = Hub(max_idle_queues=1000, idle_queue_secs=0)
    hub.epoch("a")
    hub.epoch("b")
    assert hub.sweep() == 2


async def test_the_hub_holds_a_bounded_number_of_entries_however_many_queues_it_has_seen():
    hub = Hub(max_idle_queues=100, idle_queue_secs=3600)
    hub.connected = True
    most = 0
    for n in range(50_000):
        queue = f"q{n}"
        seen = hub.epoch(queue)  # a long-poll's claim on a queue never seen before ...
        async with hub.gate(queue):
            hub.claimed(queue, seen, may_have_more=False)
        hub.poke(queue)  # ... a job announced on it ...
        assert await hub.wait(queue, seen, timeout=5) is True  # ... which the next claim would take
        most = max(most, hub.tracked_queues())
    assert most <= 100 * 3 // 2 + 1
