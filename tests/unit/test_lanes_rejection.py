"""A token Telegram rejects stops its bot's lane alone; a relay with no lane left is told to
stop (with one line); a lane retired on its way out (its file changed) ends nothing."""

from __future__ import annotations

import asyncio

from outbox.config import RelayConfig
from outbox.errors import TelegramUnauthorized
from outbox.relay.completer import Completer
from outbox.relay.health import Health
from outbox.relay.lanes import GivenBots, Lanes, LaneState
from outbox.relay.store import Store
from outbox.relay.summary import RunSummary
from outbox.telegram import NullSender


class Bot(NullSender):
    def __init__(self, bot_id: str, *, rejected: bool = False) -> None:
        super().__init__()
        self.bot_id = bot_id
        self.rejected = rejected

    async def start(self) -> None:
        if self.rejected:
            raise TelegramUnauthorized("401")


def _lanes(*bots: Bot) -> tuple[Lanes, list[BaseException]]:
    stopping, total = asyncio.Event(), RunSummary()
    store = Store("postgresql:///unused", "unused", stopping)
    config = RelayConfig(database_url="postgresql:///unused")
    told: list[BaseException] = []
    lanes = Lanes(
        GivenBots(list(bots)),
        config=config,
        claim_store=store,
        record_store=store,
        completer=Completer(
            store,
            schema="public",
            flush_interval=1.0,
            grace_seconds=0,
            stopping=stopping,
            total=total,
        ),
        total=total,
        stopping=stopping,
        wakeup=asyncio.Event(),
        health=Health(stale_after=10.0),
        on_none_left=told.append,
    )
    return lanes, told


def test_a_rejected_token_stops_its_lane_and_the_last_one_stops_the_relay() -> None:
    async def scenario() -> None:
        lanes, told = _lanes(Bot("1001"), Bot("1002", rejected=True))
        await lanes.started()
        states = {bot: lane.state for bot, lane in lanes.lanes.items()}
        assert states == {"1001": LaneState.SERVING, "1002": LaneState.REJECTED}
        assert lanes.bots() == (("1001", "1002"), ("1002",))
        assert told == []  # bot 1001 still serves
        lanes._reject(lanes.lanes["1001"])  # its sends are refused too
        [err] = told
        assert isinstance(err, TelegramUnauthorized)
        assert str(err).startswith("Telegram rejected the bot token")
        await lanes.finish()

    asyncio.run(scenario())


def test_a_single_token_that_is_rejected_at_start_stops_the_relay() -> None:
    async def scenario() -> None:
        lanes, told = _lanes(Bot("1001", rejected=True))
        assert lanes.source.takes_unnamed_rows  # a single token also sends unnamed rows
        await lanes.started()
        assert len(told) == 1
        await lanes.finish()

    asyncio.run(scenario())


def test_a_retired_lane_rejected_on_its_way_out_ends_nothing() -> None:
    async def scenario() -> None:
        lanes, told = _lanes(Bot("1001"))
        await lanes.started()
        old = lanes.lanes.pop("1001")  # as when its tokens file is removed
        lanes._reject(old)
        assert told == []
        lanes._retire(old)
        await lanes.finish()

    asyncio.run(scenario())
