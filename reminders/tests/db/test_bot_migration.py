"""The domain's revisions go down and up again; its trigger acts on relay outcomes only, and
(since reminders_0003) on the failure's code, not its wording.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``reminders/tests/e2e/test_bot_migration.py``.
"""

from __future__ import annotations

import json

import psycopg
from alembic import command

from outbox import migrate
from outbox.schema import current_schema
from reminders.migrate import HISTORY, migrate_all


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {r[0] for r in rows}


def test_down_to_0001_and_up_again(db_url: str) -> None:
    config = migrate._config(db_url, HISTORY, current_schema())
    command.downgrade(config, "reminders_0001")
    assert not {"bot_yangilanish", "eslatma_javob"} & _tables(db_url)
    with psycopg.connect(db_url) as conn:
        triggers = conn.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal").fetchall()
    assert ("vazifalar_relay_outcome",) not in triggers
    migrate_all(db_url)
    assert {"bot_yangilanish", "eslatma_javob"} <= _tables(db_url)


def test_the_trigger_follows_only_a_relays_outcome(db_url: str) -> None:
    """Written as a relay writes it (a claimed row leaving its claim), and as anyone else would."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO foydalanuvchi (ism, chat_id) VALUES ('A', 11), ('B', -22)")
        for key, chat in (("a", 11), ("b", -22), ("c", 11)):
            conn.execute(
                "INSERT INTO outbox (kalit, payload, holat, band_vaqti) "
                "VALUES (%s, %s, 'bajarilmoqda', now())",
                (key, json.dumps({"chat_id": chat, "text": "x"})),
            )
        # Not an outcome: a pending row's payload rewritten by the app.
        conn.execute("UPDATE outbox SET holat = 'kutmoqda' WHERE kalit = 'c'")
        conn.execute(
            "UPDATE outbox SET payload = jsonb_set(payload, '{chat_id}', '33') WHERE kalit = 'c'"
        )
        conn.execute(
            "UPDATE outbox SET holat = 'bajarildi', "
            "payload = jsonb_set(payload, '{chat_id}', '-1000022') WHERE kalit = 'b'"
        )
        conn.execute(
            "UPDATE outbox SET holat = 'xato', xato_turi = 'blocked', oxirgi_xato = "
            "'Telegram refused (403): Forbidden: bot was blocked by the user' WHERE kalit = 'a'"
        )
        users = conn.execute("SELECT ism, chat_id, faol FROM foydalanuvchi ORDER BY ism").fetchall()
    assert users == [("A", 11, False), ("B", -1000022, True)]


def _fail_claimed(conn: psycopg.Connection[tuple[object, ...]], key: str, set_: str) -> None:
    conn.execute(
        "INSERT INTO outbox (kalit, payload, holat, band_vaqti) "
        'VALUES (%s, \'{"chat_id": 11, "text": "x"}\', \'bajarilmoqda\', now())',
        (key,),
    )
    conn.execute(f"UPDATE outbox SET holat = 'xato', {set_} WHERE kalit = %s", (key,))


def _active(conn: psycopg.Connection[tuple[object, ...]]) -> object:
    row = conn.execute("SELECT faol FROM foydalanuvchi").fetchone()
    assert row is not None
    return row[0]


def test_the_trigger_reads_the_failure_code_not_the_error_text(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO foydalanuvchi (ism, chat_id) VALUES ('A', 11)")
        # The old wording without the code (a 403 for another reason, written so): still active.
        _fail_claimed(
            conn,
            "a",
            "xato_turi = 'forbidden', "
            "oxirgi_xato = 'Telegram refused (403): Forbidden: bot was blocked by the user'",
        )
        assert _active(conn) is True
        # The code, in any wording.
        _fail_claimed(conn, "b", "xato_turi = 'blocked', oxirgi_xato = 'the person is gone'")
        assert _active(conn) is False


def test_down_to_0002_reads_the_text_again_and_up_the_code(db_url: str) -> None:
    config = migrate._config(db_url, HISTORY, current_schema())
    command.downgrade(config, "reminders_0002")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO foydalanuvchi (ism, chat_id) VALUES ('A', 11)")
        _fail_claimed(conn, "a", "xato_turi = 'blocked', oxirgi_xato = 'the person is gone'")
        assert _active(conn) is True
        _fail_claimed(
            conn, "b", "oxirgi_xato = 'Telegram refused (403): Forbidden: user is deactivated'"
        )
        assert _active(conn) is False
    migrate_all(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE foydalanuvchi SET faol = true")
        _fail_claimed(
            conn, "c", "oxirgi_xato = 'Telegram refused (403): Forbidden: user is deactivated'"
        )
        assert _active(conn) is True
        _fail_claimed(conn, "d", "xato_turi = 'blocked'")
        assert _active(conn) is False
