"""Two indexes keyed by lane (a bot's rows of a queue, or the queue's rows that name no bot):
one for the claim's walk, one for the relay's timing.

Revision ID: outbox_0014
Revises: outbox_0013
Create Date: 2026-12-02

The claim (``outbox/sql/claim.sql``) walks the pending rows of a lane priority by priority,
each in due order. A lane takes the rows that name its bot and, for a relay with one token,
those that name none. Before, those were two indexes (``outbox_ustuvorlik_idx`` on
(navbat, ustuvorlik, keyingi_urinish, id) for every pending row, ``outbox_bot_ustuvorlik_idx``
with ``bot`` in front for the rows naming one). ``outbox_claim_idx`` keys both by their lane,
``coalesce(bot, '') || ':' || navbat`` (a bot id is digits, so the key is unambiguous): one
index walk per (lane, priority), and one index fewer for every write. The lane is one
expression, not two columns, so that no plan, even one made on a table never analysed, can
prefer an index in due order by queue and filter the other priorities out.
``outbox_lane_kutmoqda_idx`` (lane, keyingi_urinish, id) does the same for the
relay's timing (each lane's first pending row) and the claim's windows, in place of
``outbox_bot_kutmoqda_idx`` (bot, navbat, keyingi_urinish, id) of the rows naming a bot and
``outbox_navbat_kutmoqda_idx`` (navbat, keyingi_urinish, id) of all pending rows. Each pending
row has two entries in these indexes, as before for a row naming no bot; a row naming one had
four.

Locks: building the index reads the table once while writers wait (SHARE lock); the drops are
instant. Measured on an outbox of 1,000,000 rows (990,000 done, 10,000 pending): see
docs/decisions.md. Building ``outbox_claim_idx`` beforehand with ``CREATE INDEX CONCURRENTLY``
under the same definition leaves the revision only the drops (IF NOT EXISTS).

A relay of the previous release that is running keeps working against this schema (its
statements name no index; its claim walks the remaining indexes, slower, until it is
upgraded); one started after this revision refuses with one line, as for any newer schema.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0014"
down_revision = "outbox_0013"
branch_labels = None
depends_on = None


# The pending rows' indexes the two lane indexes replace.
_REPLACED = (
    "outbox_ustuvorlik_idx",
    "outbox_bot_ustuvorlik_idx",
    "outbox_bot_kutmoqda_idx",
    "outbox_navbat_kutmoqda_idx",
)


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"CREATE INDEX IF NOT EXISTS outbox_claim_idx ON {s}.outbox "
        "((coalesce(bot, '') || ':' || navbat), ustuvorlik, keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda'"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS outbox_lane_kutmoqda_idx ON {s}.outbox "
        "((coalesce(bot, '') || ':' || navbat), keyingi_urinish, id) WHERE holat = 'kutmoqda'"
    )
    for index in _REPLACED:
        op.execute(f"DROP INDEX IF EXISTS {s}.{index}")
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"CREATE INDEX outbox_ustuvorlik_idx ON {s}.outbox "
        "(navbat, ustuvorlik, keyingi_urinish, id) WHERE holat = 'kutmoqda'"
    )
    op.execute(
        f"CREATE INDEX outbox_bot_ustuvorlik_idx ON {s}.outbox "
        "(bot, navbat, ustuvorlik, keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda' AND bot IS NOT NULL"
    )
    op.execute(
        f"CREATE INDEX outbox_bot_kutmoqda_idx ON {s}.outbox (bot, navbat, keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda' AND bot IS NOT NULL"
    )
    op.execute(
        f"CREATE INDEX outbox_navbat_kutmoqda_idx ON {s}.outbox (navbat, keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda'"
    )
    op.execute(f"DROP INDEX {s}.outbox_lane_kutmoqda_idx")
    op.execute(f"DROP INDEX {s}.outbox_claim_idx")
    op.execute(revision_comment(down_revision))
