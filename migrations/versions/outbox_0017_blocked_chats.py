"""Blocked chats: a (bot, chat) pair that Telegram said is gone for the bot is not asked again.

Revision ID: outbox_0017
Revises: outbox_0016
Create Date: 2026-12-02

``bloklangan`` holds one row per (bot, chat) that answered a 403 meaning the person or group is
gone for this bot (blocked by the user, user deactivated, bot kicked from the group; see
``outbox.classify``): ``bot`` is the row's ``bot``, ``''`` for the rows naming none; ``suhbat``
the chat as outbox_0016 keys it; ``vaqt`` when it was learned, ``xato`` Telegram's words and
``manba`` the id of the row that learned it. The table is logged: a crash does not forget a
block. The relay writes it in the statement that records the outcome; plain SQL may too.

``outbox_order_fill`` (outbox_0016's insert trigger, which sets ``suhbat``) is replaced by one
that goes on to end a new row to a blocked pair at once: ``xato``, the code ``chat_blocked``, no
request and no budget spent. One trigger call per row, not a trigger of its own: plain SQL
inserts are covered too. Its probe of ``bloklangan`` is skipped for a row with no chat, and for
a row that comes with ``suhbat`` ``''`` and a ``chat_id``: the insert has looked the chat up
itself (``enqueue_many`` joins ``bloklangan`` once per statement; the trigger then fills the
row's ``suhbat`` as for any row).
``bloklangan_end_waiting`` (after insert on ``bloklangan``) ends the pair's waiting rows
(``kutmoqda``, not those a relay has claimed) the same way. Deleting the pair
(``outbox.unblock_chat``) lets the next message go; rows ended before stay ended (a replay
sends them).

One race is left: a row inserted while another transaction records the block (neither sees
the other's uncommitted row) stays waiting and is sent once; its 403 ends it.

Locks: creating the table, its trigger and the functions, and replacing ``outbox_order_fill``,
take no lock on the outbox (a new insert uses the new function once the revision commits). No
row is read or rewritten. Measured on an outbox of 1,000,000 rows (10,000 pending) by
``python -m bench --only migration``, when the check was a trigger of its own (whose CREATE
TRIGGER locked the outbox against inserts): the whole upgrade 0.17 s, the longest enqueue
beside it 0.02 s.

Cost: a single ``enqueue`` pays a primary-key probe of ``bloklangan`` (within the noise), and
``enqueue_many`` one join per statement: ``python -m bench.insert_cost`` measured it within
3 % of the rate without the check (docs/decisions.md).

Rolling upgrade: a relay or app of the previous release keeps working against this schema; its
``enqueue_many`` sends no ``suhbat``, so each of its rows is probed by the trigger (correct,
at the per-row cost). The downgrade puts back outbox_0016's ``outbox_order_fill``.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import revision_comment, target_schema

revision = "outbox_0017"
down_revision = "outbox_0016"
branch_labels = None
depends_on = None

_CODE = "chat_blocked"


def _reason(row: str, pair: str) -> str:
    """SQL for the oxirgi_xato of a row ``row`` ended because of the ``bloklangan`` row
    ``pair``: what was learned, when, and the command that lets the chat be sent to again."""
    return (
        "format('not sent: chat %s is gone for this bot (%s, %s UTC); no request was made. "
        "Unblock it to send again: outbox chats --unblock %s%s', "
        f"{row}.suhbat, "
        f"CASE WHEN {pair}.xato = '' THEN 'recorded without Telegram''s words' "
        f"ELSE 'Telegram said ' || quote_literal({pair}.xato) "
        f"|| coalesce(' to row ' || {pair}.manba, '') END, "
        f"to_char({pair}.vaqt AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI'), {row}.suhbat, "
        f"CASE WHEN {pair}.bot <> '' THEN ' --bot ' || {pair}.bot ELSE '' END)"
    )


# outbox_0016's fill, written out (a revision must not change): the row's place and chat.
_CHAT_CHARS = 64


def _fill(s: str, check: str) -> str:
    pair = (
        f"\n    pair {s}.bloklangan%ROWTYPE;"
        "\n    checked boolean := TG_OP = 'INSERT' AND NEW.suhbat IS NOT DISTINCT FROM '';"
        if check
        else ""
    )
    return f"""
CREATE OR REPLACE FUNCTION {s}.outbox_order_fill() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chat text;{pair}
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
    NEW.suhbat := CASE WHEN length(chat) <= {_CHAT_CHARS} THEN chat END;{check}
    RETURN NEW;
END
$$"""


def _blocked_check(s: str) -> str:
    """The check a new row to a blocked pair is ended by, at the end of the fill: once the row
    has its ``suhbat``, on insert only, and without a probe for a row with no chat, nor for a
    row whose insert checked its ``chat_id`` itself (``enqueue_many``: one join per statement)."""
    return f"""
    IF TG_OP = 'INSERT' AND NEW.suhbat IS NOT NULL AND NEW.holat = 'kutmoqda'
       AND NOT (checked AND NEW.payload ? 'chat_id') THEN
        SELECT * INTO pair FROM {s}.bloklangan b
        WHERE b.bot = coalesce(NEW.bot, '') AND b.suhbat = NEW.suhbat;
        IF FOUND THEN
            NEW.holat := 'xato';
            NEW.xato_turi := '{_CODE}';
            NEW.oxirgi_xato := {_reason("NEW", "pair")};
            NEW.xato_vaqti := now();
            NEW.tarix := NEW.tarix || jsonb_build_array(jsonb_build_object(
                'vaqt', now(), 'urinish', 0, 'xato', NEW.oxirgi_xato, 'xato_turi', '{_CODE}'));
        END IF;
    END IF;"""


def previous_fill(s: str) -> str:
    """outbox_0016's ``outbox_order_fill``, without the check: the downgrade's, and the bench's
    measure of what the check costs."""
    return _fill(s, "")


def _end_waiting(s: str) -> str:
    # The pair's waiting rows are found through outbox_order_idx, keyed by the bot: for a row
    # naming its bot, the bot; for rows naming none, ':' || navbat, one key per queue, found
    # in the same index (a loose scan from ':' to ';', past every bot's digits).
    update = f"""
        UPDATE {s}.outbox o SET holat = 'xato', xato_turi = '{_CODE}',
            oxirgi_xato = {_reason("o", "NEW")}, xato_vaqti = now(), yangilangan = now(),
            tarix = o.tarix || jsonb_build_array(jsonb_build_object(
                'vaqt', now(), 'urinish', o.urinish, 'xato', {_reason("o", "NEW")},
                'xato_turi', '{_CODE}'))
        WHERE coalesce(o.bot, ':' || o.navbat) = k AND o.suhbat = NEW.suhbat
          AND o.holat IN ('kutmoqda', 'bajarilmoqda') AND o.holat = 'kutmoqda'"""
    return f"""
CREATE FUNCTION {s}.bloklangan_end_waiting() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    k text;
BEGIN
    IF NEW.bot <> '' THEN
        k := NEW.bot;
        {update};
        RETURN NULL;
    END IF;
    k := ':';
    LOOP
        SELECT min(coalesce(q.bot, ':' || q.navbat)) INTO k FROM {s}.outbox q
        WHERE q.holat IN ('kutmoqda', 'bajarilmoqda') AND q.suhbat IS NOT NULL
          AND coalesce(q.bot, ':' || q.navbat) > k AND coalesce(q.bot, ':' || q.navbat) < ';';
        EXIT WHEN k IS NULL;
        {update};
    END LOOP;
    RETURN NULL;
END
$$"""


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(
        f"""
        CREATE TABLE {s}.bloklangan (
            bot    text NOT NULL DEFAULT '' CHECK (bot = '' OR bot ~ '^[0-9]{{1,20}}$'),
            suhbat text NOT NULL CHECK (length(suhbat) <= 64),
            vaqt   timestamptz NOT NULL DEFAULT now(),
            xato   text NOT NULL DEFAULT '',
            manba  bigint,
            PRIMARY KEY (bot, suhbat)
        )
        """
    )
    op.execute(_fill(s, _blocked_check(s)))
    op.execute(_end_waiting(s))
    op.execute(
        f"CREATE TRIGGER bloklangan_end_waiting AFTER INSERT ON {s}.bloklangan FOR EACH ROW "
        f"EXECUTE FUNCTION {s}.bloklangan_end_waiting()"
    )
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(previous_fill(s))
    op.execute(f"DROP TABLE {s}.bloklangan")
    op.execute(f"DROP FUNCTION {s}.bloklangan_end_waiting()")
    op.execute(revision_comment(down_revision))
