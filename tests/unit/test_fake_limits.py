"""The fake Bot API keeps Telegram's limits for each bot apart, as Telegram does: a bot is the
numeric part of the token, and one bot's messages take nothing of another's budget."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from outbox_testing.fake_telegram import FakeTelegram

BOTS = {"111": "111:first-bot-token", "222": "222:second-bot-token"}


@pytest.fixture
def fake() -> Iterator[FakeTelegram]:
    # No token given: the fake serves any well-formed token, so several bots can share it.
    running = FakeTelegram(enforce_limits=True).start_in_thread()
    yield running
    running.stop_thread()


async def send_all(fake: FakeTelegram, chats: range) -> dict[str, list[int]]:
    """Every bot sends one message to each chat, all at once; the HTTP statuses, per bot."""
    limits = httpx.Limits(max_connections=len(chats) * len(BOTS))
    async with httpx.AsyncClient(base_url=fake.api_url, limits=limits, timeout=10) as client:

        async def send(token: str, chat: int) -> int:
            answer = await client.post(
                f"/bot{token}/sendMessage", json={"chat_id": chat, "text": f"to {chat}"}
            )
            return answer.status_code

        statuses = await asyncio.gather(
            *(send(token, chat) for token in BOTS.values() for chat in chats)
        )
    return {bot: statuses[i * len(chats) : (i + 1) * len(chats)] for i, bot in enumerate(BOTS)}


def test_two_bots_each_get_their_own_30_per_second(fake: FakeTelegram) -> None:
    # 40 messages per bot within a moment, to the same 40 private chats for both bots: each
    # bot's 30/s and each bot's 1/s per chat are its own.
    statuses = asyncio.run(send_all(fake, range(2000, 2040)))
    for bot, answered in statuses.items():
        assert Counter(answered) == {200: 30, 429: 10}, (bot, Counter(answered))
    delivered = Counter(d.bot_id for d in fake.delivered)
    assert delivered == {111: 30, 222: 30}
    # Every request names its bot, also through the control API a bench reads.
    with httpx.Client(base_url=fake.api_url + "/_fake") as control:
        records = control.get("/requests").json()
    refused = Counter(r["bot_id"] for r in records if r["status"] == 429)
    assert refused == {111: 10, 222: 10}


def test_a_private_chat_takes_one_message_a_second_from_each_bot(fake: FakeTelegram) -> None:
    first = asyncio.run(send_all(fake, range(3000, 3001)))
    # Within the same second the chat refuses each bot's second message.
    again = asyncio.run(send_all(fake, range(3000, 3001)))
    assert first == {"111": [200], "222": [200]}
    assert again == {"111": [429], "222": [429]}
