"""The vazifalar bot through the fake Bot API over real HTTP: bot and relay processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox.fake_telegram import FakeTelegram
from tests.bot_support import BotProcess, Person, bot_processes
from tests.support import Relays, relay_env

BOT_SETTINGS = {"REMINDERS_POLL_TIMEOUT": "1", "REMINDERS_SNOOZE": "2s,1h"}


@pytest.fixture
def bot_env(db_url: str, fake_telegram: FakeTelegram) -> dict[str, str]:
    return relay_env(db_url, fake_telegram.api_url, **BOT_SETTINGS)


@pytest.fixture
def bot(
    bot_env: dict[str, str], fake_telegram: FakeTelegram, relays: Relays, tmp_path: Path
) -> Iterator[BotProcess]:
    relays.start()
    with bot_processes(bot_env, tmp_path, fake_telegram) as (one,):
        yield one


@pytest.fixture
def aziza(fake_telegram: FakeTelegram) -> Person:
    return Person(fake_telegram, 501, "Aziza")


def test_start_signs_up(bot: BotProcess, aziza: Person, engine: sa.Engine) -> None:
    reply = aziza.say("/start")
    assert "Assalomu alaykum, Aziza" in reply and "Asia/Tashkent" in reply
    with engine.begin() as conn:
        users = conn.execute(sa.text("SELECT ism, chat_id, vaqt_zonasi, faol FROM foydalanuvchi")).all()
    assert [tuple(u) for u in users] == [("Aziza", 501, "Asia/Tashkent", True)]
    assert "ro'yxatdan o'tgansiz" in aziza.say("/start")
