"""The relay-outcome trigger reads the failure's code instead of its wording.

Revision ID: reminders_0003
Revises: reminders_0002
Create Date: 2026-12-01

A user becomes inactive when a message to their chat fails for good with ``xato_turi =
'blocked'`` (Telegram's 403 for a person who blocked the bot or deleted their account, as the
outbox's error classification names it since outbox_0004), not when ``oxirgi_xato`` starts
with one sentence: a rewording in the library no longer changes the domain. The outbox's
migrations run first (``reminders migrate``), so the column is there.

Replacing a function and a trigger changes only the catalogue: the outbox table is locked for
as long as that takes, a few milliseconds, whatever its size.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import target_schema

revision = "reminders_0003"
down_revision = "reminders_0002"
branch_labels = None
depends_on = None

# The same words as outbox.states.FailureCode.BLOCKED, written out: a revision must not change
# when the code does. Each: (the function's test, the trigger's test) of a row that failed
# because the person is gone.
_BY_CODE = ("NEW.xato_turi = 'blocked'", "NEW.xato_turi = 'blocked'")
_BY_TEXT = (  # reminders_0002's
    "NEW.oxirgi_xato LIKE 'Telegram refused (403)%' "
    "AND (NEW.oxirgi_xato ILIKE '%blocked by the user%' "
    "OR NEW.oxirgi_xato ILIKE '%user is deactivated%')",
    "NEW.oxirgi_xato LIKE 'Telegram refused (403)%'",
)


def _domain_schema() -> str:
    schema = op.get_bind().exec_driver_sql("SELECT current_schema()").scalar_one()
    return str(schema)


def _replace(gone: tuple[str, str]) -> None:
    """The function and trigger of reminders_0002, with ``gone`` as the test of a row that
    failed because the person is gone."""
    in_function, in_trigger = gone
    outbox = f'"{target_schema()}".outbox'
    domain = f'"{_domain_schema()}"'
    # SECURITY DEFINER: the relay's database role needs no rights on the domain's tables. The
    # function must never fail the relay's write: a problem becomes a warning in the server log.
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION {domain}.vazifalar_relay_outcome() RETURNS trigger
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
        DECLARE
            old_chat bigint := (OLD.payload ->> 'chat_id')::bigint;
            new_chat bigint := (NEW.payload ->> 'chat_id')::bigint;
        BEGIN
            IF new_chat IS DISTINCT FROM old_chat THEN
                UPDATE {domain}.foydalanuvchi SET chat_id = new_chat WHERE chat_id = old_chat;
            END IF;
            IF NEW.holat = 'xato' AND {in_function} THEN
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
    op.execute(f"DROP TRIGGER vazifalar_relay_outcome ON {outbox}")
    op.execute(
        f"""
        CREATE TRIGGER vazifalar_relay_outcome AFTER UPDATE ON {outbox}
        FOR EACH ROW
        WHEN (OLD.holat = 'bajarilmoqda' AND NEW.holat <> 'bajarilmoqda'
              AND jsonb_typeof(OLD.payload -> 'chat_id') = 'number'
              AND jsonb_typeof(NEW.payload -> 'chat_id') = 'number'
              AND (NEW.payload -> 'chat_id' IS DISTINCT FROM OLD.payload -> 'chat_id'
                   OR (NEW.holat = 'xato' AND {in_trigger})))
        EXECUTE FUNCTION {domain}.vazifalar_relay_outcome()
        """
    )


def upgrade() -> None:
    _replace(_BY_CODE)


def downgrade() -> None:
    _replace(_BY_TEXT)
