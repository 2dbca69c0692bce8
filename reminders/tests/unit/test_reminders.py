"""The vazifalar service and its reminder messages, against a real PostgreSQL.

Here the unit tier's tests (no database); the others are in
``reminders/tests/db/test_reminders.py``.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta

import pytest

from reminders.messages import (
    TELEGRAM_TEXT_LIMIT,
    format_time_left,
    reminder_payload,
    reminder_text,
    telegram_length,
)
from reminders.service import reminder_key

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


# --- creating --------------------------------------------------------------------------------


def test_key_names_task_offset_and_due_time() -> None:
    due = datetime(2030, 1, 15, 9, 0, tzinfo=UTC)
    assert reminder_key(7, 3600, due) == f"vazifa:7:3600:{int(due.timestamp())}"


# --- the message -----------------------------------------------------------------------------

DUE = datetime(2030, 1, 15, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("left", "words"),
    [
        (HOUR, "1 soat qoldi"),
        (DAY + 2 * HOUR, "1 kun 2 soat qoldi"),
        (timedelta(minutes=15), "15 daqiqa qoldi"),
        (timedelta(hours=2, minutes=30), "2 soat 30 daqiqa qoldi"),
        (timedelta(minutes=59, seconds=50), "1 soat qoldi"),
        (timedelta(seconds=20), "1 daqiqadan kam qoldi"),
        (timedelta(0), "Muddat keldi"),
    ],
)
def test_time_left_in_uzbek(left: timedelta, words: str) -> None:
    assert format_time_left(left) == words


def test_the_due_time_is_shown_in_the_users_time_zone() -> None:
    tashkent = reminder_text(title="T", due=DUE, time_zone="Asia/Tashkent", send_at=DUE - HOUR)
    berlin = reminder_text(title="T", due=DUE, time_zone="Europe/Berlin", send_at=DUE - HOUR)
    assert "15.01.2030, 14:00 (Asia/Tashkent)" in tashkent
    assert "15.01.2030, 10:00 (Europe/Berlin)" in berlin


def test_the_title_is_html_escaped() -> None:
    payload = reminder_payload(
        chat_id=42, title="<b>&", due=DUE, time_zone="Asia/Tashkent", send_at=DUE - HOUR
    )
    assert payload["parse_mode"] == "HTML"
    assert payload["chat_id"] == 42
    assert "<b>&lt;b&gt;&amp;</b>" in payload["text"]
    assert payload["text"].count("<b>") == 1


def _title_part(text: str) -> str:
    match = re.search(r"<b>(.*)</b>", text, re.DOTALL)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("char", ["a", "&", "😀"])
def test_a_5000_character_title_is_shortened_to_fit(char: str) -> None:
    title = char * 5000
    text = reminder_text(title=title, due=DUE, time_zone="Asia/Tashkent", send_at=DUE - HOUR)
    assert len(text) <= TELEGRAM_TEXT_LIMIT
    assert telegram_length(text) <= TELEGRAM_TEXT_LIMIT
    assert telegram_length(text) > TELEGRAM_TEXT_LIMIT - 10  # it uses the room it has
    shown = _title_part(text)
    assert shown.endswith("…")
    # Cut between whole characters, never inside an entity like &amp;.
    assert html.unescape(shown[:-1]) == char * len(html.unescape(shown[:-1]))
    assert shown[:-1] == html.escape(char, quote=False) * len(html.unescape(shown[:-1]))
    assert "1 soat qoldi" in text


def test_a_title_that_fits_is_not_shortened() -> None:
    text = reminder_text(title="a" * 3000, due=DUE, time_zone="Asia/Tashkent", send_at=DUE)
    assert _title_part(text) == "a" * 3000
