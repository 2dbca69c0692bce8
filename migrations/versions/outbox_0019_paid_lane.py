"""The paid lane: a second slot clock on each bot's state row, for the messages sent with
``allow_paid_broadcast``, and that lane's stop (until when, and why).

Revision ID: outbox_0019
Revises: outbox_0018
Create Date: 2026-12-02

A bot may send up to 1,000 messages a second with ``allow_paid_broadcast`` (a fee in Stars
per message), beside its free 30. With ``outbox relay --paid-rate-limit N``, the rows whose
payload sets ``allow_paid_broadcast`` (read from the payload by the claim, so a plain INSERT
is one as much as an enqueue) book their send slots on ``pullik_slot``, as the other rows do
on ``keyingi_slot``: each lane has its own room, and both are kept under the same row lock, so
for every relay of the bot together.

A refusal for the bot's Stars balance or its audience stops the paid lane alone until
``pullik_pauza_tugashi`` (an hour on, or an operator's ``outbox resume --paid BOT``), with
Telegram's words in ``pullik_pauza_sababi``; the free lane goes on.

Locks: adding columns with a constant default (or none) is instant (no rewrite); ALTER TABLE
takes ``bot_holati``'s ACCESS EXCLUSIVE lock until the revision commits (one row per bot).
The outbox table is not touched. A relay of the previous release keeps working against this
schema, with no paid lane.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0019"
down_revision = "outbox_0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"ALTER TABLE {s}.bot_holati "
        "ADD COLUMN pullik_slot timestamptz NOT NULL DEFAULT '-infinity', "
        "ADD COLUMN pullik_pauza_tugashi timestamptz NOT NULL DEFAULT '-infinity', "
        "ADD COLUMN pullik_pauza_sababi text"
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"ALTER TABLE {s}.bot_holati DROP COLUMN pullik_pauza_sababi, "
        "DROP COLUMN pullik_pauza_tugashi, DROP COLUMN pullik_slot"
    )
    op.execute(revision_comment(down_revision))
