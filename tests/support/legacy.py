"""A database as version 0.1 left it (its one shared Alembic history, revision 0001, kept in
``legacy_0_1/``), some rows in it, and what to compare before and after an upgrade."""

from __future__ import annotations

from pathlib import Path

import psycopg

__all__ = ["COLUMNS_OF_0_1", "LEGACY", "LEGACY_ROWS", "legacy_database", "snapshot", "versions"]


def versions(url: str, table: str) -> set[str] | None:
    """The revisions a version table records; None if there is no such table."""
    with psycopg.connect(url) as conn:
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
            return None
        return {r[0] for r in conn.execute(f"SELECT version_num FROM {table}")}


LEGACY = Path(__file__).parent / "legacy_0_1"


def legacy_database(url: str) -> None:
    """The tables exactly as version 0.1's one shared history (revision 0001) made them."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(LEGACY))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, "head")


LEGACY_ROWS = """
INSERT INTO foydalanuvchi (ism, chat_id) VALUES ('Aziz', 9001);
INSERT INTO vazifa (foydalanuvchi_id, sarlavha, muddat)
    VALUES (1, 'hisobot', now() + interval '1 day');
INSERT INTO outbox (kalit, payload, holat) VALUES
    ('old-kutmoqda', '{"chat_id": 9001, "text": "kutmoqda"}', 'kutmoqda'),
    ('old-bajarilmoqda', '{"chat_id": 9001, "text": "band"}', 'bajarilmoqda'),
    ('old-bajarildi', '{"chat_id": 9001, "text": "yuborildi"}', 'bajarildi'),
    ('old-xato', '{"chat_id": 9001, "text": "xato"}', 'xato');
UPDATE outbox SET urinish = 1, band_vaqti = now() WHERE holat = 'bajarilmoqda';
INSERT INTO yuborilgan (kalit, chat_id, message_id) VALUES ('old-bajarildi', 9001, 77);
"""


# What version 0.1's tables held; later revisions may add columns beside them.
COLUMNS_OF_0_1 = {
    "outbox": "id, tur, kalit, payload, holat, urinish, keyingi_urinish, band_vaqti, "
    "oxirgi_xato, tarix, yaratilgan, yangilangan",
    "yuborilgan": "kalit, chat_id, message_id, yuborilgan_vaqt",
    "foydalanuvchi": "id, ism, chat_id, vaqt_zonasi, yaratilgan",
    "vazifa": "id, foydalanuvchi_id, sarlavha, muddat, eslatma_oldin, bajarildi, yaratilgan",
}


def snapshot(url: str) -> dict[str, list[tuple[object, ...]]]:
    with psycopg.connect(url) as conn:
        return {
            table: conn.execute(f"SELECT {columns} FROM {table} ORDER BY 1").fetchall()
            for table, columns in COLUMNS_OF_0_1.items()
        }
