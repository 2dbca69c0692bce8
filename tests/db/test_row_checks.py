"""The payload's, queue's and bot's checks (outbox_0013's trigger): the same rows refused with
the same names as the constraints they replaced, on INSERT, COPY and an UPDATE that sets those
columns; and not run again by the relay's updates, which set none of them.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from alembic import command

from outbox import migrate
from outbox.schema import current_schema

DEEP = '{"a": ' + "[" * 40 + "]" * 40 + "}"
GOOD = '{"chat_id": 1, "text": "Salom"}'
REFUSED = {
    "outbox_payload_object": ("payload", "'[1, 2]'"),
    "outbox_payload_size": ("payload", '\'{"text": "' + "x" * 70_000 + "\"}'"),
    "outbox_payload_depth": ("payload", f"'{DEEP}'"),
    "outbox_navbat_name": ("navbat", "'no spaces'"),
    "outbox_bot_id": ("bot", "'123:token-like'"),
}


def _refused_with(conn: psycopg.Connection[Any], statement: str) -> str | None:
    try:
        with conn.transaction():
            conn.execute(statement)
    except psycopg.errors.CheckViolation as err:
        assert err.sqlstate == "23514"
        assert f'violates check constraint "{err.diag.constraint_name}"' in str(err)
        assert err.diag.table_name == "outbox"
        return err.diag.constraint_name
    return None


@pytest.mark.parametrize("name", REFUSED)
def test_insert_and_update_refuse_what_the_constraints_refused(db_url: str, name: str) -> None:
    column, value = REFUSED[name]
    with psycopg.connect(db_url, autocommit=True) as conn:
        insert = f"INSERT INTO outbox (kalit, payload, {column}) VALUES ('new', '{GOOD}', {value})"
        if column == "payload":
            insert = f"INSERT INTO outbox (kalit, payload) VALUES ('new', {value})"
        assert _refused_with(conn, insert) == name
        conn.execute(f"INSERT INTO outbox (kalit, payload) VALUES ('old', '{GOOD}')")
        update = f"UPDATE outbox SET {column} = {value} WHERE kalit = 'old'"
        assert _refused_with(conn, update) == name
        # The row is as it was.
        kept = conn.execute("SELECT payload::text, navbat, bot FROM outbox").fetchall()
        assert kept == [('{"text": "Salom", "chat_id": 1}', "default", None)]


def test_copy_is_checked_and_good_rows_pass(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        refused = pytest.raises(psycopg.errors.CheckViolation, match="outbox_payload_object")
        with refused, conn.cursor().copy("COPY outbox (kalit, payload) FROM STDIN") as copy:
            copy.write_row(("copied", "[1]"))
        nested = '{"a": ' * 31 + "1" + "}" * 31  # 32 levels: allowed
        conn.execute(
            "INSERT INTO outbox (kalit, payload, navbat, bot) VALUES "
            f"('a', '{GOOD}', 'tez.navbat-1', '12345'), ('b', '{nested}', 'default', NULL)"
        )
        assert conn.execute("SELECT count(*) FROM outbox").fetchone() == (2,)


def test_an_update_that_does_not_set_those_columns_does_not_check_them(db_url: str) -> None:
    # A row the checks would refuse, written with the trigger off (as by a table restored from
    # an older dump): the relay's updates, which set neither payload, queue nor bot, go through,
    # and an update that sets the payload is checked.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE outbox DISABLE TRIGGER outbox_row_checks")
        conn.execute(f"INSERT INTO outbox (kalit, payload) VALUES ('deep', '{DEEP}')")
        conn.execute("ALTER TABLE outbox ENABLE TRIGGER outbox_row_checks")
        conn.execute(
            "UPDATE outbox SET holat = 'bajarilmoqda', band_vaqti = now(), urinish = 1 "
            "WHERE kalit = 'deep'"
        )
        conn.execute("UPDATE outbox SET holat = 'xato', band_vaqti = NULL WHERE kalit = 'deep'")
        same = "UPDATE outbox SET payload = payload WHERE kalit = 'deep'"
        assert _refused_with(conn, same) == "outbox_payload_depth"


def test_the_revision_down_and_up_keeps_every_row_and_the_names(db_url: str) -> None:
    config = migrate._config(db_url, migrate.SCRIPT_PACKAGE, current_schema())
    command.downgrade(config, "outbox_0012")
    with psycopg.connect(db_url, autocommit=True) as conn:
        names = {
            r
            for (r,) in conn.execute(
                "SELECT conname FROM pg_constraint WHERE conrelid = 'outbox'::regclass"
            )
        }
        assert set(REFUSED) <= names
        assert _refused_with(conn, "INSERT INTO outbox (kalit, payload) VALUES ('x', '[]')") == (
            "outbox_payload_object"
        )
        conn.execute(
            "INSERT INTO outbox (kalit, payload, navbat, bot) SELECT 'k' || g, "
            "jsonb_build_object('chat_id', g, 'text', repeat('x', g)), 'q' || g % 3, "
            "CASE WHEN g % 2 = 0 THEN g::text END FROM generate_series(1, 500) g"
        )
        # Every row as it was (outbox_0016's columns are new: left out).
        before = conn.execute(
            "SELECT md5(string_agg((to_jsonb(o) - 'tartib' - 'suhbat')::text, ',' ORDER BY id)) "
            "FROM outbox o"
        )
        fingerprint = before.fetchone()
    command.upgrade(config, "head")
    with psycopg.connect(db_url, autocommit=True) as conn:
        after = conn.execute(
            "SELECT md5(string_agg((to_jsonb(o) - 'tartib' - 'suhbat')::text, ',' ORDER BY id)) "
            "FROM outbox o"
        )
        assert after.fetchone() == fingerprint
        left = {
            r
            for (r,) in conn.execute(
                "SELECT conname FROM pg_constraint WHERE conrelid = 'outbox'::regclass"
            )
        }
        assert set(REFUSED).isdisjoint(left)
        assert {"outbox_urinish_range", "outbox_xato_turi_word"} <= left
        assert _refused_with(conn, "INSERT INTO outbox (kalit, payload) VALUES ('x', '[]')") == (
            "outbox_payload_object"
        )
