"""The one table of names: it covers the table, and rows are read by name, not by position."""

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
from outbox.ops.views import maintenance
from outbox.ops.views import message as message_view
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


def test_state_literals_in_sql_come_from_the_states() -> None:
    statement = _sql("SELECT 1 WHERE holat IN ({pending}, {in_progress}, {done}, {failed})", "s")
    assert statement == "SELECT 1 WHERE holat IN ('kutmoqda', 'bajarilmoqda', 'bajarildi', 'xato')"
    # No statement spells a state by hand.
    sources = [
        queries.app,
        queries.claim,
        queries.maintenance,
        queries.relay,
        queries.timing,
    ]
    for module in sources:
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str):
                assert not re.search(r"'(kutmoqda|bajarilmoqda|bajarildi)'", value), name
                assert "holat = 'xato'" not in value, name


def test_the_statements_write_tarix_entries_with_the_tables_keys() -> None:
    keys = {n.column for n in vocabulary.HISTORY}
    written: set[str] = set()
    statements = [sql.source(name) for name in sql.query_names()]
    for module in (queries.claim, queries.maintenance, queries.relay):
        statements += [v for n, v in vars(module).items() if n.isupper() and isinstance(v, str)]
    for value in statements:
        if "tarix ||" in value:
            entries = value[value.index("tarix ||") :]
            # Keys are the plain words before a comma; values are sentences or columns.
            written |= set(re.findall(r"'([a-z_]+)',", entries))
    assert written, "no statement appends to tarix?"
    assert written <= keys, written - keys


def test_the_named_queries_spell_only_the_four_states() -> None:
    # The .sql files write states as literals (a person pastes them into psql): every literal
    # a state column is compared with or set to is one of the four.
    states = {str(state) for state in State}
    for name in sql.query_names():
        text = sql.source(name)
        for clause in re.findall(r"holat\s*(?:=|<>|IN\s*\()\s*((?:'\w+'(?:,\s*)?)+)", text):
            assert set(re.findall(r"'(\w+)'", clause)) <= states, (name, clause)


def test_the_labels_are_the_documented_json_fields_and_lines() -> None:
    message = queries.Message(
        id=1,
        kind="eslatma",
        key="k",
        payload={},
        state=State.FAILED,
        attempts=1,
        next_attempt_at=None,
        claimed_at=None,
        last_error="x",
        history=[],
        created_at=None,
        updated_at=None,
        marker=None,
    )
    assert list(message_view.message_json(message)) == [
        "id", "tur", "navbat", "bot", "kalit", "holat", "urinish", "keyingi_urinish", "ustuvorlik",
        "eng_erta", "eskirish", "band_vaqti", "oxirgi_xato", "xato_turi", "xato_vaqti", "partiya",
        "yaratilgan", "yangilangan", "method", "message_key", "payload", "tarix", "yuborilgan",
    ]  # fmt: skip
    assert message_view.messages_table([message])[0].split() == [
        "id", "tur", "kalit", "holat", "urinish", "keyingi_urinish", "oxirgi_xato",
    ]  # fmt: skip
    reaped = queries.Reaped(pending=2, failed=1)
    assert maintenance.reaped_text(reaped) == "2 back to kutmoqda, 1 to xato"
    assert maintenance.reaped_json(reaped) == {"kutmoqda": 2, "xato": 1}
    assert not queries.Reaped() and not queries.Pruned()
    pruned = queries.Pruned(done_rows=3, markers=4)
    assert maintenance.pruned_json(pruned) == {"bajarildi": 3, "yuborilgan": 4}
    assert maintenance.pruned_text(pruned) == "3 bajarildi rows and 4 sent markers"
