"""Rows no relay could deliver, and the table as it was before migration outbox_0002 refused
them (so that plain SQL can still write them, as into a table migrated earlier or altered by
hand)."""

from __future__ import annotations

import sqlalchemy as sa

__all__ = ["DEEP", "INSERT", "ROW_CONSTRAINTS", "drop_row_limits", "execute"]


DEEP = "[" * 1000 + "]" * 1000


ROW_CONSTRAINTS = (
    "outbox_urinish_range",
    "outbox_keyingi_urinish_finite",
    "outbox_band_vaqti_finite",
    "outbox_claimed_has_band_vaqti",
)


def drop_row_limits(engine: sa.Engine) -> None:
    """The table as it was before outbox_0002's constraints: plain SQL writes anything."""
    with engine.begin() as conn:
        for name in ROW_CONSTRAINTS:
            conn.exec_driver_sql(f"ALTER TABLE outbox DROP CONSTRAINT {name}")
        conn.exec_driver_sql("DROP TRIGGER outbox_row_checks ON outbox")


def execute(engine: sa.Engine, statement: str) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(statement)


INSERT = "INSERT INTO outbox (kalit, payload) VALUES ('bad', '{payload}')"
