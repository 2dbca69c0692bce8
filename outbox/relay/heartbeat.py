"""The relay's row in the fleet's register (``relaylar``): written at start, refreshed by a
heartbeat on a connection of its own (the health check's probe of the database), deleted on a
clean stop. A relay killed without a word leaves its row: readers call it gone after a few
missed beats, and maintenance deletes it later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from outbox import queries
from outbox.relay.health import Health
from outbox.relay.service import wait_for_stop
from outbox.relay.store import DatabaseLost, Store
from outbox.relay.summary import RelaySnapshot
from outbox.relay.systemd import SystemdNotifier
from outbox.version import package_version

__all__ = ["Heartbeat", "RelayIdentity"]

log = logging.getLogger("outbox.relay")

# A clean stop deletes the row; a database that does not answer by then leaves it to be
# called gone and forgotten, which is harmless.
_GOODBYE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class RelayIdentity:
    """Who a relay is in the register."""

    queues: tuple[str, ...]
    id: str = ""
    host: str = ""
    pid: int = 0
    version: str = ""

    @classmethod
    def of_this_process(cls, queues: Sequence[str]) -> RelayIdentity:
        return cls(
            queues=tuple(queues),
            id=secrets.token_hex(8),
            host=socket.gethostname(),
            pid=os.getpid(),
            version=package_version(),
        )


class Heartbeat:
    def __init__(
        self,
        store: Store,
        *,
        schema: str,
        identity: RelayIdentity,
        interval: float,
        snapshot: Callable[[], RelaySnapshot],
        health: Health,
        bots: Callable[[], tuple[tuple[str, ...], tuple[str, ...]]],
    ) -> None:
        self._store = store
        self._schema = schema
        self.identity = identity
        self._interval = interval
        self._snapshot = snapshot
        self._health = health
        # The bots served now, and those of them whose token Telegram rejected (they change).
        self._bots = bots
        self._systemd = SystemdNotifier()
        self.name = "heartbeat"
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def beat_once(self) -> None:
        """Write the heartbeat; if the database cannot be used, the health says why."""
        figures = self._snapshot()
        me = self.identity
        bots, rejected = self._bots()

        async def beat(conn: queries.AsyncConn) -> None:
            await queries.relay_heartbeat(
                conn,
                schema=self._schema,
                relay_id=me.id,
                host=me.host,
                pid=me.pid,
                version=me.version,
                queues=me.queues,
                bots=bots,
                rejected_bots=rejected,
                interval=self._interval,
                in_flight=figures.in_flight,
                totals=asdict(figures.summary),
            )

        try:
            await self._store.run(beat)
        except DatabaseLost as err:
            self._health.database_failed(str(err.__cause__ or err))
        else:
            self._health.database_ok()

    async def run(self) -> None:
        """Beat every interval until stopped; then take the relay's row out of the register."""
        failing = False
        try:
            while not self._stop.is_set():
                try:
                    await self.beat_once()
                    failing = False
                except Exception as err:  # not the connection's: a bug, or a changed table
                    self._health.database_failed(f"the heartbeat failed: {err}")
                    if not failing:
                        log.exception(
                            "the heartbeat failed; trying again every %g s", self._interval
                        )
                    failing = True
                self._health.heartbeat_tried()
                if self._health.problem() is None:
                    self._systemd.ready()
                if self._health.stuck() is None:
                    self._systemd.alive()
                await wait_for_stop(self._stop, self._interval)
        finally:
            self._systemd.stopping()
            await self._goodbye()

    async def _goodbye(self) -> None:
        async def forget(conn: queries.AsyncConn) -> None:
            await queries.forget_relay(conn, schema=self._schema, relay_id=self.identity.id)

        try:
            with contextlib.suppress(DatabaseLost, TimeoutError):
                await asyncio.wait_for(self._store.run(forget), _GOODBYE_TIMEOUT)
        finally:
            await self._store.close()
