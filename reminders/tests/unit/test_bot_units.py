"""The bot's pure parts: the /add time grammar, the buttons and their payload contract."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from outbox.errors import InvalidInput
from outbox.payload import MalformedPayload, send_message_args
from reminders.messages import (
    CALLBACK_ANSWER_LIMIT,
    ECHO_LIMIT,
    TELEGRAM_TEXT_LIMIT,
    fit_html,
    html_length,
    parse_button,
    reminder_keyboard,
    reminder_payload,
    shorten,
    snooze_choices,
    telegram_length,
)
from reminders.parsing import parse_due, parse_id
from reminders.tests.support import telegram_accepts
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
        ("Hisobot 0001-01-01 00:00", "o'tib ketdi"),
        ("Hisobot 9999-12-31 23:59", "besh yildan uzoq"),
        ("Hisobot " + "9999d" * 300, "besh yildan uzoq"),
        ("Hisobot \u0663\u0660m", "vaqt emas"),  # Arabic-Indic digits
        ("Hisobot \u0661\u0660:\u0660\u0660", "vaqt emas"),
        ("Hiso\x00bot 30m", "ko'rinmas belgi"),
        ("Hisobot " + "x" * 4000, "x…"),
    ],
)
def test_the_add_grammar_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        _when(text)


def test_the_end_of_time_west_of_utc_is_refused() -> None:
    with pytest.raises(InvalidInput, match="besh yildan uzoq"):
        _when("Hisobot 9999-12-31 23:59", tz="America/New_York")


@pytest.mark.parametrize("text", ["0001-01-01 00:00", "9999-12-31T23:59-05:00"])
def test_a_due_time_without_a_utc_value_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput, match="out of range"):
        parse_due(text, "Asia/Tashkent")


@pytest.mark.parametrize("text", ["²", "\u0663", "1_000", "99999999999999999999", "0", " "])
def test_ids_are_ascii_digits_within_bigint(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_id("task", text)


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
        "done:99999999999999999999",
        "done:9223372036854775808",
        "snooze:99999999999999999999:600",
        "snooze:1:99999999999999",
        "snooze:1:604801",
        "snooze:1:-600",
        "done:\u00b2",
        "done:\u0663",
        "done: 1",
        "done:+1",
    ):
        assert parse_button(forged) is None, forged
    assert parse_button("done:9223372036854775807") == ("done", 2**63 - 1, timedelta(0))
    assert parse_button("snooze:1:604800") == ("snooze", 1, timedelta(days=7))


def test_shorten_cuts_with_an_ellipsis_and_hides_control_characters() -> None:
    assert shorten("Europe/Berlin") == "Europe/Berlin"
    cut = shorten("Z" * 4092)
    assert cut == "Z" * (ECHO_LIMIT - 1) + "…"
    assert telegram_length(shorten("😀" * 100)) <= ECHO_LIMIT
    assert shorten("a\x00b") == "a\ufffdb"
    assert len(shorten("x" * 500, CALLBACK_ANSWER_LIMIT)) == CALLBACK_ANSWER_LIMIT


@pytest.mark.parametrize(
    "text",
    [
        "<b>" + "&amp;" * 5000 + "</b>",
        "Ochiq: <b>" + "é" * 4095 + "</b> oxiri",
        "😀" * 3000,
        "x" * 4096 + "y",
        "<b>a</b>" * 5000,
    ],
)
def test_fit_html_keeps_replies_within_telegram_limit(text: str) -> None:
    fitted = fit_html(text)
    assert telegram_accepts(fitted), fitted[-40:]
    assert html_length(fitted) <= TELEGRAM_TEXT_LIMIT
    assert fitted.endswith(("…", "…</b>"))


def test_fit_html_leaves_a_reply_that_fits_as_it_is() -> None:
    text = "<b>" + "&amp;" * 4000 + "</b>"  # 20,000 characters, 4,000 as Telegram counts them
    assert fit_html(text) == text
    assert fit_html("a\x00b") == "a\ufffdb"


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
