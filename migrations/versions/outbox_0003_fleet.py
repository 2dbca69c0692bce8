"""Queues per bot, and the state a fleet of relays shares: flood pauses and send slots.

Revision ID: outbox_0003
Revises: outbox_0002
Create Date: 2026-11-30

``navbat`` (queue) names the bot a row is for; rows without one, old rows and the lesson's
plain INSERT included, are in the queue ``default``. Adding a column with a constant default
rewrites nothing: no row is touched or lost.

``bot_holati`` (bot state) holds one row per bot, named by the numeric part of its token (the
public bot id): ``pauza_tugashi``, until when Telegram's flood control pauses the bot, and
``keyingi_slot``, the bot's next free send slot. Relays read and advance them inside their claim
statement, so every relay of a bot, whichever of its queues it serves and ``--poll-only`` ones
too, keeps to one budget and one pause. Only the outbox's own code writes this table: grant an
app role SELECT and INSERT on ``outbox`` only, never rights on this table.

``chat_navbati`` (chat queue) holds when each chat may next receive a message from a bot. It
is UNLOGGED: it is rewritten many times a second, and after a server crash it starts empty, which
costs at most one early message per chat.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0003"
down_revision = "outbox_0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox ADD COLUMN navbat text NOT NULL DEFAULT 'default'")
    op.execute(
        f"ALTER TABLE {s}.outbox ADD CONSTRAINT outbox_navbat_name "
        "CHECK (navbat ~ '^[A-Za-z0-9_.-]{1,64}$')"
    )
    # The claim walks one queue's due rows in order (the planner cannot know how many rows a
    # queue holds, so without this it may sort every pending row on each claim).
    op.execute(
        f"CREATE INDEX outbox_navbat_kutmoqda_idx ON {s}.outbox (navbat, keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda'"
    )
    op.execute(
        f"""
        CREATE TABLE {s}.bot_holati (
            bot           text PRIMARY KEY,
            pauza_tugashi timestamptz NOT NULL DEFAULT '-infinity',
            keyingi_slot  timestamptz NOT NULL DEFAULT '-infinity'
        )
        """
    )
    op.execute(
        f"""
        CREATE UNLOGGED TABLE {s}.chat_navbati (
            bot     text NOT NULL,
            chat    text NOT NULL,
            keyingi timestamptz NOT NULL,
            PRIMARY KEY (bot, chat)
        )
        """
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"DROP TABLE {s}.chat_navbati")
    op.execute(f"DROP TABLE {s}.bot_holati")
    op.execute(f"DROP INDEX {s}.outbox_navbat_kutmoqda_idx")
    op.execute(f"ALTER TABLE {s}.outbox DROP CONSTRAINT outbox_navbat_name")
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN navbat")
    op.execute(revision_comment(down_revision))
