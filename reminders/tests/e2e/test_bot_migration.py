"""The domain's revisions go down and up again; its trigger acts on relay outcomes only, and
(since reminders_0003) on the failure's code, not its wording.

Here the e2e tier's tests (processes); the others are in
``reminders/tests/db/test_bot_migration.py``.
"""

from __future__ import annotations

import json
import os

import psycopg

from tests.support import run_module


def test_the_trigger_works_with_the_outbox_in_its_own_schema(empty_db_url: str) -> None:
    env = {**os.environ, "OUTBOX_SCHEMA": "jobs", "OUTBOX_DATABASE_URL": empty_db_url}
    ran = run_module("reminders", "migrate", env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("INSERT INTO foydalanuvchi (ism, chat_id) VALUES ('A', 11)")
        conn.execute(
            "INSERT INTO jobs.outbox (kalit, payload, holat, band_vaqti) "
            "VALUES ('a', %s, 'bajarilmoqda', now())",
            (json.dumps({"chat_id": 11, "text": "x"}),),
        )
        conn.execute(
            "UPDATE jobs.outbox SET holat = 'xato', xato_turi = 'blocked', oxirgi_xato = "
            "'Telegram refused (403): Forbidden: user is deactivated'"
        )
        assert conn.execute("SELECT faol FROM foydalanuvchi").fetchone() == (False,)
