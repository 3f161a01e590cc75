"""The in-process runtime's run slots: a FIFO counting semaphore with an O(1) `locked()` that never
loses a slot to a cancelled waiter."""

from __future__ import annotations

import asyncio

import pytest

from services.worker.runtime import Slots


async def test_slots_are_handed_out_in_arrival_order_and_locked_says_when_none_is_free():
    slots = Slots(2)
    await slots.acquire()
    assert not slots.locked()
    await slots.acquire()
    assert slots.locked()
    order: list[int] = []

    async def wait(n: int) -> None:
        await slots.acquire()
        order.append(n)

    waiters = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0)
    slots.release()
    slots.release()
    await asyncio.sleep(0)
    assert order == [0, 1]
    slots.release()
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2]
    assert slots.locked()
    for _ in range(2):
        slots.release()
    assert not slots.locked()


async def test_a_waiter_cancelled_while_waiting_or_as_it_is_handed_a_slot_loses_none():
    slots = Slots(1)
    await slots.acquire()
    gone = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    handed = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # the slot goes to `handed` ...
    handed.cancel()  # ... which is cancelled before it runs again: the slot must come back
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert not slots.locked()
    async with asyncio.timeout(1):
        await slots.acquire()
    assert slots.locked()
