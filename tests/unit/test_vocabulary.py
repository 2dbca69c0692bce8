"""The one table of names: it covers the table, and rows are read by name, not by position.

Here the unit tier's tests (no database); the others are in ``tests/db/test_vocabulary.py``.
"""

from __future__ import annotations

import re

from outbox import presentation, queries, vocabulary
from outbox.queries._common import _sql
from outbox.states import State


def test_state_literals_in_sql_come_from_the_states() -> None:
    statement = _sql("SELECT 1 WHERE holat IN ({pending}, {in_progress}, {done}, {failed})", "s")
    assert statement == "SELECT 1 WHERE holat IN ('kutmoqda', 'bajarilmoqda', 'bajarildi', 'xato')"
    # No statement spells a state by hand.
    sources = [
        queries.app,
        queries.claim,
        queries.maintenance,
        queries.operator,
        queries.relay,
        queries.status,
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
    for module in (queries.claim, queries.maintenance, queries.operator, queries.relay):
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str) and "tarix ||" in value:
                entries = value[value.index("tarix ||") :]
                # Keys are the plain words before a comma; values are sentences or columns.
                written |= set(re.findall(r"'([a-z_]+)',", entries))
    assert written, "no statement appends to tarix?"
    assert written <= keys, written - keys


class _Column:
    def __init__(self, name: str) -> None:
        self.name = name


class _Cursor:
    def __init__(self, names: list[str]) -> None:
        self.description = [_Column(name) for name in names]


def test_a_claimed_row_is_read_by_name_whatever_the_returning_lists_order() -> None:
    values = {
        "id": 5,
        "kind": "eslatma",
        "key": "k5",
        "payload": '{"chat_id": 1, "text": "x"}',
        "attempts": 2,
        "already_sent": True,
        "claimed_at": None,
        "wait": 0.25,
        "queue": "shop",
        "original": "[42, 7, null]",
        "original_state": None,
        "expires_in": 3.5,
        "priorities": "{5,0}",
        "extra": "a column added to the list",
    }
    expected = queries.ClaimedRow(
        id=5,
        kind="eslatma",
        key="k5",
        payload={"chat_id": 1, "text": "x"},
        attempts=2,
        already_sent=True,
        claimed_at=None,  # type: ignore[arg-type]
        wait=0.25,
        queue="shop",
        original=[42, 7, None],  # a follow-up's original: its marker, decoded
        expires_in=3.5,
        priorities="{5,0}",
    )
    for names in (list(values), list(reversed(values))):
        make = queries.claim._claimed_rows(_Cursor(names))  # type: ignore[arg-type]
        assert make([values[name] for name in names]) == expected


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
    assert list(presentation.message_json(message)) == [
        "id", "tur", "navbat", "bot", "kalit", "holat", "urinish", "keyingi_urinish", "ustuvorlik",
        "eng_erta", "eskirish", "band_vaqti", "oxirgi_xato", "xato_turi", "xato_vaqti", "partiya",
        "yaratilgan", "yangilangan", "method", "message_key", "payload", "tarix", "yuborilgan",
    ]  # fmt: skip
    assert presentation.messages_table([message])[0].split() == [
        "id", "tur", "kalit", "holat", "urinish", "keyingi_urinish", "oxirgi_xato",
    ]  # fmt: skip
    reaped = queries.Reaped(pending=2, failed=1)
    assert presentation.reaped_text(reaped) == "2 back to kutmoqda, 1 to xato"
    assert presentation.reaped_json(reaped) == {"kutmoqda": 2, "xato": 1}
    assert not queries.Reaped() and not queries.Pruned()
    pruned = queries.Pruned(done_rows=3, markers=4)
    assert presentation.pruned_json(pruned) == {"bajarildi": 3, "yuborilgan": 4}
    assert presentation.pruned_text(pruned) == "3 bajarildi rows and 4 sent markers"
