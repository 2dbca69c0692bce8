"""The one shape of the relay's services: ``run()`` works until ``stop()``, then winds down and
returns; ``stop()`` only asks, returns at once, and may be asked again. Nothing is cancelled
from outside; a service that can wind down faster also has ``hurry()``: a second stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

__all__ = ["Service", "wait_for_stop"]


class Service(Protocol):
    name: str

    async def run(self) -> None:
        """Work until ``stop()`` is asked; return once wound down (connections closed)."""

    def stop(self) -> None:
        """Ask ``run()`` to wind down and return."""


async def wait_for_stop(stop: asyncio.Event, timeout: float | None) -> bool:
    """Sleep up to ``timeout`` seconds (None: for ever), ending early when ``stop`` is set;
    True if it is."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout)
    return stop.is_set()
