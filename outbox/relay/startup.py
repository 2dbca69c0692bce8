"""Start-up patience: a relay started before its database or the Bot API can be reached waits
for them, as it rides out their outages mid-run; mistakes (a bad token, a schema from another
version) still stop it at once."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from outbox.relay.service import wait_for_stop

__all__ = ["wait_until_reachable"]

log = logging.getLogger("outbox.relay")

_FIRST_DELAY = 0.5
_MAX_DELAY = 10.0
_SAY_AGAIN_AFTER = 60.0  # seconds between two "still waiting" lines


async def wait_until_reachable(
    what: str,
    attempt: Callable[[], Awaitable[None]],
    *,
    unreachable: type[Exception],
    stopping: asyncio.Event,
) -> bool:
    """Run ``attempt`` until it does not raise ``unreachable``, waiting longer each time: True
    once it succeeds, False if the relay was stopped meanwhile. Other errors propagate."""
    delay = _FIRST_DELAY
    since: float | None = None
    said_at = 0.0
    while True:
        try:
            await attempt()
        except unreachable as err:
            now = time.monotonic()
            if since is None:
                since = said_at = now
                log.warning("cannot reach %s yet (%s); waiting for it", what, err)
            elif now - said_at >= _SAY_AGAIN_AFTER:
                said_at = now
                log.warning("still waiting for %s after %.0f s: %s", what, now - since, err)
        else:
            if since is not None:
                log.info("%s is reachable after %.0f s", what, time.monotonic() - since)
            return True
        if await wait_for_stop(stopping, delay):
            return False
        delay = min(delay * 2, _MAX_DELAY)
