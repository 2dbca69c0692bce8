"""The one table of names: it covers the table, and rows are read by name, not by position.

Here the unit tier's tests (no database); the others are in ``tests/db/test_vocabulary.py``.
"""

from __future__ import annotations

import re

from outbox import queries, sql, vocabulary
from outbox.ops.views import maintenance
from outbox.ops.views import message as message_view
from outbox.states import State


def test_every_state_a_statement_names_is_a_state() -> None:
    # The named queries spell states as literals, readable in psql: each must be one of State.
    states = {str(s) for s in State}
    compared = re.compile(r"holat\s*(?:=|<>|IN\s*\()\s*((?:'[^']*'\s*,?\s*)+)", re.IGNORECASE)
    named = 0
    for name in sql.query_names():
        for found in compared.finditer(sql.source(name)):
            words = set(re.findall(r"'([^']*)'", found.group(1)))
            assert words <= states, (name, words - states)
            named += len(words)
    assert named > 20  # the check reads the statements it is about


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
        "yaratilgan", "yangilangan", "traceparent", "method", "message_key", "payload", "tarix",
        "yuborilgan", "waits_for",
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
