"""The demo's second part: a short conversation with the vazifalar bot, in a few seconds.

The bot (python-telegram-bot's Application, long polling) and a relay run in this process
against the fake Bot API; a person signs up, adds a task due in two seconds, gets the reminder
with its buttons, puts it off for two seconds ("Keyinroq"), gets it again and marks it done.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from outbox.config import RelayConfig
from outbox.db import create_engine
from outbox.relay import Relay
from outbox.telegram import TelegramSender
from outbox_testing.fake_telegram import Delivered, FakeTelegram
from reminders.bot import BotConfig, build_application
from reminders.messages import ENV_SNOOZE

__all__ = ["run_conversation"]

CHAT = 2001
NAME = "Jasur"
T = TypeVar("T")
_TAG = re.compile(r"<[^>]+>")


async def _until(found: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
    deadline = time.monotonic() + timeout
    while (result := found()) is None or result == []:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the demo waited in vain for {what}")
        await asyncio.sleep(0.05)
    return result


def _plain(text: str) -> str:
    return html.unescape(_TAG.sub("", text))


def _show(who: str, text: str, started: float, most: int = 4) -> None:
    lines = _plain(text).splitlines() or [""]
    if len(lines) > most:
        lines = [*lines[: most - 1], "… (/help)"]
    print(f"  +{time.monotonic() - started:4.1f}s  {who:>5}: {lines[0]}")
    for line in lines[1:]:
        print(f"  {'':6} {'':>5}  {line}")


def _buttons(message: Delivered | dict[str, Any]) -> str:
    markup = message.reply_markup if isinstance(message, Delivered) else message.get("reply_markup")
    rows = (markup or {}).get("inline_keyboard", [])
    return "  ".join(f"[{button['text']}]" for row in rows for button in row)


class _Script:
    def __init__(self, fake: FakeTelegram) -> None:
        self.fake = fake
        self.started = time.monotonic()

    def received(self) -> list[Delivered]:
        return self.fake.delivered_to(CHAT)

    async def say(self, text: str) -> None:
        before = len(self.received())
        _show(NAME, text, self.started)
        self.fake.post_message(CHAT, text, first_name=NAME)
        replies = await _until(
            lambda: [m for m in self.received()[before:] if m.reply_markup is None],
            f"the bot's reply to {text}",
        )
        _show("bot", replies[0].text, self.started)

    async def reminder(self, count: int) -> Delivered:
        reminders = await _until(
            lambda: [m for m in self.received() if m.reply_markup is not None][count - 1 :],
            "the reminder",
        )
        _show("bot", reminders[0].text, self.started)
        print(f"  {'':13} {_buttons(reminders[0])}")
        return reminders[0]

    async def press(self, message: Delivered, label: str) -> None:
        _show(NAME, f"presses {label}", self.started)
        query = self.fake.press_button(CHAT, message.message_id, text=label)
        answers = await _until(
            lambda: [a for a in self.fake.callback_answers if a.callback_query_id == query],
            "the answer to the press",
        )
        edits = len([e for e in self.fake.edits if e.message_id == message.message_id])
        await _until(
            lambda: edits or [e for e in self.fake.edits if e.message_id == message.message_id],
            "the edited reminder",
        )
        _show("bot", f"(notice) {answers[0].text}", self.started)
        edited = self.fake.message(CHAT, message.message_id) or {}
        _show("bot", f"(reminder now reads) {edited.get('text', '')}", self.started)


async def run_conversation(url: str, token: str, fake: FakeTelegram) -> None:
    """Play the conversation against the running fake; the relay delivers every reply."""
    os.environ[ENV_SNOOZE] = "2s,1h"  # the demo's "later" is two seconds
    engine = create_engine(url)
    relay = Relay(RelayConfig(database_url=url), TelegramSender(token, api_url=fake.api_url))
    app = build_application(
        BotConfig(database_url=url, token=token, api_url=fake.api_url, poll_timeout=1), engine
    )
    try:
        async with relay, app:
            relaying = asyncio.create_task(relay.run())
            await app.start()
            assert app.updater is not None
            await app.updater.start_polling(poll_interval=0.0, timeout=1)
            try:
                script = _Script(fake)
                await script.say("/start")
                await script.say("/add Non olish 2s")
                first = await script.reminder(1)
                await script.press(first, "⏰ Keyinroq (2 soniya)")
                second = await script.reminder(2)
                await script.press(second, "✅ Bajarildi")
                await script.say("/list")
            finally:
                await app.updater.stop()
                await app.stop()
                relay.stop()
                await relaying
    finally:
        engine.dispose()
