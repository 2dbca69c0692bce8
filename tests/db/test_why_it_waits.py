"""What holds a pending row, as ``outbox show`` (text and JSON) says it, for each reason; and
``outbox status`` counting the rows held behind an earlier message apart from the lag."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

import outbox
from outbox.broadcast import pause
from outbox.ops.views import message as view
from outbox.ops.views import status as status_view
from outbox.queries import Scope
from outbox.states import State
from tests.db.test_chat_order import claim, now_plus, retry_later, sent_original, steps
from tests.support import run_cli, text

BOT = 5551234  # a bot named by the rows, whose state rows the test writes


def shown(engine: sa.Engine, key: str) -> tuple[list[str], list[dict[str, object]]]:
    """What holds the row ``key``: the reasons of --json, and the lines of the text."""
    with engine.begin() as conn:
        row_id = conn.execute(sa.text("SELECT id FROM outbox WHERE kalit = :k"), {"k": key})
        message = outbox.get_message(conn, int(row_id.scalar_one()))
    assert message is not None and message.state == State.PENDING
    lines = view.message_lines(message)
    start = next(i for i, line in enumerate(lines) if line.startswith("waits for"))
    waits = view.message_json(message)["waits_for"]
    assert isinstance(waits, list)
    return [line.strip() for line in lines[start + 1 : start + 1 + len(waits)]], waits


def row_id(engine: sa.Engine, key: str) -> int:
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT id FROM outbox WHERE kalit = :k"), {"k": key})
        return int(found.scalar_one())


def test_an_earlier_message_of_its_chat(engine: sa.Engine, db_url: str) -> None:
    keys = steps(engine, 1, 3)
    assert claim(db_url) == [keys[0]]
    retry_later(db_url, keys[0])
    lines, waits = shown(engine, keys[2])
    # The first of its chat still to be sent, with its id: the one to look at.
    assert [w["reason"] for w in waits] == ["earlier"]
    assert waits[0]["id"] == row_id(engine, keys[0])
    assert lines[0].startswith(f"an earlier message of its chat: row {row_id(engine, keys[0])} ")
    assert "kutmoqda" in lines[0]


def test_its_original(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        outbox.enqueue(conn, key="task", payload=text(7), run_at=now_plus(engine, 600))
        outbox.enqueue(
            conn,
            key="edit",
            payload={"method": "editMessageText", "message_key": "task", "text": "y"},
        )
    lines, waits = shown(engine, "edit")
    reasons = [w["reason"] for w in waits]
    assert "original" in reasons
    assert f"its original 'task': row {row_id(engine, 'task')} (kutmoqda)" in lines


def test_a_pause_and_the_bots_flood_pause(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        outbox.enqueue(conn, key="m", payload=text(1), bot=BOT)
        pause(conn, Scope.KIND, "eslatma")
        conn.execute(
            sa.text(
                "INSERT INTO bot_holati (bot, pauza_tugashi) "
                "VALUES (:b, now() + interval '1 minute')"
            ),
            {"b": str(BOT)},
        )
    lines, waits = shown(engine, "m")
    assert sorted(str(w["reason"]) for w in waits) == ["flood", "pause"]
    assert "a pause of its tur eslatma (outbox resume)" in lines
    assert any(
        line.startswith(f"its bot's flood pause (Telegram's 429, bot {BOT}) until")
        for line in lines
    )


def test_its_chats_next_free_moment(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        outbox.enqueue(conn, key="m", payload=text(42), bot=BOT)
        conn.execute(
            sa.text(
                "INSERT INTO chat_navbati (bot, chat, keyingi) "
                "VALUES (:b, '42', now() + interval '30 seconds')"
            ),
            {"b": str(BOT)},
        )
    lines, waits = shown(engine, "m")
    assert [w["reason"] for w in waits] == ["chat"]
    assert lines[0].startswith("its chat's next free moment (42): ")


def test_its_window_and_its_time(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        outbox.enqueue(
            conn, key="w", payload=text(1), run_at=now_plus(engine, 60), early=timedelta(minutes=5)
        )
        outbox.enqueue(conn, key="later", payload=text(2), run_at=now_plus(engine, 3600))
    lines, waits = shown(engine, "w")
    assert [w["reason"] for w in waits] == ["window"]
    assert lines[0].startswith("its window: due ") and "may go from" in lines[0]
    lines, waits = shown(engine, "later")
    assert [w["reason"] for w in waits] == ["due"]
    assert waits[0]["until"] is not None and lines[0].startswith("its time: due ")


def test_nothing_holds_a_row_that_is_free(engine: sa.Engine, db_url: str) -> None:
    with engine.begin() as conn:
        found = outbox.enqueue(conn, key="m", payload=text(1))
        message = outbox.get_message(conn, found.id)
    assert message is not None
    assert "waits for        nothing" in view.message_lines(message)
    assert view.message_json(message)["waits_for"] == []


def test_status_counts_held_rows_apart_from_the_lag(engine: sa.Engine, db_url: str) -> None:
    keys = steps(engine, 1, 4)
    assert claim(db_url) == [keys[0]]
    retry_later(db_url, keys[0])  # its retry is a minute away: three due rows held
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE outbox SET keyingi_urinish = now() - interval '1 hour' "
                "WHERE kalit = ANY(:k)"
            ),
            {"k": keys[1:]},
        )
        status = outbox.queue_status(conn)
    assert status.held == 3
    assert status.lag_seconds == 0  # no row waits for a relay
    lines = status_view.status_lines(status, lease=60, max_lag=300)
    assert any(line.split()[:2] == ["held", "3"] for line in lines)


def test_superseded_edits_say_so_in_show(engine: sa.Engine, db_url: str) -> None:
    sent_original(engine, db_url)
    with engine.begin() as conn:
        for n in range(2):
            outbox.enqueue(
                conn,
                key=f"e{n}",
                payload={"method": "editMessageText", "message_key": "task", "text": str(n)},
            )
    with engine.begin() as conn:
        message = outbox.get_message(conn, row_id(engine, "e0"))
    assert message is not None and message.state == State.DONE
    assert message.error_code == "superseded"
    assert message.last_error == f"superseded by row {row_id(engine, 'e1')}"


def test_the_pages_message_view_says_what_holds_it(engine: sa.Engine, db_url: str) -> None:
    from tests.support.webapp import local_page

    keys = steps(engine, 1, 2)
    assert claim(db_url) == [keys[0]]
    retry_later(db_url, keys[0])
    with local_page(db_url) as page:
        answer = page.get(f"/messages/{row_id(engine, keys[1])}")
    assert answer.status == 200
    assert 'data-hold="earlier"' in answer.body
    assert f"an earlier message of its chat: row {row_id(engine, keys[0])} " in answer.body


def test_the_commands_show_and_status_say_it(
    engine: sa.Engine,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)
    keys = steps(engine, 1, 3)
    assert claim(db_url) == [keys[0]]
    retry_later(db_url, keys[0])
    first, last = row_id(engine, keys[0]), row_id(engine, keys[2])
    code, out, _ = run_cli(capsys, "show", str(last))
    assert code == 0
    assert f"\n  an earlier message of its chat: row {first} (kutmoqda, " in out
    code, out, _ = run_cli(capsys, "show", str(last), "--json")
    assert code == 0 and json.loads(out)["waits_for"][0]["id"] == first
    code, out, _ = run_cli(capsys, "status", "--json")
    assert code == 0 and json.loads(out)["held"] == 2


def test_a_superseded_edit_is_not_replayed_as_if_delivered(engine: sa.Engine, db_url: str) -> None:
    sent_original(engine, db_url)
    with engine.begin() as conn:
        for n in range(2):
            payload = {"method": "editMessageText", "message_key": "task", "text": str(n)}
            outbox.enqueue(conn, key=f"e{n}", payload=payload)
    with engine.begin() as conn:
        [result] = outbox.replay(conn, [row_id(engine, "e0")])
    assert not result.replayed and result.superseded
    assert view.replay_refusal(result) == (
        f"message {result.id} not replayed: it is bajarildi, not xato (it was superseded by a "
        "newer edit or a delete, and never sent)"
    )
