"""The bot's pure parts: the /add time grammar, the buttons and their payload contract."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from outbox.errors import InvalidInput
from outbox.payload import MalformedPayload, send_message_args
from reminders.messages import parse_button, reminder_keyboard, reminder_payload, snooze_choices
from reminders.when import parse_title_and_when

TASHKENT = ZoneInfo("Asia/Tashkent")
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=TASHKENT)  # 05:00 UTC


def _when(text: str, now: datetime = NOW, tz: str = "Asia/Tashkent") -> tuple[str, datetime]:
    return parse_title_and_when(text.split(), tz, now)


@pytest.mark.parametrize(
    ("text", "title", "due"),
    [
        ("Non 30m", "Non", NOW + timedelta(minutes=30)),
        ("Non olish 1h30m", "Non olish", NOW + timedelta(hours=1, minutes=30)),
        ("Hisobot 1d", "Hisobot", NOW + timedelta(days=1)),
        ("Choy 45s", "Choy", NOW + timedelta(seconds=45)),
        ("Hisobot 18:00", "Hisobot", datetime(2026, 11, 30, 18, 0, tzinfo=TASHKENT)),
        ("Hisobot bugun 19:30", "Hisobot", datetime(2026, 11, 30, 19, 30, tzinfo=TASHKENT)),
        ("Hisobot today 18:00", "Hisobot", datetime(2026, 11, 30, 18, 0, tzinfo=TASHKENT)),
        ("Hisobot ertaga 09:00", "Hisobot", datetime(2026, 12, 1, 9, 0, tzinfo=TASHKENT)),
        ("Hisobot ERTAGA 09:00", "Hisobot", datetime(2026, 12, 1, 9, 0, tzinfo=TASHKENT)),
        ("Hisobot tomorrow 09:00", "Hisobot", datetime(2026, 12, 1, 9, 0, tzinfo=TASHKENT)),
        ("Hisobot 2026-12-01 09:00", "Hisobot", datetime(2026, 12, 1, 9, 0, tzinfo=TASHKENT)),
        ("Ertaga 2026-12-01 09:00", "Ertaga", datetime(2026, 12, 1, 9, 0, tzinfo=TASHKENT)),
    ],
)
def test_the_add_grammar(text: str, title: str, due: datetime) -> None:
    assert _when(text) == (title, due)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "nima va qachon"),
        ("Hisobot", "oxirida vaqt yo'q"),
        ("Hisobot ertaga", "oxirida vaqt yo'q"),
        ("Hisobot 24:00", "bunday soat yo'q"),
        ("Hisobot 12:60", "bunday soat yo'q"),
        ("Hisobot 2026-02-30 09:00", "bunday sana yo'q"),
        ("ertaga 09:00", "vazifa nomi yo'q"),
        ("30m", "vazifa nomi yo'q"),
        ("Hisobot 0m", "bu vaqt emas"),
        ("Hisobot 09:00", "o'tib ketdi"),
        ("Hisobot 2040-01-01 09:00", "besh yildan uzoq"),
    ],
)
def test_the_add_grammar_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        _when(text)


def test_a_wall_time_the_clocks_skip_is_refused() -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="does not exist in Europe/Berlin"):
        _when("Hisobot 2026-03-29 02:30", now, "Europe/Berlin")


def test_buttons_round_trip_and_strangers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMINDERS_SNOOZE", "10m,1h")
    keyboard = reminder_keyboard(42)
    [[done], later] = keyboard["inline_keyboard"]
    assert done == {"text": "✅ Bajarildi", "callback_data": "done:42"}
    assert [b["text"] for b in later] == ["⏰ Keyinroq (10 daqiqa)", "⏰ Keyinroq (1 soat)"]
    assert parse_button(done["callback_data"]) == ("done", 42, timedelta(0))
    assert parse_button(later[1]["callback_data"]) == ("snooze", 42, timedelta(hours=1))
    for forged in (
        "done:x",
        "done:0",
        "snooze:1:0",
        "snooze:1:99999999",
        "other:1",
        "",
        "done:1:2",
    ):
        assert parse_button(forged) is None, forged


@pytest.mark.parametrize("value", ["", "0s", "8d", "1m,2m,3m,4m", "soon"])
def test_bad_snooze_settings_are_refused(value: str) -> None:
    with pytest.raises(InvalidInput):
        snooze_choices(value)


def test_a_reminder_payload_with_buttons_passes_the_contract() -> None:
    due = datetime(2026, 12, 1, 9, tzinfo=TASHKENT)
    payload = reminder_payload(
        chat_id=7, title="Non", due=due, time_zone="Asia/Tashkent", send_at=due, task_id=3
    )
    args = send_message_args(payload)
    assert args["reply_markup"] == payload["reply_markup"]
    plain = reminder_payload(
        chat_id=7, title="Non", due=due, time_zone="Asia/Tashkent", send_at=due
    )
    assert "reply_markup" not in plain


def _with(markup: object) -> dict[str, object]:
    return {"chat_id": 1, "text": "x", "reply_markup": markup}


@pytest.mark.parametrize(
    ("markup", "problem"),
    [
        ([], "object with only inline_keyboard"),
        ({"keyboard": []}, "object with only inline_keyboard"),
        ({"inline_keyboard": []}, "non-empty list of rows"),
        ({"inline_keyboard": [[]]}, "non-empty list of buttons"),
        ({"inline_keyboard": [["x"]]}, "must be an object"),
        ({"inline_keyboard": [[{"callback_data": "a"}]]}, "non-empty text"),
        ({"inline_keyboard": [[{"text": "a"}]]}, "exactly one of"),
        ({"inline_keyboard": [[{"text": "a", "callback_data": "a", "url": "b"}]]}, "exactly one"),
        ({"inline_keyboard": [[{"text": "a", "callback_data": 5}]]}, "non-empty string"),
        ({"inline_keyboard": [[{"text": "a", "callback_data": "ж" * 33}]]}, "66 bytes"),
    ],
)
def test_reply_markup_is_checked(markup: object, problem: str) -> None:
    with pytest.raises(MalformedPayload, match=problem):
        send_message_args(_with(markup))


def test_reply_markup_at_the_limit_and_url_buttons_pass() -> None:
    markup = {
        "inline_keyboard": [
            [{"text": "a", "callback_data": "ж" * 32}],
            [{"text": "b", "url": "https://example.org"}],
        ]
    }
    assert send_message_args(_with(markup))["reply_markup"] == markup
