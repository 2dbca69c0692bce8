"""Rows as the operator commands find them (failed, sent, due), written straight into the
outbox table, and the commands run in-process through ``outbox.cli.main``."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from outbox import enqueue
from outbox.cli import main

__all__ = ["BLOCKED", "add", "add_failed", "add_marker", "markers", "row", "run", "update"]

BLOCKED = "Forbidden: bot was blocked by the user"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def add(
    engine: sa.Engine, key: str, *, chat_id: int = 42, kind: str = "eslatma", queue: str = "default"
) -> int:
    with engine.begin() as conn:
        payload = {"chat_id": chat_id, "text": f"eslatma {key}"}
        return enqueue(conn, key=key, payload=payload, kind=kind, queue=queue).id


def update(engine: sa.Engine, row_id: int, assignments: str, **params: Any) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE outbox SET {assignments} WHERE id = %(id)s", {"id": row_id, **params}
        )


def add_failed(engine: sa.Engine, key: str, *, error: str = BLOCKED, **kwargs: Any) -> int:
    """A row as the relay leaves it after its last attempt failed."""
    row_id = add(engine, key, **kwargs)
    update(
        engine,
        row_id,
        "holat = 'xato', urinish = 3, oxirgi_xato = %(error)s, "
        "tarix = jsonb_build_array(jsonb_build_object('vaqt', now(), 'urinish', 3, "
        "'xato', %(error)s::text))",
        error=error,
    )
    return row_id


def add_marker(engine: sa.Engine, key: str, *, message_id: int = 991, age: str = "0") -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO yuborilgan (kalit, chat_id, message_id, yuborilgan_vaqt) "
            "VALUES (%(key)s, 42, %(mid)s, now() - %(age)s::interval)",
            {"key": key, "mid": message_id, "age": age},
        )


def row(engine: sa.Engine, row_id: int) -> tuple[Any, ...]:
    """(holat, urinish, oxirgi_xato, tarix, due) of one row by id."""
    with engine.begin() as conn:
        return tuple(
            conn.exec_driver_sql(
                "SELECT holat, urinish, oxirgi_xato, tarix, keyingi_urinish <= now() AS due "
                "FROM outbox WHERE id = %(id)s",
                {"id": row_id},
            ).one()
        )


def markers(engine: sa.Engine) -> list[str]:
    with engine.begin() as conn:
        return list(conn.exec_driver_sql("SELECT kalit FROM yuborilgan ORDER BY 1").scalars())
