"""The sent marker keeps an album's message ids, for follow-ups that act on the album.

Revision ID: outbox_0007
Revises: outbox_0006
Create Date: 2026-12-01

``yuborilgan.message_ids`` holds the ids of every message of an album (sendMediaGroup), in the
order Telegram answered; NULL for a single message, whose id is ``message_id`` as before (an
album's ``message_id`` is its first item, the one that carries the caption). A follow-up named
by the album's key (``"message_key"``) deletes all of them and edits the first.

Locks: adding a nullable column without a default changes only the catalogue (about 1 ms under
the table's ACCESS EXCLUSIVE lock); no row is read or rewritten.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0007"
down_revision = "outbox_0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.yuborilgan ADD COLUMN message_ids bigint[]")
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.yuborilgan DROP COLUMN message_ids")
    op.execute(revision_comment(down_revision))
