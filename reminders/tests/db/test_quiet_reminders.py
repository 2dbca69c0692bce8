"""The vazifalar /quiet path: the person sets quiet hours in their own zone, they follow the
zone when it changes, and only the bulk kind (an announcement) asks for them, while reminders
the person scheduled and the bot's replies do not. Handlers run in this process on a real
database; the claim is the relay's own."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from itertools import count

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

import outbox
import reminders
from outbox.quiet import QuietHours
from reminders import service
from reminders.chat import Incoming, handle_text
from reminders.cli import main
from tests.db.test_chat_order import claim

CHAT = 4242
_updates = count(1)


def say(engine: sa.Engine, text: str, chat: int = CHAT) -> str:
    """Send ``text`` as the person; the bot's reply."""
    update = next(_updates)
    with Session(engine) as session, session.begin():
        incoming = Incoming(bot_id=1, update_id=update, chat_id=chat, private=True, first_name="D")
        assert handle_text(session, incoming, text)
    with engine.connect() as conn:
        payload = conn.execute(
            sa.text("SELECT payload FROM outbox WHERE kalit = :k"), {"k": f"bot:1:{update}"}
        ).scalar_one()
    return str(payload["text"])


def hours(engine: sa.Engine) -> QuietHours | None:
    with engine.connect() as conn:
        return outbox.get_quiet_hours(conn, CHAT)


def test_quiet_sets_shows_follows_the_zone_and_clears(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        reminders.create_user(session, name="Dilnoza", chat_id=CHAT, tz="Asia/Tashkent")
    assert "Tinch soatlar yo'q" in say(engine, "/quiet")
    reply = say(engine, "/quiet 22:00 7:00")
    assert "Tinch soatlar: 22:00-07:00 (Asia/Tashkent)" in reply
    assert hours(engine) == QuietHours(time(22), time(7), "Asia/Tashkent")
    assert "22:00-07:00 (Asia/Tashkent)" in say(engine, "/quiet")
    # A new zone: the same wall-clock hours, in the new zone.
    say(engine, "/tz Europe/Berlin")
    assert hours(engine) == QuietHours(time(22), time(7), "Europe/Berlin")
    for bad in ("/quiet 25:00 07:00", "/quiet 22:00", "/quiet 22.00 07.00", "/quiet ²2:00 07:00"):
        assert "Tushunmadim" in say(engine, bad), bad
    assert hours(engine) == QuietHours(time(22), time(7), "Europe/Berlin")
    assert "o'chirildi" in say(engine, "/quiet off")
    assert hours(engine) is None
    say(engine, "/quiet 23:00 06:30")
    assert "o'chirildi" in say(engine, "/quiet 08:00 08:00")
    assert hours(engine) is None
    assert "/quiet 22:00 07:00" in say(engine, "/help")


def test_announcements_wait_for_quiet_hours_and_reminders_do_not(
    engine: sa.Engine, db_url: str
) -> None:
    with Session(engine) as session, session.begin():
        user = reminders.create_user(session, name="Dilnoza", chat_id=CHAT, tz="UTC")
        other = reminders.create_user(session, name="Bobur", chat_id=CHAT + 1, tz="UTC")
        her, his = user.id, other.id
        now = service.database_now(session).astimezone(UTC)
        # Quiet hours around now for Dilnoza only.
        start = (now - timedelta(hours=1)).time().replace(second=0, microsecond=0)
        end = (now + timedelta(hours=1)).time().replace(second=0, microsecond=0)
        service.set_quiet_hours(session, user.id, start, end)
        service.announce(session, "Yangi imkoniyat: /quiet", batch="news-1")
        reminders.create_task(
            session,
            user_id=user.id,
            title="Hisobot",
            due=now + timedelta(seconds=1),
            remind_before=[timedelta(hours=2)],  # passed: sent now
        )
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT tur, bool_or(tinch) FROM outbox GROUP BY tur"))
        flags: dict[str, bool] = {r[0]: r[1] for r in found}
    assert flags == {service.ANNOUNCEMENT_KIND: True, "eslatma": False}
    taken = claim(db_url)
    # Bobur's announcement and Dilnoza's reminder go; her announcement waits.
    assert f"elon:news-1:{his}" in taken and f"elon:news-1:{her}" not in taken
    assert any(k.startswith("vazifa:") for k in taken)
    with engine.connect() as conn:
        held_until = conn.execute(
            sa.text("SELECT keyingi_urinish FROM outbox WHERE kalit = :k"),
            {"k": f"elon:news-1:{her}"},
        ).scalar_one()
    assert held_until > datetime.now(UTC) + timedelta(minutes=30)
    # She turns quiet hours off: the announcement comes at once, beside the bot's reply.
    assert "o'chirildi" in say(engine, "/quiet off")
    assert claim(db_url) == sorted([f"bot:1:{next(_updates) - 1}", f"elon:news-1:{her}"])


def test_announce_from_the_command_line(
    engine: sa.Engine,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    with Session(engine) as session, session.begin():
        reminders.create_user(session, name="Dilnoza", chat_id=CHAT)
        reminders.create_user(session, name="Bobur", chat_id=CHAT + 1)
    assert main(["announce", "Yangi: /quiet", "--batch", "news-2"]) == 0
    assert "2 announcements enqueued in batch news-2" in capsys.readouterr().out
    assert main(["announce", "Yangi: /quiet", "--batch", "news-2"]) == 0  # nobody twice
    assert "0 announcements" in capsys.readouterr().out
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT tur, partiya, tinch FROM outbox")).all()
    assert sorted(rows) == [(service.ANNOUNCEMENT_KIND, "news-2", True)] * 2
    # Bad input: one line, a non-zero exit.
    assert main(["announce", " ", "--batch", "news-3"]) != 0
    err = capsys.readouterr().err
    assert "announcement is empty" in err and "Traceback" not in err
