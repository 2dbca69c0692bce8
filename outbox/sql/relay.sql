-- The relay's hot path after the claim: its outcomes with their fencing, the claim check, the
-- bot's state row and pause, and a drain's backlog.

-- name: ensure_bot
-- The shared state row of a bot: a claim finds the bot's budget there.
INSERT INTO bot_holati (bot) VALUES (:bot) ON CONFLICT (bot) DO NOTHING;

-- name: record_outcomes
-- One statement records a whole batch (a JSON document): the sent markers and the state changes
-- commit together, and each state change is fenced on the claim (holat, urinish and band_vaqti)
-- so that a relay which lost its claim cannot overwrite the new owner's result. Markers are
-- written even then: the message did reach Telegram, and the marker stops the new owner from
-- sending it again. Every value written comes from the retry policy (outbox.retry): urinish
-- (an attempt not counted is one less), the delay (NULL: the row keeps its time, so it keeps
-- its place in line). A chat gone for the bot (blocked, kicked) is recorded in the same
-- statement (bloklangan, outbox_0017).
WITH r AS (
    -- The claim's band_vaqti comes as whole microseconds since the epoch: exact, and a
    -- number is cheaper to write in Python than a time.
    SELECT *, timestamptz 'epoch' + band_us * interval '1 microsecond' AS band_vaqti
    FROM json_to_recordset(CAST(:batch AS json))
        AS r(id bigint, urinish int, attempts int, holat text, delay float8, xato text,
             xato_turi text, kalit text, chat_id bigint, message_id bigint, new_chat_id bigint,
             band_us bigint, message_ids bigint[], gone boolean)
    -- The batch's own length cuts nothing; it tells the planner how few rows come.
    LIMIT :count
),
markers AS (
    INSERT INTO yuborilgan (kalit, chat_id, message_id, message_ids)
    SELECT kalit, chat_id, message_id, message_ids FROM r WHERE message_id IS NOT NULL
    ON CONFLICT (kalit) DO NOTHING
),
gone AS (
    -- A 403 that means the chat is gone for the bot (outbox.classify): the pair is recorded,
    -- fenced as the state change is, and its trigger ends the pair's waiting rows.
    INSERT INTO bloklangan (bot, suhbat, xato, manba)
    SELECT coalesce(o.bot, ''), coalesce(r.new_chat_id::text, o.suhbat),
           regexp_replace(coalesce(r.xato, ''), '^Telegram refused \(403\): ', ''), o.id
    FROM r JOIN outbox o ON o.id = r.id
    WHERE r.gone AND o.holat = (SELECT 'bajarilmoqda') AND o.urinish = r.urinish
      AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti)
      AND coalesce(r.new_chat_id::text, o.suhbat) IS NOT NULL
    ON CONFLICT (bot, suhbat) DO NOTHING
)
UPDATE outbox o
SET holat = r.holat,
    urinish = r.attempts,
    keyingi_urinish = CASE WHEN r.holat <> 'kutmoqda' OR r.delay IS NULL THEN o.keyingi_urinish
                           ELSE now() + make_interval(secs => r.delay) END,
    band_vaqti = NULL,
    egasi = NULL,
    yakka = false,
    oxirgi_xato = coalesce(r.xato, o.oxirgi_xato),
    xato_turi = CASE WHEN r.xato IS NULL THEN o.xato_turi ELSE r.xato_turi END,
    xato_vaqti = CASE WHEN r.holat = 'xato' THEN now() END,
    tarix = CASE WHEN r.xato IS NULL THEN o.tarix
                 ELSE o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                     'vaqt', now(), 'urinish', o.urinish, 'xato', r.xato,
                     'xato_turi', r.xato_turi))) END,
    yangilangan = now()
FROM r
-- The state is compared with a subquery's value, not a literal: with a literal the planner may
-- answer the join from the index of claimed rows, full of dead entries between vacuums; this
-- way each outcome is one primary-key probe.
WHERE o.id = r.id AND o.holat = (SELECT 'bajarilmoqda') AND o.urinish = r.urinish
  AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti);

-- name: record_outcomes_moved
-- record_outcomes for a batch with a group that became a supergroup: the payload gets the new
-- chat id in the same write. Apart because an update that sets payload runs its checks
-- (outbox_0013's trigger) on every row of the batch. Not a payload update of its own before
-- record_outcomes: a host's trigger sees the chat move only in the write that ends the claim
-- (vazifalar's vazifalar_relay_outcome follows the group that way).
WITH r AS (
    -- The claim's band_vaqti comes as whole microseconds since the epoch: exact, and a
    -- number is cheaper to write in Python than a time.
    SELECT *, timestamptz 'epoch' + band_us * interval '1 microsecond' AS band_vaqti
    FROM json_to_recordset(CAST(:batch AS json))
        AS r(id bigint, urinish int, attempts int, holat text, delay float8, xato text,
             xato_turi text, kalit text, chat_id bigint, message_id bigint, new_chat_id bigint,
             band_us bigint, message_ids bigint[], gone boolean)
    LIMIT :count
),
markers AS (
    INSERT INTO yuborilgan (kalit, chat_id, message_id, message_ids)
    SELECT kalit, chat_id, message_id, message_ids FROM r WHERE message_id IS NOT NULL
    ON CONFLICT (kalit) DO NOTHING
),
gone AS (
    -- A 403 that means the chat is gone for the bot (outbox.classify): the pair is recorded,
    -- fenced as the state change is, and its trigger ends the pair's waiting rows.
    INSERT INTO bloklangan (bot, suhbat, xato, manba)
    SELECT coalesce(o.bot, ''), coalesce(r.new_chat_id::text, o.suhbat),
           regexp_replace(coalesce(r.xato, ''), '^Telegram refused \(403\): ', ''), o.id
    FROM r JOIN outbox o ON o.id = r.id
    WHERE r.gone AND o.holat = (SELECT 'bajarilmoqda') AND o.urinish = r.urinish
      AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti)
      AND coalesce(r.new_chat_id::text, o.suhbat) IS NOT NULL
    ON CONFLICT (bot, suhbat) DO NOTHING
)
UPDATE outbox o
SET holat = r.holat,
    urinish = r.attempts,
    keyingi_urinish = CASE WHEN r.holat <> 'kutmoqda' OR r.delay IS NULL THEN o.keyingi_urinish
                           ELSE now() + make_interval(secs => r.delay) END,
    band_vaqti = NULL,
    egasi = NULL,
    yakka = false,
    oxirgi_xato = coalesce(r.xato, o.oxirgi_xato),
    xato_turi = CASE WHEN r.xato IS NULL THEN o.xato_turi ELSE r.xato_turi END,
    xato_vaqti = CASE WHEN r.holat = 'xato' THEN now() END,
    tarix = CASE WHEN r.xato IS NULL THEN o.tarix
                 ELSE o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                     'vaqt', now(), 'urinish', o.urinish, 'xato', r.xato,
                     'xato_turi', r.xato_turi))) END,
    payload = CASE WHEN r.new_chat_id IS NULL THEN o.payload
                   ELSE jsonb_set(o.payload, ARRAY['chat_id'], to_jsonb(r.new_chat_id)) END,
    yangilangan = now()
FROM r
WHERE o.id = r.id AND o.holat = (SELECT 'bajarilmoqda') AND o.urinish = r.urinish
  AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti);

-- name: still_claimed
-- Is this claim still the relay's? Not once the app withdrew the row (cancel).
SELECT true FROM outbox
WHERE id = :id AND holat = 'bajarilmoqda' AND urinish = :urinish AND band_vaqti = :at;

-- name: release_unheard_claims
-- Rows this process claimed in a claim whose answer never came back (the link went silent
-- after its commit): nobody here sends them, so they go back to the queue now, keeping their
-- place and their attempt not counted, rather than after the lease. :held are the rows the
-- process does hold: their outcomes are its own to write.
UPDATE outbox
SET holat = 'kutmoqda', urinish = greatest(urinish - 1, 0), band_vaqti = NULL, egasi = NULL,
    yangilangan = now()
WHERE egasi = :holder AND holat = 'bajarilmoqda'
  AND NOT (id = ANY (CAST(:held AS bigint[])))
RETURNING id;

-- name: announce_pause
-- Pause a bot for every relay: its state row, which only the outbox's own code writes. The
-- NOTIFY only wakes the other relays to read it (a forged NOTIFY pauses nothing).
WITH paused AS (
    INSERT INTO bot_holati AS h (bot, pauza_tugashi)
    VALUES (:bot, now() + make_interval(secs => :seconds))
    ON CONFLICT (bot) DO UPDATE
    SET pauza_tugashi = greatest(h.pauza_tugashi, excluded.pauza_tugashi)
    RETURNING bot
)
SELECT pg_notify(:channel, bot) FROM paused;

-- name: backlog
-- What a drain still has to do: due rows and rows being sent (its progress line).
SELECT (SELECT count(*) FROM outbox WHERE holat = 'kutmoqda' AND keyingi_urinish <= now())
     + (SELECT count(*) FROM outbox WHERE holat = 'bajarilmoqda');
