-- What the host app runs in its own transaction, through its SQLAlchemy session or connection
-- (outbox.queries.app, outbox.queries.batch): text() statements with :name parameters and
-- explicit casts, so that any driver takes them. None of them commits.

-- name: enqueue
-- One message; (id, true) when new, (id, false) for a key already in the outbox. No row when the
-- conflicting row was committed after this statement's snapshot: find_by_key then sees it.
WITH inserted AS (
    INSERT INTO outbox (tur, kalit, payload, keyingi_urinish, navbat, partiya, ustuvorlik,
                        eng_erta, eskirish, bot, traceparent, tracestate, tartib, tinch)
    VALUES (:tur, :kalit, CAST(:payload AS jsonb),
            -- A follow-up is due no sooner than its original, if that still waits (nor
            -- later than its own expiry: the claim then fails it as expired).
            least(greatest(coalesce(CAST(:run_at AS timestamptz), now()),
                           CASE WHEN CAST(:payload AS jsonb) ? 'message_key' THEN
                               (SELECT w.keyingi_urinish FROM outbox w
                                WHERE w.kalit = CAST(:payload AS jsonb) ->> 'message_key'
                                  AND w.holat = 'kutmoqda') END),
                  CAST(:eskirish AS timestamptz)),
            :navbat, CAST(:partiya AS text), :ustuvorlik, CAST(:eng_erta AS timestamptz),
            CAST(:eskirish AS timestamptz), CAST(:bot AS text), CAST(:traceparent AS text),
            CAST(:tracestate AS text),
            -- NULL: the row trigger gives it its first due time; 'infinity': no place.
            CASE WHEN CAST(:ordered AS boolean) THEN NULL ELSE CAST('infinity' AS timestamptz) END,
            CAST(:tinch AS boolean))
    ON CONFLICT (kalit) DO NOTHING
    RETURNING id
)
SELECT id, true FROM inserted
UNION ALL
SELECT id, false FROM outbox WHERE kalit = :kalit AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: find_by_key
SELECT id FROM outbox WHERE kalit = :kalit;

-- name: enqueue_many
-- The whole list in one statement: one JSON document (json.dumps builds it in C), one insert,
-- one NOTIFY from the statement trigger. Keys already present are left as they are; the answer
-- is how many were new. The rows' chats are looked up in bloklangan here, one join for the
-- statement: a row whose chat_id no pair names comes with suhbat '' (checked), and the row
-- trigger skips its own probe for it; a row to a blocked pair, or naming no chat_id, is probed
-- and ended by the trigger as any insert is.
WITH inserted AS (
    INSERT INTO outbox (tur, kalit, payload, keyingi_urinish, navbat, partiya, ustuvorlik,
                        eng_erta, eskirish, bot, traceparent, tracestate, tartib, tinch, suhbat)
    SELECT :tur, r.kalit, r.payload, coalesce(CAST(:run_at AS timestamptz), now()), :navbat,
           CAST(:partiya AS text), :ustuvorlik, CAST(:eng_erta AS timestamptz),
           CAST(:eskirish AS timestamptz), CAST(:bot AS text), CAST(:traceparent AS text),
           CAST(:tracestate AS text),
           -- NULL: the row trigger gives each its first due time; 'infinity': no place.
           CASE WHEN CAST(:ordered AS boolean) THEN NULL ELSE CAST('infinity' AS timestamptz) END,
           CAST(:tinch AS boolean),
           CASE WHEN b.suhbat IS NULL AND r.payload ->> 'chat_id' IS NOT NULL THEN '' END
    FROM json_to_recordset(CAST(:rows AS json)) AS r(kalit text, payload jsonb)
    LEFT JOIN bloklangan b
        ON b.bot = coalesce(CAST(:bot AS text), '') AND b.suhbat = r.payload ->> 'chat_id'
    ON CONFLICT (kalit) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM inserted;

-- name: cancel
-- Claimed rows go too: a relay that waited before sending asks whether its claim still exists
-- (still_claimed). Failed rows go so that a later bulk replay cannot send a withdrawn message.
DELETE FROM outbox
WHERE kalit = ANY(CAST(:keys AS text[])) AND holat IN ('kutmoqda', 'bajarilmoqda', 'xato');

-- name: update_pending
-- Claimed and failed rows change too: a relay sends from the copy it claimed, so a message
-- being sent right now goes out as it was, and any later attempt (a retry, a replay) sends the
-- new text.
UPDATE outbox SET payload = CAST(:payload AS jsonb), yangilangan = now()
WHERE kalit = :kalit AND holat IN ('kutmoqda', 'bajarilmoqda', 'xato');

-- name: sent_keys
-- A message the outbox sent has a sent marker: a follow-up (an edit, a delete) can act on it.
SELECT kalit FROM yuborilgan WHERE kalit = ANY(CAST(:keys AS text[]));

-- name: unblock_chat
-- The chat may be sent to again by the bot (:bot '' for the rows naming none): the app learned
-- that the person unblocked it or the group added it back. Rows ended before stay ended.
DELETE FROM bloklangan WHERE bot = :bot AND suhbat = :suhbat
RETURNING suhbat;

-- name: schema_facts
-- The outbox table's comment and its columns' names, or no row when there is no such table
-- (:table, a qualified name): every outbox migration writes "outbox-telegram <revision>" into
-- that comment, which the relay and the commands check at start (outbox.schema.schema_problem)
-- whichever way the migrations ran, `outbox migrate` or the host's own Alembic history.
SELECT coalesce(obj_description(c.oid, 'pg_class'), ''),
       array(SELECT attname::text FROM pg_attribute
             WHERE attrelid = c.oid AND attnum > 0 AND NOT attisdropped)
FROM (SELECT to_regclass(CAST(:table AS text)) AS oid) c
WHERE c.oid IS NOT NULL;
