"""Pauses an operator sets, and batches (broadcasts) of rows.

Revision ID: outbox_0006
Revises: outbox_0004
Create Date: 2026-12-01

``pauza`` (pause) holds one row per paused scope: ``doira`` (scope) is the column the pause
matches (``navbat``: a queue, ``bot``: every queue of one bot, ``tur``: a kind of message,
``partiya``: a batch) and ``qiymat`` (value) the value it matches. Every relay's claim skips
the rows of a paused scope, so a pause holds for the whole fleet from its commit on and
survives restarts; the rows stay ``kutmoqda``. Only the operator's commands and the web page
write it.

``partiya`` (batch) on ``outbox`` names the broadcast a row belongs to (NULL: none). Its index
holds batch rows only, by state and last change, which is what a batch's progress counts and
what its cancel walks; rows without a batch cost it nothing.

Locks: the revision holds the outbox table's ACCESS EXCLUSIVE lock (relays and the app wait)
from its first statement to its commit. Adding a nullable column without a default changes
only the catalogue and rewrites no row; the check on the batch's name reads every row once (all
NULL, nothing is rewritten), and so does building the partial index (it holds no row yet).
Measured on an outbox of 1,000,000 rows, 10,000 of them pending (embedded PostgreSQL 16, a busy
2-core machine, two runs): the new table 20-25 ms, the column under 12 ms, the check 310-340 ms,
the index 260-270 ms: about 0.6 s in all (0.7 s through ``outbox migrate``). Both scans grow
with the table; retention keeps it small.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0006"
down_revision = "outbox_0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"""
        CREATE TABLE {s}.pauza (
            doira      text NOT NULL CHECK (doira IN ('navbat', 'bot', 'tur', 'partiya')),
            qiymat     text NOT NULL CHECK (length(qiymat) BETWEEN 1 AND 200),
            yaratilgan timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (doira, qiymat)
        )
        """
    )
    op.execute(f"ALTER TABLE {s}.outbox ADD COLUMN partiya text")
    op.execute(
        f"ALTER TABLE {s}.outbox ADD CONSTRAINT outbox_partiya_name "
        "CHECK (length(partiya) BETWEEN 1 AND 200)"
    )
    op.execute(
        f"CREATE INDEX outbox_partiya_idx ON {s}.outbox (partiya, holat, yangilangan) "
        "WHERE partiya IS NOT NULL"
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN partiya")
    op.execute(f"DROP TABLE {s}.pauza")
    op.execute(revision_comment(down_revision))
