"""The send pool's workers: at most ``concurrency`` rows handled at once, in the order given,
each by a task that lives on from row to row (a task per row costs about twice the CPU). An
idle worker waits on a future of its own, which a new row sets.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, TypeVar

__all__ = ["Workers"]

log = logging.getLogger("outbox.relay")

Item = TypeVar("Item")
Context = TypeVar("Context")


class Workers(Generic[Item, Context]):
    """``handle(item, context)`` for each item given, at most ``concurrency`` at once, first
    given first started; ``done`` is called after each (whatever became of it)."""

    def __init__(
        self,
        concurrency: int,
        handle: Callable[[Item, Context], Awaitable[None]],
        *,
        done: Callable[[], None],
    ) -> None:
        self._concurrency = concurrency
        self._handle = handle
        self._done = done
        self._queue: deque[tuple[Item, Context]] = deque()  # given, not started yet
        self._idle: deque[asyncio.Future[None]] = deque()  # a waiting worker's wake-up each
        self._tasks: set[asyncio.Task[None]] = set()
        self._none_held = asyncio.Event()
        self._none_held.set()
        self.held = 0  # given and not yet handled to the end

    def give(self, items: Iterable[Item], context: Context) -> None:
        """Items to handle, each with ``context`` (for the send pool: when their claim
        returned)."""
        given = [(item, context) for item in items]
        if not given:
            return
        self._queue.extend(given)
        added = len(given)
        self.held += added
        self._none_held.clear()
        idle = self._idle
        while added and idle:
            waiter = idle.popleft()
            if not waiter.done():  # a worker cancelled while idle leaves its wake-up behind
                waiter.set_result(None)
                added -= 1
        while added and len(self._tasks) < self._concurrency:
            task = asyncio.create_task(self._work())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            added -= 1

    async def idle(self) -> None:
        """Return once every item given has been handled."""
        await self._none_held.wait()

    async def stop(self) -> list[Item]:
        """Cancel the workers (an item being handled sees the cancellation) and return the
        items never started, in order; given more items later, new workers start."""
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        never_started = [item for item, _ in self._queue]
        self._queue.clear()
        self._idle.clear()
        self._settle(len(never_started))
        return never_started

    async def _work(self) -> None:
        queue = self._queue
        loop = asyncio.get_running_loop()
        while True:
            if not queue:
                waiter = loop.create_future()
                self._idle.append(waiter)
                await waiter  # until an item comes (or stop())
                continue
            item, context = queue.popleft()
            try:
                await self._handle(item, context)
            except Exception:  # a bug in the handler must not take the worker with it
                log.exception("send task failed")
            finally:
                self._settle(1)

    def _settle(self, count: int) -> None:
        for _ in range(count):
            self.held -= 1
            self._done()
        if not self.held:
            self._none_held.set()
