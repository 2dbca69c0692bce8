"""The send pool's slots: first come, first served; a cancelled waiter neither takes a slot nor
loses one."""

from __future__ import annotations

import asyncio

import pytest

from outbox.relay.slots import Slots


def test_waiters_get_freed_slots_in_the_order_they_asked() -> None:
    async def run() -> list[int]:
        slots, order = Slots(2), []

        async def take(n: int) -> None:
            await slots.acquire()
            order.append(n)

        await slots.acquire()
        await slots.acquire()
        waiting = [asyncio.create_task(take(n)) for n in range(5)]
        await asyncio.sleep(0)
        assert (order, slots.free) == ([], 0)
        for _ in range(5):
            slots.release()
        await asyncio.gather(*waiting)
        slots.release()
        slots.release()
        assert slots.free == 2
        return order

    assert asyncio.run(run()) == [0, 1, 2, 3, 4]


async def _two_waiting() -> tuple[Slots, asyncio.Task[None], asyncio.Task[None]]:
    """One slot, taken, and two tasks waiting for it in turn."""
    slots = Slots(1)
    await slots.acquire()
    first = asyncio.create_task(slots.acquire())
    second = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    return slots, first, second


def test_a_waiter_cancelled_while_waiting_is_skipped() -> None:
    async def run() -> None:
        slots, first, second = await _two_waiting()
        first.cancel()
        await asyncio.sleep(0)
        slots.release()  # to the second: the first gave up
        await asyncio.wait_for(second, 1)
        assert first.cancelled() and slots.free == 0
        slots.release()
        assert slots.free == 1

    asyncio.run(run())


def test_a_waiter_cancelled_after_it_was_handed_a_slot_gives_it_on() -> None:
    async def run() -> None:
        slots, first, second = await _two_waiting()
        slots.release()  # handed to the first, which is cancelled before it runs
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.wait_for(second, 1)
        slots.release()
        assert slots.free == 1

    asyncio.run(run())


def test_many_slots_freed_at_once_reach_every_waiter() -> None:
    async def run() -> int:
        slots, done = Slots(128), 0
        for _ in range(128):
            await slots.acquire()

        async def take() -> None:
            nonlocal done
            await slots.acquire()
            done += 1
            slots.release()

        waiting = [asyncio.create_task(take()) for _ in range(1000)]
        await asyncio.sleep(0)
        for _ in range(128):
            slots.release()
        await asyncio.wait_for(asyncio.gather(*waiting), 5)
        assert slots.free == 128
        return done

    assert asyncio.run(run()) == 1000
