"""The one table of names: it covers the table, and rows are read by name, not by position.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/unit/test_vocabulary.py``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import re

import psycopg
import sqlalchemy as sa
from psycopg.rows import namedtuple_row

from outbox import api, queries, sql, vocabulary
from outbox.db import async_connect
from outbox.queries import operator
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
    # (What holds a pending row is read beside it, not a column.)
    fields = {f.name for f in dataclasses.fields(queries.Message)} - {"marker", "payload", "holds"}
    assert fields <= set(python)


def test_a_message_is_read_by_name_whatever_the_select_lists_order(
    db_url: str, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        row_id = api.enqueue(conn, key="k1", payload={"chat_id": 7, "text": "hi"}, kind="t")
    params = {name: None for name in re.findall(r"(?<!:):(\w+)", sql.source("messages"))}
    with psycopg.connect(db_url, row_factory=namedtuple_row) as conn:
        (row,) = sql.fetch_sync(
            conn, "messages", schema="public", params={**params, "id": row_id.id, "limit": 1}
        )
        plain = queries.get_message(conn, row_id.id, schema="public")
    # The same values, their columns turned around: a positional reading would shift them.
    fields = list(reversed(row._fields))  # type: ignore[attr-defined]
    turned = collections.namedtuple("Row", fields)(*(getattr(row, f) for f in fields))
    assert len(fields) > 10
    found = operator._message(turned)
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
    returning = sql.source("claim_take").rsplit("RETURNING", 1)[1]
    names = re.findall(r"AS (\w+)(?:,|$)", returning, re.MULTILINE)
    assert names == list(queries.ClaimedRow._fields)

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
