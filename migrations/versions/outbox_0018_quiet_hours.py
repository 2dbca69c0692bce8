"""Quiet hours: a chat's hours in its own zone during which the messages that ask for them
(``enqueue(..., quiet_hours=True)``) wait; the flag on each row, and the moment a held row was
due before its chat's quiet hours held it.

Revision ID: outbox_0018
Revises: outbox_0017
Create Date: 2026-12-02

``tinch_soatlar`` holds one (bot, chat) pair's hours: ``boshi`` and ``oxiri`` as wall-clock
times of the IANA zone ``tz`` (``boshi > oxiri``: across midnight). ``bot`` is the row's
``bot`` column, '' for the rows naming no bot; ``chat`` keys chats as ``suhbat`` does
(outbox_0016). The claim probes it by key, and only for rows that ask (``tinch``).

``tinch`` is a row's request to be held in its chat's quiet hours. A claim that finds such a
row inside them moves it to their end (``keyingi_urinish``) and remembers its due time in
``tinch_oldin``: the held row is then not due, so it is neither the queue's lag nor walked by
later claims. A change of a chat's hours puts its held rows back to that time, and the next
claim judges them again. ``outbox_tinch_idx`` finds a chat's waiting rows that ask for quiet
hours (only those: it is empty while no row asks).

Locks: the new table takes none on the outbox. Adding ``tinch`` (a constant default) and
``tinch_oldin`` (nullable) is instant, without a rewrite, but ALTER TABLE takes the outbox's
ACCESS EXCLUSIVE lock until the revision commits; the partial index is built in the same
transaction with one read of the table (no row asks yet, so it stays empty). Building it
beforehand with ``CREATE INDEX CONCURRENTLY`` under the same definition leaves the build out
(IF NOT EXISTS).

A relay of the previous release keeps working against this schema, without quiet hours.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0018"
down_revision = "outbox_0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"CREATE TABLE {s}.tinch_soatlar ("
        "bot text NOT NULL DEFAULT '', "
        "chat text NOT NULL, "
        "boshi time NOT NULL, "
        "oxiri time NOT NULL, "
        "tz text NOT NULL, "
        "yangilangan timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (bot, chat), "
        # start == end means none: the API deletes the row instead.
        "CONSTRAINT tinch_soatlar_hours CHECK (boshi <> oxiri))"
    )
    op.execute(
        f"ALTER TABLE {s}.outbox ADD COLUMN tinch boolean NOT NULL DEFAULT false, "
        "ADD COLUMN tinch_oldin timestamptz"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS outbox_tinch_idx ON {s}.outbox (suhbat) "
        "WHERE tinch AND holat = 'kutmoqda'"
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    # Held rows go back to the moment they were due: nothing waits for hours no one keeps.
    op.execute(
        f"UPDATE {s}.outbox SET keyingi_urinish = tinch_oldin WHERE tinch AND holat = 'kutmoqda'"
    )
    op.execute(f"DROP INDEX IF EXISTS {s}.outbox_tinch_idx")
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN tinch_oldin, DROP COLUMN tinch")
    op.execute(f"DROP TABLE {s}.tinch_soatlar")
    op.execute(revision_comment(down_revision))
