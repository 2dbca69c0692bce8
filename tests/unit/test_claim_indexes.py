"""The claim and the completion read what they need, whatever the table's statistics say.

A broadcast fills the outbox faster than autovacuum analyses it, and other queues (other bots)
pile up rows due before this queue's: the claim must still read its own batch only, and the
completion probe each row by its primary key. The plans are read with EXPLAIN ANALYZE (rows
read and discarded), never timed. Also: revision outbox_0012 swaps the indexes without losing a
row, both ways.

Here the unit tier's tests (no database); the others are in ``tests/db/test_claim_indexes.py``.
"""

from __future__ import annotations

from outbox.queries.claim import _positional


def test_named_placeholders_become_numbered_ones_once_each() -> None:
    statement, names = _positional("SELECT %(a)s, %(b)s, %(a)s, 7 %% 2, '$x'")
    assert statement == "SELECT $1, $2, $1, 7 % 2, '$x'"
    assert names == ("a", "b")
