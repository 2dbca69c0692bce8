"""Many bots in one outbox: a row names the bot that sends it.

Revision ID: outbox_0011
Revises: outbox_0009
Create Date: 2026-12-01

``bot`` on ``outbox`` is the public id of the bot that sends the row (the digits before the
colon of its token, never the token; ``bot_holati.bot`` spells it the same way). NULL, as every
old row and the lesson's plain INSERT have it, means the bot of whichever relay serves the
row's queue with a single token (``TELEGRAM_BOT_TOKEN``), as before. A relay started with
``--tokens-dir`` claims only the rows that name one of its bots.

Its two indexes hold the pending rows that name a bot: by bot, queue and due time for the
relay's question of which of its bots have work, and by bot, queue, priority and due time for
the claim of one bot (a walk per priority, outbox_0009), which so walks only that bot's rows.
Rows without a bot never enter them, so an outbox that does not use the column pays nothing
for them.

``rad_botlar`` (rejected bots) on ``relaylar`` lists the bots whose token Telegram rejected
(401) in that relay: their rows wait, and ``outbox status`` says why.

Locks: the outbox table's ACCESS EXCLUSIVE lock from the first statement to the commit. A
nullable column without a default changes only the catalogue and rewrites no row; the check
reads every row once (all NULL); the partial indexes hold no row yet, though building each reads
the table once.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0011"
down_revision = "outbox_0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox ADD COLUMN bot text")
    op.execute(
        f"ALTER TABLE {s}.outbox ADD CONSTRAINT outbox_bot_id CHECK (bot ~ '^[0-9]{{1,20}}$')"
    )
    op.execute(
        f"CREATE INDEX outbox_bot_kutmoqda_idx ON {s}.outbox (bot, navbat, keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda' AND bot IS NOT NULL"
    )
    op.execute(
        f"CREATE INDEX outbox_bot_ustuvorlik_idx ON {s}.outbox "
        "(bot, navbat, ustuvorlik, keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda' AND bot IS NOT NULL"
    )
    op.execute(f"ALTER TABLE {s}.relaylar ADD COLUMN rad_botlar text[] NOT NULL DEFAULT '{{}}'")
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.relaylar DROP COLUMN rad_botlar")
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN bot")
    op.execute(revision_comment(down_revision))
