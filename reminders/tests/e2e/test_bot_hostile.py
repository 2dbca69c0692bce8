"""Hostile and unlucky input to the running bot: every update gets an answer that fits.

The bot and a relay run as processes against the fake Bot API over real HTTP, as in
test_bot.py; the people here type what a careless or a malicious person would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox_testing.fake_telegram import FakeTelegram
from reminders.tests.support import BotProcess, Person, bot_processes, telegram_accepts
from tests.support import Relays, relay_env, wait_until

BOT_SETTINGS = {"REMINDERS_POLL_TIMEOUT": "1", "REMINDERS_SNOOZE": "2s,1h"}


@pytest.fixture
def bot(
    db_url: str, fake_telegram: FakeTelegram, relays: Relays, tmp_path: Path
) -> Iterator[BotProcess]:
    relays.start()
    env = relay_env(db_url, fake_telegram.api_url, **BOT_SETTINGS)
    with bot_processes(env, tmp_path, fake_telegram) as (one,):
        yield one


@pytest.fixture
def aziza(fake_telegram: FakeTelegram) -> Person:
    return Person(fake_telegram, 501, "Aziza")


def _signed_up(person: Person) -> None:
    assert "Assalomu alaykum" in person.say("/start")


def _tasks(engine: sa.Engine) -> list[tuple[object, ...]]:
    with engine.begin() as conn:
        rows = conn.execute(sa.text("SELECT id, sarlavha, muddat, bajarildi FROM vazifa"))
        return [tuple(r) for r in rows]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/add X 0001-01-01 00:00", "o'tib ketdi"),
        ("/add X " + "9999d" * 300, "besh yildan uzoq"),
        ("/add X 9999-12-31 23:59", "besh yildan uzoq"),
        ("/add X \u0663\u0660m", "vaqt emas"),
        ("/add X\x00 30m", "ko'rinmas belgi"),
        ("/done ²", "Raqamini yozing"),
        ("/done \u0663", "Raqamini yozing"),
        ("/delete 99999999999999999999", "raqamli vazifangiz yo'q"),
    ],
    ids=[
        "year-1",
        "9999d-x300",
        "year-9999",
        "arabic-digits",
        "nul",
        "superscript",
        "arabic",
        "huge",
    ],
)
def test_wrong_input_gets_an_answer_with_an_example(
    bot: BotProcess, aziza: Person, engine: sa.Engine, text: str, expected: str
) -> None:
    _signed_up(aziza)
    reply = aziza.say(text)
    assert expected in reply, reply
    assert "Masalan" in reply or "/list" in reply, reply
    assert _tasks(engine) == []
    assert "Traceback" not in bot.log, bot.log


def test_a_date_at_the_end_of_time_in_a_zone_west_of_utc(bot: BotProcess, aziza: Person) -> None:
    _signed_up(aziza)
    assert "America/New_York" in aziza.say("/tz America/New_York")
    reply = aziza.say("/add X 9999-12-31 23:59")
    assert "besh yildan uzoq" in reply and "Masalan" in reply, reply


@pytest.mark.parametrize(
    "data",
    [
        "done:99999999999999999999",
        "snooze:99999999999999999999:600",
        "snooze:1:99999999999999",
        "done:²",
        "snooze:1:-600",
        "done:1:2:3",
        "\x00",
    ],
)
def test_a_forged_button_gets_an_answer(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine, data: str
) -> None:
    _signed_up(aziza)
    aziza.say("/add Non ertaga 09:00")
    before = _tasks(engine)
    [message, *_] = aziza.received()
    query_id = fake_telegram.press_button(aziza.chat_id, message.message_id, data=data)
    [answer] = wait_until(
        lambda: [a for a in fake_telegram.callback_answers if a.callback_query_id == query_id],
        15,
        f"the answer to the button {data!r}",
        explain=lambda: bot.log,
    )
    assert answer.text == "Bu tugma eskirgan."
    assert _tasks(engine) == before


@pytest.mark.parametrize(
    "text",
    ["/" + "x" * 4095, "/tz " + "Z" * 4092, "/tz " + "&" * 4092, "/add X " + "y" * 4080],
    ids=["command", "zone", "zone-of-ampersands", "last-word"],
)
def test_replies_that_echo_input_fit_telegram(
    bot: BotProcess, aziza: Person, engine: sa.Engine, text: str
) -> None:
    _signed_up(aziza)
    reply = aziza.say(text)
    assert "…" in reply and "Masalan" in reply, reply
    assert len(reply) < 1000
    with engine.begin() as conn:
        failed = conn.execute(sa.text("SELECT count(*) FROM outbox WHERE holat = 'xato'"))
        assert failed.scalar_one() == 0


def test_a_long_list_fits_one_message(bot: BotProcess, aziza: Person) -> None:
    _signed_up(aziza)
    for n in range(25):
        assert "Qo'shildi" in aziza.say(f"/add {n:02d}{'&' * 190} ertaga 09:00")
    listed = aziza.say("/list")
    assert "#1 " in listed and "va yana" in listed, listed
    assert "/done N" in listed


_FAILING_TRIGGER = """
CREATE FUNCTION fail_on_purpose() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'a bug in a trigger'; END $$;
CREATE TRIGGER fail_on_purpose BEFORE {event} ON {table}
FOR EACH ROW EXECUTE FUNCTION fail_on_purpose();
"""


def _break(engine: sa.Engine, table: str, event: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(_FAILING_TRIGGER.format(table=table, event=event)))


def test_an_unexpected_failure_gets_an_apology_through_the_outbox(
    bot: BotProcess, aziza: Person, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    _break(engine, "vazifa", "INSERT")
    assert "Kechirasiz" in aziza.say("/add Non ertaga 09:00")
    wait_until(lambda: "not handled" in bot.log, 15, "the log line", explain=lambda: bot.log)
    assert "a bug in a trigger" in bot.log

    def sent_by_the_relay() -> int:
        with engine.begin() as conn:
            sent = conn.execute(sa.text("SELECT count(*) FROM outbox WHERE holat = 'bajarildi'"))
            return int(sent.scalar_one())

    # The welcome and the apology; the relay records a send just after Telegram's answer.
    wait_until(lambda: sent_by_the_relay() == 2, 15, "both replies recorded as sent")


def test_a_failure_of_the_database_itself_still_gets_an_apology(
    bot: BotProcess, aziza: Person, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    _break(engine, "bot_yangilanish", "INSERT")  # nothing can be claimed nor enqueued now
    assert "Kechirasiz" in aziza.say("/list")


def test_a_button_whose_handling_fails_gets_an_apology(
    bot: BotProcess, aziza: Person, fake_telegram: FakeTelegram, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    aziza.say("/add Non 1s")
    [reminder] = wait_until(
        lambda: [m for m in aziza.received() if m.reply_markup is not None], 20, "the reminder"
    )
    _break(engine, "vazifa", "UPDATE")
    assert "Kechirasiz" in aziza.press(reminder, "✅ Bajarildi", edits=False)


def test_every_reply_was_one_telegram_accepts(
    bot: BotProcess, aziza: Person, engine: sa.Engine
) -> None:
    _signed_up(aziza)
    for text in ["/" + "<b>" * 1000, "/tz <" + "é" * 4000, "/add <i>&amp; 5m"]:
        aziza.say(text)
    with engine.begin() as conn:
        payloads = conn.execute(sa.text("SELECT payload FROM outbox")).scalars().all()
    assert len(payloads) == 5  # four replies and the reminder of the task added
    assert all(telegram_accepts(p["text"]) for p in payloads), payloads
