"""The send pool's workers: first given, first started; never more at once than the
concurrency; a stop hands back what never started, and a failing item costs no worker."""

from __future__ import annotations

import asyncio
import logging

import pytest

from outbox.relay.workers import Workers


class Recorder:
    """Items handled: each waits for its own release, so a test decides when it ends."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.ended: list[int] = []
        self.done = 0
        self.gates: dict[int, asyncio.Event] = {}
        self.running = 0
        self.most_running = 0

    async def handle(self, item: int, _: None) -> None:
        self.started.append(item)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await self.gates.setdefault(item, asyncio.Event()).wait()
        finally:
            self.running -= 1
        self.ended.append(item)

    def release(self, *items: int) -> None:
        for item in items:
            self.gates.setdefault(item, asyncio.Event()).set()

    def count(self) -> None:
        self.done += 1


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_items_start_in_the_order_given_and_never_more_than_the_concurrency() -> None:
    async def run() -> Recorder:
        rec = Recorder()
        workers = Workers(3, rec.handle, done=rec.count)
        workers.give(range(10), None)
        await _settle()
        assert rec.started == [0, 1, 2] and workers.held == 10
        rec.release(1)
        await _settle()
        assert rec.started == [0, 1, 2, 3]  # the freed worker took the next one
        rec.release(*range(10))
        await asyncio.wait_for(workers.idle(), 1)
        assert (workers.held, rec.done) == (0, 10)
        await workers.stop()
        return rec

    rec = asyncio.run(run())
    assert rec.started == list(range(10)) and rec.most_running == 3


def test_idle_workers_take_items_given_later() -> None:
    async def run() -> tuple[Recorder, set[asyncio.Task[None]]]:
        rec = Recorder()
        workers = Workers(2, rec.handle, done=rec.count)
        rec.release(*range(6))
        workers.give([0, 1], None)
        await asyncio.wait_for(workers.idle(), 1)
        first = set(workers._tasks)
        for batch in ([2], [3, 4, 5]):  # the two workers wait idle in between
            workers.give(batch, None)
            await asyncio.wait_for(workers.idle(), 1)
        assert workers._tasks == first  # the same two, no new ones
        await workers.stop()
        return rec, first

    rec, first = asyncio.run(run())
    assert sorted(rec.ended) == list(range(6)) and rec.done == 6 and len(first) == 2


def test_stop_cancels_the_items_being_handled_and_hands_back_those_never_started() -> None:
    async def run() -> tuple[Recorder, list[int], int]:
        rec = Recorder()
        workers = Workers(2, rec.handle, done=rec.count)
        workers.give(range(5), None)
        await _settle()
        never_started = await workers.stop()
        return rec, never_started, workers.held

    rec, never_started, held = asyncio.run(run())
    assert rec.started == [0, 1] and rec.ended == []  # cancelled mid-item
    assert never_started == [2, 3, 4] and held == 0 and rec.done == 5


def test_workers_start_again_after_a_stop() -> None:
    async def run() -> Recorder:
        rec = Recorder()
        workers = Workers(1, rec.handle, done=rec.count)
        workers.give([0], None)
        await _settle()
        await workers.stop()
        rec.release(1)
        workers.give([1], None)
        await asyncio.wait_for(workers.idle(), 1)
        await workers.stop()
        return rec

    assert asyncio.run(run()).ended == [1]


def test_an_item_that_raises_is_logged_and_its_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handled: list[int] = []

    async def handle(item: int, _: None) -> None:
        if item == 1:
            raise RuntimeError("a bug")
        handled.append(item)

    async def run() -> int:
        done = 0

        def count() -> None:
            nonlocal done
            done += 1

        workers = Workers(1, handle, done=count)
        workers.give(range(4), None)
        await asyncio.wait_for(workers.idle(), 1)
        await workers.stop()
        return done

    with caplog.at_level(logging.ERROR, logger="outbox.relay"):
        assert asyncio.run(run()) == 4
    assert handled == [0, 2, 3]
    assert "send task failed" in caplog.text and "a bug" in caplog.text


def test_a_worker_cancelled_while_idle_leaves_no_item_behind() -> None:
    """An idle worker's wake-up that can no longer be set (its worker was cancelled) is
    skipped: the next item goes to a live worker."""

    async def run() -> Recorder:
        rec = Recorder()
        workers = Workers(2, rec.handle, done=rec.count)
        rec.release(0, 1, 2)
        workers.give([0, 1], None)
        await asyncio.wait_for(workers.idle(), 1)
        next(iter(workers._tasks)).cancel()  # one of the two idle workers
        await _settle()
        workers.give([2], None)
        await asyncio.wait_for(workers.idle(), 1)
        await workers.stop()
        return rec

    assert asyncio.run(run()).ended == [0, 1, 2]
