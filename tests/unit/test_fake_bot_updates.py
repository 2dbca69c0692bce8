"""The fake's side for bots, checked against python-telegram-bot's own objects over HTTP.

An object python-telegram-bot parses with nothing left over in ``api_kwargs``, and writes back
(``to_dict``) with every field the fake sent unchanged, has Telegram's shape as the library
knows it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, Conflict

from outbox_testing.fake_telegram import FakeTelegram
from tests.support import TEST_TOKEN


def _leftovers(obj: Any) -> list[str]:
    """Fields python-telegram-bot did not recognise, anywhere in the object."""
    found = [f"{type(obj).__name__}.{key}" for key in obj.api_kwargs or {}]
    for cls in type(obj).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot.startswith("_"):  # the bot, the frozen flag: not Telegram's fields
                continue
            value = getattr(obj, slot, None)
            for item in value if isinstance(value, tuple) else (value,):
                if hasattr(item, "api_kwargs"):
                    found += _leftovers(item)
    return found


def _within(sent: Any, parsed: Any) -> bool:
    """Every field of ``sent`` is in ``parsed`` with the same value (``to_dict`` adds defaults)."""
    if isinstance(sent, dict):
        return isinstance(parsed, dict) and all(
            key in parsed and _within(value, parsed[key]) for key, value in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(parsed, list | tuple)
            and len(sent) == len(parsed)
            and all(_within(a, b) for a, b in zip(sent, parsed, strict=True))
        )
    return bool(sent == parsed)


def test_updates_presses_and_edits_speak_telegrams_json(fake_telegram: FakeTelegram) -> None:
    async def scenario() -> None:
        bot = Bot(TEST_TOKEN, base_url=fake_telegram.api_url + "/bot")
        async with bot:
            keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("Ha", callback_data="d:1")]])
            sent = await bot.send_message(chat_id=42, text="Savol", reply_markup=keyboard)
            assert sent.reply_markup == keyboard
            fake_telegram.post_message(42, "/add Non 30m", first_name="Aziza")
            query_id = fake_telegram.press_button(42, sent.message_id, text="Ha")
            fake_telegram.post_migration(-5, -1000000000005)

            updates = await bot.get_updates(timeout=0)
            raw = fake_telegram.posted_updates()
            assert len(updates) == len(raw) == 3
            assert all(_within(r, u.to_dict()) for r, u in zip(raw, updates, strict=True))
            assert [_leftovers(u) for u in updates] == [[], [], []]
            message, press, moved = updates
            assert message.message and message.message.text == "/add Non 30m"
            assert message.message.entities[0].type == "bot_command"
            assert message.message.entities[0].length == len("/add")
            assert press.callback_query and press.callback_query.data == "d:1"
            assert press.callback_query.id == query_id
            assert moved.message and moved.message.migrate_to_chat_id == -1000000000005

            # Confirming with the offset empties the queue; a long poll with nothing waits.
            assert await bot.get_updates(offset=moved.update_id + 1, timeout=0) == ()
            assert fake_telegram.pending_updates() == 0

            assert await bot.answer_callback_query(query_id, text="Bajarildi") is True
            with pytest.raises(BadRequest, match=r"(?i)query is too old"):
                await bot.answer_callback_query(query_id, text="yana")
            [answer] = fake_telegram.callback_answers
            assert (answer.text, answer.show_alert) == ("Bajarildi", False)

            edited = await bot.edit_message_text("Javob", chat_id=42, message_id=sent.message_id)
            assert not isinstance(edited, bool)
            assert edited.text == "Javob" and edited.reply_markup is None
            assert edited.edit_date is not None and _leftovers(edited) == []
            with pytest.raises(BadRequest, match="not modified"):
                await bot.edit_message_text("Javob", chat_id=42, message_id=sent.message_id)
            with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
                await bot.edit_message_text("Javob", chat_id=42, message_id=999)

            # A webhook shuts getUpdates out until it is deleted, as on Telegram.
            assert await bot.set_webhook("http://127.0.0.1:9/hook", secret_token="s3")
            assert (await bot.get_webhook_info()).url == "http://127.0.0.1:9/hook"
            with pytest.raises(Conflict, match="webhook is active"):
                await bot.get_updates(timeout=0)
            assert await bot.delete_webhook()
            assert await bot.get_updates(timeout=0) == ()

    asyncio.run(scenario())


def test_a_button_with_too_much_data_is_refused(fake_telegram: FakeTelegram) -> None:
    async def scenario() -> None:
        bot = Bot(TEST_TOKEN, base_url=fake_telegram.api_url + "/bot")
        async with bot:
            keyboard = InlineKeyboardMarkup([[InlineKeyboardButton("a", callback_data="x" * 65)]])
            with pytest.raises(BadRequest, match=r"(?i)button_data_invalid"):
                await bot.send_message(chat_id=42, text="Savol", reply_markup=keyboard)
        assert fake_telegram.delivered == []

    asyncio.run(scenario())


def test_people_can_be_played_through_the_control_api(fake_telegram: FakeTelegram) -> None:
    """What a developer uses against `outbox fake-telegram` in another process."""
    with httpx.Client(base_url=fake_telegram.api_url) as api:
        bot = f"/bot{TEST_TOKEN}"
        posted = api.post("/_fake/message", json={"chat_id": 42, "text": "/start"}).json()
        [update] = api.post(f"{bot}/getUpdates", data={"timeout": "0"}).json()["result"]
        assert update["update_id"] == posted["update_id"]
        assert update["message"]["text"] == "/start"
        keyboard = {"inline_keyboard": [[{"text": "Ha", "callback_data": "d:1"}]]}
        sent = api.post(
            f"{bot}/sendMessage",
            data={"chat_id": "42", "text": "Savol", "reply_markup": json.dumps(keyboard)},
        ).json()["result"]
        assert sent["reply_markup"] == keyboard
        pressed = api.post(
            "/_fake/press", json={"chat_id": 42, "message_id": sent["message_id"], "text": "Ha"}
        ).json()
        query = pressed["callback_query_id"]
        assert api.post(f"{bot}/answerCallbackQuery", data={"callback_query_id": query}).json()[
            "ok"
        ]
        edit = {"chat_id": "42", "message_id": str(sent["message_id"]), "text": "Javob"}
        assert api.post(f"{bot}/editMessageText", data=edit).json()["result"]["text"] == "Javob"
        assert [a["callback_query_id"] for a in api.get("/_fake/answers").json()] == [query]
        assert [e["text"] for e in api.get("/_fake/edits").json()] == ["Javob"]
        missing = api.post("/_fake/press", json={"chat_id": 42, "message_id": 99, "text": "Ha"})
        assert missing.status_code == 400


def test_my_chat_member_and_allowed_updates(fake_telegram: FakeTelegram) -> None:
    async def scenario() -> None:
        bot = Bot(TEST_TOKEN, base_url=fake_telegram.api_url + "/bot")
        async with bot:
            fake_telegram.post_my_chat_member(42, old="kicked", new="member")
            fake_telegram.post_my_chat_member(-1000000000007, old="left", new="administrator")
            updates = await bot.get_updates(timeout=0)
            raw = fake_telegram.posted_updates()
            assert all(_within(r, u.to_dict()) for r, u in zip(raw, updates, strict=True))
            assert [_leftovers(u) for u in updates] == [[], []]
            unblocked, added = (u.my_chat_member for u in updates)
            assert unblocked is not None and added is not None
            assert (unblocked.old_chat_member.status, unblocked.new_chat_member.status) == (
                "kicked",
                "member",
            )
            assert added.chat.type == "supergroup"
            assert added.new_chat_member.status == "administrator"
            # A bot that asks for messages only is never offered another kind, as with
            # Telegram, and the choice holds for its later polls.
            offset = updates[-1].update_id + 1
            await bot.get_updates(offset=offset, timeout=0, allowed_updates=["message"])
            fake_telegram.post_my_chat_member(43, old="member", new="kicked")
            fake_telegram.post_message(43, "salom")
            [only] = await bot.get_updates(offset=offset, timeout=0)
            assert only.message is not None and only.message.text == "salom"

    asyncio.run(scenario())
