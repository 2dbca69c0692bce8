"""The one table of names: it covers the table, and rows are read by name, not by position.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/unit/test_vocabulary.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re

import sqlalchemy as sa

from outbox import api, queries, vocabulary
from outbox.db import async_connect
from outbox.queries import operator
from outbox.queries._common import _sql
from outbox.states import State


def test_the_names_table_covers_every_column_of_the_outbox_table(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        columns = conn.execute(
            sa.text(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND table_name = :table ORDER BY ordinal_position"
            ),
            {"table": "outbox"},
        ).scalars()
        assert [n.column for n in vocabulary.OUTBOX] == list(columns)
        markers = conn.execute(
            sa.text(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = 'public' AND table_name = 'yuborilgan' "
                "ORDER BY ordinal_position"
            )
        ).scalars()
        assert [n.column for n in vocabulary.MARKER] == list(markers)
    # One Python name per column, and every field of a message has a name in the table.
    python = [n.python for n in vocabulary.OUTBOX]
    assert len(set(python)) == len(python)
    fields = {f.name for f in dataclasses.fields(queries.Message)} - {"marker", "payload"}
    assert fields <= set(python)


def test_a_message_is_read_by_name_whatever_the_select_lists_order(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        row_id = api.enqueue(conn, key="k1", payload={"chat_id": 7, "text": "hi"}, kind="t")
    # The same select list, turned around: a positional reading would shift every field.
    items = [item.strip() for item in operator._MESSAGE_COLUMNS.split(",\n")]
    assert len(items) > 10
    reversed_list = ",\n".join(reversed(items))
    statement = (
        f"SELECT {reversed_list} FROM {{outbox}} o "
        "LEFT JOIN {yuborilgan} y ON y.kalit = o.kalit WHERE o.id = :id"
    )
    with engine.connect() as conn:
        found = operator._message(
            conn.execute(sa.text(_sql(statement, "public")), {"id": row_id.id}).one()
        )
        plain = queries.get_message(conn, row_id.id, schema="public")
    assert found == plain
    assert (found.id, found.kind, found.key, found.state, found.attempts) == (
        row_id.id,
        "t",
        "k1",
        State.PENDING,
        0,
    )
    assert found.payload == {"chat_id": 7, "text": "hi"} and found.queue == "default"


def test_the_claim_returns_its_rows_by_name(db_url: str, engine: sa.Engine) -> None:
    with engine.begin() as conn:
        api.enqueue(conn, key="k1", payload={"chat_id": 7, "text": "hi"}, kind="t")
    # The claim's RETURNING list names every field of ClaimedRow.
    returning = queries.claim._CLAIM_DUE.rsplit("RETURNING", 1)[1]
    assert set(re.findall(r"AS (\w+)", returning)) == set(queries.ClaimedRow._fields)

    async def claim() -> list[queries.ClaimedRow]:
        conn = await async_connect(db_url)
        try:
            async with conn.transaction():
                return await queries.claim_due(conn, 10, schema="public")
        finally:
            await conn.close()

    (row,) = asyncio.run(claim())
    assert (row.kind, row.key, row.payload, row.attempts, row.already_sent, row.queue) == (
        "t",
        "k1",
        {"chat_id": 7, "text": "hi"},
        1,
        False,
        "default",
    )
