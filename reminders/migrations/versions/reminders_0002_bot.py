"""The bot: active users, snoozes, handled updates, and the relay's outcomes in the domain.

Revision ID: reminders_0002
Revises: reminders_0001
Create Date: 2026-11-30

The domain follows what the relay learns from Telegram without the outbox knowing the domain:
a trigger of the domain's own on the outbox table runs in the transaction that writes the
relay's outcome. It marks a user inactive when a message to their chat fails for good because
they blocked the bot (or deleted their account), and moves users to a group's new chat id when
the relay rewrote a row's chat id after the group became a supergroup.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import target_schema

revision = "reminders_0002"
down_revision = "reminders_0001"
branch_labels = None
depends_on = None


def _domain_schema() -> str:
    schema = op.get_bind().exec_driver_sql("SELECT current_schema()").scalar_one()
    return str(schema)


def upgrade() -> None:
    outbox = f'"{target_schema()}".outbox'
    domain = f'"{_domain_schema()}"'
    # faol: false once Telegram said the user blocked the bot; /start makes it true again.
    op.execute("ALTER TABLE foydalanuvchi ADD COLUMN faol boolean NOT NULL DEFAULT true")
    op.execute("CREATE INDEX foydalanuvchi_chat_idx ON foydalanuvchi (chat_id)")
    # kechiktirish: how many times the task was put off ("Keyinroq"); each snooze has its own
    # key, which is therefore never enqueued twice.
    op.execute("ALTER TABLE vazifa ADD COLUMN kechiktirish integer NOT NULL DEFAULT 0")
    # Telegram updates the bot has handled: the change, its reply and this row commit together,
    # so two bot processes (or a webhook delivered twice) never act on one update twice.
    op.execute(
        """
        CREATE TABLE bot_yangilanish (
            bot_id     bigint NOT NULL,
            update_id  bigint NOT NULL,
            olingan    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (bot_id, update_id)
        )
        """
    )
    op.execute("CREATE INDEX bot_yangilanish_olingan_idx ON bot_yangilanish (olingan)")
    # Reminder messages whose button was pressed, and what the press did: a second press on
    # the same message (a double tap, two presses before the edit arrived) is told so.
    op.execute(
        """
        CREATE TABLE eslatma_javob (
            chat_id    bigint NOT NULL,
            message_id bigint NOT NULL,
            amal       text NOT NULL,
            vaqt       timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (chat_id, message_id)
        )
        """
    )
    # SECURITY DEFINER: the relay's database role needs no rights on the domain's tables. The
    # function must never fail the relay's write: a problem becomes a warning in the server log.
    op.execute(
        f"""
        CREATE FUNCTION {domain}.vazifalar_relay_outcome() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            old_chat bigint := (OLD.payload ->> 'chat_id')::bigint;
            new_chat bigint := (NEW.payload ->> 'chat_id')::bigint;
        BEGIN
            IF new_chat IS DISTINCT FROM old_chat THEN
                UPDATE {domain}.foydalanuvchi SET chat_id = new_chat WHERE chat_id = old_chat;
            END IF;
            IF NEW.holat = 'xato' AND NEW.oxirgi_xato LIKE 'Telegram refused (403)%'
               AND (NEW.oxirgi_xato ILIKE '%blocked by the user%'
                    OR NEW.oxirgi_xato ILIKE '%user is deactivated%') THEN
                UPDATE {domain}.foydalanuvchi SET faol = false
                WHERE chat_id = new_chat AND faol;
            END IF;
            RETURN NULL;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'vazifalar_relay_outcome: %', SQLERRM;
            RETURN NULL;
        END
        $$
        """
    )
    # Only the relay's outcome writes (a claimed row leaving its claim), only rows whose chat is
    # a number, and only the two changes above: every other write skips the function.
    op.execute(
        f"""
        CREATE TRIGGER vazifalar_relay_outcome AFTER UPDATE ON {outbox}
        FOR EACH ROW
        WHEN (OLD.holat = 'bajarilmoqda' AND NEW.holat <> 'bajarilmoqda'
              AND jsonb_typeof(OLD.payload -> 'chat_id') = 'number'
              AND jsonb_typeof(NEW.payload -> 'chat_id') = 'number'
              AND (NEW.payload -> 'chat_id' IS DISTINCT FROM OLD.payload -> 'chat_id'
                   OR (NEW.holat = 'xato' AND NEW.oxirgi_xato LIKE 'Telegram refused (403)%')))
        EXECUTE FUNCTION {domain}.vazifalar_relay_outcome()
        """
    )


def downgrade() -> None:
    op.execute(f'DROP TRIGGER vazifalar_relay_outcome ON "{target_schema()}".outbox')
    op.execute(f'DROP FUNCTION "{_domain_schema()}".vazifalar_relay_outcome()')
    op.execute("DROP TABLE eslatma_javob")
    op.execute("DROP TABLE bot_yangilanish")
    op.execute("ALTER TABLE vazifa DROP COLUMN kechiktirish")
    op.execute("DROP INDEX foydalanuvchi_chat_idx")
    op.execute("ALTER TABLE foydalanuvchi DROP COLUMN faol")
