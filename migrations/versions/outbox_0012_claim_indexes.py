"""Fewer, better-aimed indexes on ``outbox``: a claim writes one index entry less a message,
an enqueue one less a row, and the claim's plan no longer depends on fresh statistics.

Revision ID: outbox_0012
Revises: outbox_0011
Create Date: 2026-12-01

Before, ``outbox`` had ten indexes (eight besides its primary key and ``kalit``'s unique
key); it has eight now. Dropped:

- ``outbox_kutmoqda_idx`` (keyingi_urinish, id) of pending rows. Every claim names its queue,
  and ``outbox_navbat_kutmoqda_idx`` (navbat, keyingi_urinish, id) serves it. With both, a
  planner that knew every pending row to be in one queue walked this one and filtered on
  ``navbat``: the claim then read every due row of the other queues first, a cost that grew
  with their backlog.
- ``outbox_band_idx`` (band_vaqti) of claimed rows and ``outbox_egasi_idx`` (egasi) of rows
  with a holder: replaced by ``outbox_bajarilmoqda_idx`` (egasi, yakka) of claimed rows, which
  answers the claim's "does this process hold anything / a suspect?" without reading the rows
  it holds, and which the reaper's scan of claimed rows uses (claimed rows are few: the
  fleet's sends in flight). A claim wrote an entry in each of the two; it writes one now.
- ``outbox_yakka_idx`` (keyingi_urinish, id) of suspects: rebuilt as (navbat, keyingi_urinish,
  id) of *pending* suspects, the rows the claim asks about. Without statistics (a table filled
  faster than autovacuum analyses it, as a broadcast does), the planner answered "is a
  suspect of this queue due?" from the index of all pending rows, reading every one of them on
  every claim: 20 ms a claim beside 50,000 pending rows instead of under 2.

Locks: the revision holds the outbox table's ACCESS EXCLUSIVE lock (drop index) until it
commits; each ``CREATE INDEX`` reads the whole table once while writers wait (the new indexes
hold only claimed rows and pending suspects: few). Measured on an outbox of 1,000,000 rows
(990,000 done, 10,000 pending; 272 MB; embedded PostgreSQL 16, a busy 2-core machine, two
runs): the two builds 95-118 ms each, the four drops under 1 ms each; the revision through
Alembic 0.24-0.29 s in all. Building the two indexes beforehand with ``CREATE INDEX
CONCURRENTLY`` under the same names and definitions (outside a transaction, 190-270 ms each,
writers not blocked) leaves the revision only the drops: 33-56 ms. It finds them (IF NOT
EXISTS) and builds nothing. No row is read into Python or rewritten.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0012"
down_revision = "outbox_0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"CREATE INDEX IF NOT EXISTS outbox_bajarilmoqda_idx ON {s}.outbox (egasi, yakka) "
        "WHERE holat = 'bajarilmoqda'"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS outbox_yakka_kutmoqda_idx "
        f"ON {s}.outbox (navbat, keyingi_urinish, id) WHERE yakka AND holat = 'kutmoqda'"
    )
    for index in ("outbox_kutmoqda_idx", "outbox_band_idx", "outbox_egasi_idx", "outbox_yakka_idx"):
        op.execute(f"DROP INDEX IF EXISTS {s}.{index}")
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"CREATE INDEX outbox_kutmoqda_idx ON {s}.outbox (keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda'"
    )
    op.execute(
        f"CREATE INDEX outbox_band_idx ON {s}.outbox (band_vaqti) WHERE holat = 'bajarilmoqda'"
    )
    op.execute(f"CREATE INDEX outbox_yakka_idx ON {s}.outbox (keyingi_urinish, id) WHERE yakka")
    op.execute(f"CREATE INDEX outbox_egasi_idx ON {s}.outbox (egasi) WHERE egasi IS NOT NULL")
    op.execute(f"DROP INDEX {s}.outbox_yakka_kutmoqda_idx")
    op.execute(f"DROP INDEX {s}.outbox_bajarilmoqda_idx")
    op.execute(revision_comment(down_revision))
