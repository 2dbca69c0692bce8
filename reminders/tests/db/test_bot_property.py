"""Random updates to the bot's handlers: each gets an answer that fits, none touches another user.

The bot's ``Application`` runs in this process (``process_update``, no polling: fast enough for
hypothesis) against a real database, and answers button presses through the fake Bot API over
real HTTP. Replies are not sent (no relay): each is read from the outbox and checked against
what Telegram accepts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from telegram import Update

from outbox.telegram import bot_id_of
from outbox_testing.fake_telegram import FakeTelegram
from reminders.bot import BotConfig, build_application
from reminders.messages import CALLBACK_ANSWER_LIMIT
from reminders.tests.support import telegram_accepts
from tests.support import TEST_TOKEN

ALICE, BOBUR, STRANGER, GROUP = 501, 502, 503, -4001  # Bobur's things must never change

_WORDS = st.sampled_from(
    [
        "²",
        "٣",
        "1",
        "2",
        "#1",
        "#2",
        "0",
        "-1",
        "ertaga",
        "bugun",
        "09:00",
        "23:59",
        "00:00",
        "25:61",
        "0001-01-01",
        "9999-12-31",
        "2026-02-30",
        "30m",
        "1h30m",
        "0m",
        "9999d" * 300,
        "America/New_York",
        "Pacific/Kiritimati",
        "Etc/GMT+12",
        "Mars/Olympus",
        "localtime",
        "../../etc/passwd",
        "\x00",
        "<b>",
        "&amp;",
        "@vazifalar_bot",
        "99999999999999999999",
        "1" * 5000,
    ]
)
_ARGUMENTS = st.one_of(
    _WORDS,
    st.text(max_size=20),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.text(alphabet="0123456789dhms:-#", min_size=1, max_size=24),
    st.builds(
        lambda piece, n: piece * n,
        st.sampled_from(["x", "&", "<b>", "é", "😀", "٣"]),
        st.integers(min_value=100, max_value=4100),
    ),
)
_COMMANDS = st.sampled_from(
    ["/start", "/help", "/add", "/list", "/done", "/delete", "/tz", "/nima", "/add@bot", "", "/"]
)
_TEXTS = st.builds(
    lambda command, words: " ".join([command, *words])[:4096],  # Telegram's limit on input
    _COMMANDS,
    st.lists(_ARGUMENTS, max_size=4),
)
_NUMBERS = st.one_of(
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=-(10**25), max_value=10**25),
    st.sampled_from([2**63 - 1, 2**63, 10**20]),
)
_DATA = st.one_of(
    st.builds("done:{}".format, _NUMBERS),
    st.builds("snooze:{}:{}".format, _NUMBERS, _NUMBERS),
    st.builds("snooze:{}:{}".format, _NUMBERS, st.sampled_from([1, 600, 604800, 604801])),
    st.text(max_size=64),
    st.sampled_from(["done:²", "done:٣", "snooze:1:²", "done:1:2", "done:", ":", "\x00"]),
)
# A person writes (in a private chat or a group), or presses a button of Alice's messages.
_UPDATES = st.one_of(
    st.tuples(st.just("text"), st.sampled_from([ALICE, STRANGER, GROUP]), _TEXTS),
    st.tuples(st.just("button"), st.just(ALICE), _DATA),
    st.tuples(st.just("photo"), st.sampled_from([ALICE, GROUP]), _TEXTS),
)


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class _Bot:
    """The bot's handlers on an event loop of the test's own, with a way to feed them."""

    def __init__(self, db_url: str, fake: FakeTelegram, engine: sa.Engine) -> None:
        self.fake, self.engine = fake, engine
        config = BotConfig(database_url=db_url, token=TEST_TOKEN, api_url=fake.api_url)
        self.app = build_application(config, engine)
        self.bot_id = int(bot_id_of(TEST_TOKEN))
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.app.initialize())

    def close(self) -> None:
        self.loop.run_until_complete(self.app.shutdown())
        self.loop.close()

    def _process(self, update_id: int, *, photo: bool = False) -> None:
        [data] = [u for u in self.fake.posted_updates() if u["update_id"] == update_id]
        if photo:  # a message without text: a photo with its caption
            message = data["message"]
            message["caption"] = message.pop("text")
            message.pop("entities", None)
            message["photo"] = [
                {"file_id": "f1", "file_unique_id": "u1", "width": 90, "height": 90}
            ]
        update = Update.de_json(data, self.app.bot)
        self.loop.run_until_complete(self.app.process_update(update))

    def write(self, chat_id: int, text: str, *, photo: bool = False) -> str | None:
        """The reply's text, read from the outbox; None if there is none."""
        sender = chat_id if chat_id > 0 else ALICE  # in the group, Alice writes
        update_id = self.fake.post_message(chat_id, text, user_id=sender)
        self._process(update_id, photo=photo)
        with self.engine.begin() as conn:
            payload = conn.execute(
                sa.text("SELECT payload FROM outbox WHERE kalit = :k"),
                {"k": f"bot:{self.bot_id}:{update_id}"},
            ).scalar_one_or_none()
        if payload is None:
            return None
        assert payload["chat_id"] == chat_id
        return str(payload["text"])

    def press(self, chat_id: int, data: str) -> str:
        """The callback answer's text, as the fake received it."""
        message = self.loop.run_until_complete(self.app.bot.send_message(chat_id, "Eslatma"))
        query_id = self.fake.press_button(chat_id, message.message_id, data=data)
        [data_sent] = [
            u
            for u in self.fake.posted_updates()
            if u.get("callback_query", {}).get("id") == query_id
        ]
        self._process(data_sent["update_id"])
        answers = [a for a in self.fake.callback_answers if a.callback_query_id == query_id]
        assert len(answers) == 1, f"no answer to the button {data!r}"
        return answers[0].text or ""


@pytest.fixture
def bot(db_url: str, fake_telegram: FakeTelegram, engine: sa.Engine) -> Iterator[_Bot]:
    driver = _Bot(db_url, fake_telegram, engine)
    try:
        yield driver
    finally:
        driver.close()


def _bobur_owns(engine: sa.Engine) -> list[Any]:
    """Everything of Bobur's: his user row, his tasks, the messages to his chat."""
    with engine.begin() as conn:
        user = conn.execute(
            sa.text("SELECT id, ism, vaqt_zonasi, faol FROM foydalanuvchi WHERE chat_id = :c"),
            {"c": BOBUR},
        ).all()
        tasks = conn.execute(
            sa.text(
                "SELECT v.* FROM vazifa v JOIN foydalanuvchi f ON f.id = v.foydalanuvchi_id"
                " WHERE f.chat_id = :c ORDER BY v.id"
            ),
            {"c": BOBUR},
        ).all()
        messages = conn.execute(
            sa.text(
                "SELECT id, kalit, holat, keyingi_urinish, payload::text FROM outbox"
                " WHERE (payload->>'chat_id')::bigint = :c ORDER BY id"
            ),
            {"c": BOBUR},
        ).all()
    return [tuple(r) for r in [*user, *tasks, *messages]]


def test_random_updates_get_answers_and_touch_nobody_else(bot: _Bot, engine: sa.Engine) -> None:
    # Bobur's tasks are #1 and #2: the ids random input names most often.
    for chat_id, text, expected in [
        (BOBUR, "/start", "Assalomu alaykum"),
        (BOBUR, "/add Bobur hisoboti ertaga 09:00", "#1"),
        (BOBUR, "/add Bobur noni 30m", "#2"),
        (ALICE, "/start", "Assalomu alaykum"),
        (ALICE, "/add Alisa kitobi ertaga 10:00", "#3"),
    ]:
        assert expected in (bot.write(chat_id, text) or ""), text
    bobur_before = _bobur_owns(engine)
    errors = _Errors()
    logging.getLogger("reminders.bot").addHandler(errors)

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(_UPDATES)
    def one_update(update: tuple[str, int, str]) -> None:
        kind, chat_id, content = update
        if kind in ("text", "photo"):
            reply = bot.write(chat_id, content, photo=kind == "photo")
            if chat_id == GROUP and (kind == "photo" or not content.startswith("/")):
                assert reply is None, (content, reply)  # a group's talk is not the bot's
            else:
                assert reply is not None, f"no reply to {content!r}"
                assert telegram_accepts(reply), (content, reply)
        else:
            answer = bot.press(chat_id, content)
            assert 0 < len(answer) <= CALLBACK_ANSWER_LIMIT, (content, answer)
        assert errors.lines == [], (content, errors.lines)
        assert _bobur_owns(engine) == bobur_before, content

    try:
        one_update()
    finally:
        logging.getLogger("reminders.bot").removeHandler(errors)
