"""Order per chat: each row's place in its chat's order, its chat as a key, and the index the
claim probes for "an earlier message of this chat still to be sent"; edits superseded by a
newer one.

Revision ID: outbox_0016
Revises: outbox_0015
Create Date: 2026-12-02

``tartib`` is the moment a row was first due (its ``keyingi_urinish`` at insert): retries, the
reaper and a hand-back move ``keyingi_urinish`` only, so a chat's order survives them. NULL is
no place in any order (``enqueue(..., ordered=False)``): such a row neither waits nor holds.
``suhbat`` is the row's chat as the claim spaces it: the payload's ``chat_id``, or for a
follow-up by ``message_key`` its original's chat (from its sent marker, or from the original's
own row while it waits). Both are filled by a row trigger, so the lesson's plain INSERT is
ordered too; an insert that gives ``tartib`` keeps it, and ``'infinity'`` asks for none.

``outbox_order_idx`` holds the rows still to be sent (waiting or claimed) that have a chat:
keyed by the bot (the row's ``bot``, or ``:queue`` for a row naming none, which a relay with one
token serves as its bot's), the chat, the priority and the place. The claim probes it once per
candidate (is there an earlier row of this key?), as it probes a follow-up's original; rows
without a place (NULL) sort after every place and are never read by that probe.

``outbox_supersede`` (after insert) ends pending edits of one original that a newer edit of the
same method makes pointless, and every pending edit of an original whose delete is pending:
``bajarildi`` with the code ``superseded`` and the id of the row that superseded it, no request.

Locks: adding the two nullable columns is instant (no rewrite), but ALTER TABLE takes the
table's ACCESS EXCLUSIVE lock until the revision commits; the rows still to be sent get their
place (their due time, or their creation for a row already tried), then the index is built
(one read of the table). Measured on an outbox of 1,000,000 rows (990,000 done, 10,000
pending) by ``python -m bench --only migration``: see docs/decisions.md. Building
``outbox_order_idx`` beforehand with ``CREATE INDEX CONCURRENTLY`` under the same definition
leaves the build out (IF NOT EXISTS).

A relay of the previous release keeps working against this schema, without the order.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0016"
down_revision = "outbox_0015"
branch_labels = None
depends_on = None

# Telegram's chat ids are at most 20 characters and its @usernames 33: a longer "chat" (a row
# written by hand) is no chat the order could key, and would not fit an index entry.
_CHAT_CHARS = 64
_EDITS = "('editmessagetext', 'editmessagecaption', 'editmessagemedia', 'editmessagereplymarkup')"


def _fill(s: str) -> str:
    return f"""
CREATE FUNCTION {s}.outbox_order_fill() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chat text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.tartib IS NULL THEN
            NEW.tartib := NEW.keyingi_urinish;
        ELSIF NEW.tartib = 'infinity' THEN
            NEW.tartib := NULL;
        END IF;
    END IF;
    chat := NEW.payload ->> 'chat_id';
    IF chat IS NULL AND jsonb_typeof(NEW.payload) = 'object' AND NEW.payload ? 'message_key' THEN
        chat := coalesce(
            (SELECT y.chat_id::text FROM {s}.yuborilgan y
             WHERE y.kalit = NEW.payload ->> 'message_key'),
            (SELECT o.suhbat FROM {s}.outbox o WHERE o.kalit = NEW.payload ->> 'message_key'));
    END IF;
    NEW.suhbat := CASE WHEN length(chat) <= {_CHAT_CHARS} THEN chat END;
    RETURN NEW;
END
$$"""


def _supersede(s: str) -> str:
    # Only rows still waiting (kutmoqda) are ended: nothing is superseded once claimed. A row
    # a claim holds locked is waited for (that claim's transaction is short), then skipped if
    # it was taken. Follow-ups of one original share its chat: they are found through
    # outbox_order_idx, among the rows of that chat still to be sent.
    return f"""
CREATE FUNCTION {s}.outbox_supersede() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    method text := lower(coalesce(NEW.payload ->> 'method', ''));
    original text := NEW.payload ->> 'message_key';
    deleting bigint;
BEGIN
    IF original IS NULL OR NEW.holat <> 'kutmoqda' OR NEW.suhbat IS NULL THEN
        RETURN NULL;
    END IF;
    IF method IN {_EDITS} THEN
        -- An edit enqueued while a delete of its message is pending is pointless itself.
        SELECT d.id INTO deleting FROM {s}.outbox d
        WHERE coalesce(d.bot, ':' || d.navbat) = coalesce(NEW.bot, ':' || NEW.navbat)
          AND d.suhbat = NEW.suhbat AND d.suhbat IS NOT NULL
          AND d.holat IN ('kutmoqda', 'bajarilmoqda')
          AND d.payload ->> 'message_key' = original AND d.id <> NEW.id
          AND lower(d.payload ->> 'method') = 'deletemessage'
        LIMIT 1;
        IF deleting IS NOT NULL THEN
            UPDATE {s}.outbox SET holat = 'bajarildi', xato_turi = 'superseded',
                oxirgi_xato = format('superseded by row %s', deleting), yangilangan = now()
            WHERE id = NEW.id;
            RETURN NULL;
        END IF;
    ELSIF method <> 'deletemessage' THEN
        RETURN NULL;
    END IF;
    UPDATE {s}.outbox o SET holat = 'bajarildi', xato_turi = 'superseded',
        oxirgi_xato = format('superseded by row %s', NEW.id), yangilangan = now()
    WHERE coalesce(o.bot, ':' || o.navbat) = coalesce(NEW.bot, ':' || NEW.navbat)
      AND o.suhbat = NEW.suhbat AND o.suhbat IS NOT NULL
      AND o.holat IN ('kutmoqda', 'bajarilmoqda') AND o.holat = 'kutmoqda'
      AND o.payload ->> 'message_key' = original AND o.id < NEW.id
      AND CASE WHEN method = 'deletemessage' THEN lower(o.payload ->> 'method') IN {_EDITS}
               ELSE lower(o.payload ->> 'method') = method END;
    RETURN NULL;
END
$$"""


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"ALTER TABLE {s}.outbox ADD COLUMN tartib timestamptz, ADD COLUMN suhbat text")
    op.execute(_fill(s))
    op.execute(
        f"CREATE TRIGGER outbox_order_fill BEFORE INSERT OR UPDATE OF payload "
        f"ON {s}.outbox FOR EACH ROW EXECUTE FUNCTION {s}.outbox_order_fill()"
    )
    op.execute(_supersede(s))
    op.execute(
        f"CREATE TRIGGER outbox_supersede AFTER INSERT ON {s}.outbox FOR EACH ROW "
        f"WHEN (NEW.payload ? 'message_key') EXECUTE FUNCTION {s}.outbox_supersede()"
    )
    # The rows still to be sent take their place: a row never tried, its due time; a row
    # tried already was due by then, and no later than its creation's turn. One statement per
    # state, so that each reads its partial index, not the whole table.
    for state in ("kutmoqda", "bajarilmoqda"):
        op.execute(
            f"UPDATE {s}.outbox o SET "
            "tartib = CASE WHEN o.urinish = 0 THEN o.keyingi_urinish "
            "              ELSE least(o.keyingi_urinish, o.yaratilgan) END, "
            f"suhbat = (SELECT CASE WHEN length(c) <= {_CHAT_CHARS} THEN c END FROM (SELECT "
            "    coalesce(o.payload ->> 'chat_id', "
            f"            (SELECT y.chat_id::text FROM {s}.yuborilgan y "
            "             WHERE y.kalit = o.payload ->> 'message_key')) AS c) x) "
            f"WHERE o.holat = '{state}'"
        )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS outbox_order_idx ON {s}.outbox "
        "((coalesce(bot, ':' || navbat)), suhbat, ustuvorlik, tartib, id) "
        "WHERE holat IN ('kutmoqda', 'bajarilmoqda') AND suhbat IS NOT NULL"
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"DROP TRIGGER outbox_supersede ON {s}.outbox")
    op.execute(f"DROP FUNCTION {s}.outbox_supersede()")
    op.execute(f"DROP TRIGGER outbox_order_fill ON {s}.outbox")
    op.execute(f"DROP FUNCTION {s}.outbox_order_fill()")
    op.execute(f"DROP INDEX IF EXISTS {s}.outbox_order_idx")
    op.execute(f"ALTER TABLE {s}.outbox DROP COLUMN suhbat, DROP COLUMN tartib")
    op.execute(revision_comment(down_revision))
