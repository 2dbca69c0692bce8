"""The relay's stop, service by service, in the order docs/how-it-works.md draws: the claimer
stops, the lanes' send pools drain within the grace (each bot's flood control tells its last
pause) while the completer keeps writing, the completer writes the rest, then the listener and
maintenance; a second stop cuts the grace short."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox.config import RelayConfig
from outbox.relay import Relay
from outbox.relay.service import Service
from outbox.telegram import NullSender, SentMessage
from tests.support import UNLIMITED, backends, eventually, row, text

HELPERS = {"listener", "maintenance"}


class Gated(NullSender):
    """Holds every send until ``release`` is set (never, unless the test sets it)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.started = 0

    async def send(self, args: Mapping[str, Any]) -> SentMessage:
        self.started += 1
        await self.release.wait()
        return await super().send(args)


def record_ends(relay: Relay, ended: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each service's name goes to ``ended`` when its ``run()`` returns."""
    services: list[Service] = [relay.claimer, relay.lanes, relay.completer]
    services += [relay.maintenance, *([relay.listener] if relay.listener else [])]
    for service in services:
        run: Callable[..., Awaitable[None]] = service.run

        async def watched(
            *args: Any,
            _run: Callable[..., Awaitable[None]] = run,
            _name: str = service.name,
            **kwargs: Any,
        ) -> None:
            try:
                await _run(*args, **kwargs)
            finally:
                ended.append(_name)

        monkeypatch.setattr(service, "run", functools.wraps(run)(watched))


def listening(engine: sa.Engine) -> list[str]:
    return backends(engine, "starts_with(query, 'LISTEN')")


def test_services_stop_in_order_and_a_send_that_ends_in_the_grace_is_written(
    engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="slow", payload=text(1))
    sender, ended = Gated(), list[str]()
    unwritten_when_the_completer_ended: list[int] = []

    async def scenario() -> None:
        config = RelayConfig(database_url=db_url, rate_limits=UNLIMITED, grace_seconds=60)
        async with Relay(config, sender) as relay:
            record_ends(relay, ended, monkeypatch)
            runner = asyncio.create_task(relay.run())
            await eventually(lambda: sender.started and listening(engine), 20, "a send")
            relay.stop()
            await eventually(lambda: "claimer" in ended, 20, "the claimer to stop")
            # The lanes drain within the grace: its send ends now, after the claimer.
            assert ended == ["claimer"]
            sender.release.set()
            await asyncio.wait_for(runner, 30)
            unwritten_when_the_completer_ended.append(relay.completer.unwritten)
            # The listener closed its connection on its way out, not when the relay closed.
            await eventually(lambda: not listening(engine), 20, "the listener to disconnect")

    asyncio.run(scenario())
    assert ended[:3] == ["claimer", "lanes", "completer"], ended
    assert set(ended[3:]) == HELPERS, ended
    assert unwritten_when_the_completer_ended == [0]
    written = row(engine, "slow")
    assert (written["holat"], written["urinish"]) == ("bajarildi", 1)
    assert written["marker_message"] is not None


def test_a_second_stop_cuts_the_grace_short_and_keeps_the_order(
    engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="stuck", payload=text(2))
    sender, ended = Gated(), list[str]()  # never released: only the second stop ends the send

    async def scenario() -> None:
        config = RelayConfig(database_url=db_url, rate_limits=UNLIMITED, grace_seconds=240)
        async with Relay(config, sender) as relay:
            record_ends(relay, ended, monkeypatch)
            runner = asyncio.create_task(relay.run())
            await eventually(lambda: sender.started, 20, "a send")
            relay.stop()
            await eventually(lambda: "claimer" in ended, 20, "the claimer to stop")
            relay.stop()
            await asyncio.wait_for(runner, 60)  # well before the 240 s grace

    asyncio.run(scenario())
    assert ended[:3] == ["claimer", "lanes", "completer"], ended
    assert set(ended[3:]) == HELPERS, ended
    cut_off = row(engine, "stuck")
    assert (cut_off["holat"], cut_off["urinish"]) == ("kutmoqda", 1)
    assert "may have been delivered" in cut_off["oxirgi_xato"]


def test_a_poll_only_relay_stops_the_same_way_without_a_listener(
    engine: sa.Engine, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.begin() as conn:
        enqueue(conn, key="polled", payload=text(3))
    sender, ended = Gated(), list[str]()
    sender.release.set()

    async def scenario() -> None:
        config = RelayConfig(database_url=db_url, rate_limits=UNLIMITED, poll_only=True)
        async with Relay(config, sender) as relay:
            assert relay.listener is None
            record_ends(relay, ended, monkeypatch)
            await asyncio.wait_for(relay.run(drain=True), 30)

    asyncio.run(scenario())
    assert ended[:3] == ["claimer", "lanes", "completer"], ended
    assert set(ended[3:]) == HELPERS - {"listener"}, ended
    assert row(engine, "polled")["holat"] == "bajarildi"
