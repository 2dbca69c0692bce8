from __future__ import annotations

import sqlalchemy as sa

from outbox import queries


def test_migrated_database_has_the_outbox(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        assert queries.count_by_state(conn, schema="public") == {
            "kutmoqda": 0,
            "bajarilmoqda": 0,
            "bajarildi": 0,
            "xato": 0,
        }
