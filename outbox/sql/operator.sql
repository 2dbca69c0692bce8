-- The operator's statements (outbox list, show, replay, the web page): read messages, replay
-- failures, cancel waiting rows. Times that may hold +-infinity (written by hand) come back as
-- NULL: Python has no such datetime, and reading a row must not fail on one. Payload and tarix
-- come as text, decoded with a fallback, so that any row can be shown.

-- name: messages
-- Newest first. Every filter is optional (NULL: any). :since keeps the rows that went to xato
-- within that many seconds (a row put in xato by hand counts from its last change). :search is
-- a key or the start of one; :number, a row id or a chat id (the payload's or the marker's).
SELECT o.id AS id, o.tur AS kind, o.navbat AS queue, o.kalit AS key, o.holat AS state,
       o.urinish AS attempts, o.oxirgi_xato AS last_error, o.xato_turi AS error_code,
       o.partiya AS batch, o.ustuvorlik AS priority, o.bot AS bot, o.traceparent AS traceparent,
       o.payload::text AS payload, o.tarix::text AS history,
       CASE WHEN isfinite(o.keyingi_urinish) THEN o.keyingi_urinish END AS next_attempt_at,
       CASE WHEN isfinite(o.band_vaqti) THEN o.band_vaqti END AS claimed_at,
       CASE WHEN isfinite(o.yaratilgan) THEN o.yaratilgan END AS created_at,
       CASE WHEN isfinite(o.yangilangan) THEN o.yangilangan END AS updated_at,
       CASE WHEN o.holat = 'xato' AND isfinite(coalesce(o.xato_vaqti, o.yangilangan))
            THEN coalesce(o.xato_vaqti, o.yangilangan) END AS failed_at,
       CASE WHEN isfinite(o.eng_erta) THEN o.eng_erta END AS earliest,
       CASE WHEN isfinite(o.eskirish) THEN o.eskirish END AS expires_at,
       y.chat_id AS marker_chat_id, y.message_id AS marker_message_id,
       y.yuborilgan_vaqt AS marker_sent_at, y.message_ids AS marker_message_ids
FROM outbox o LEFT JOIN yuborilgan y ON y.kalit = o.kalit
WHERE (CAST(:id AS bigint) IS NULL OR o.id = CAST(:id AS bigint))
  AND (CAST(:holat AS text) IS NULL OR o.holat = CAST(:holat AS text))
  AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND (CAST(:ustuvorlik AS smallint) IS NULL OR o.ustuvorlik = CAST(:ustuvorlik AS smallint))
  AND (CAST(:bot AS text) IS NULL OR o.bot = CAST(:bot AS text))
  AND (CAST(:since AS float8) IS NULL
       OR (o.holat = 'xato' AND coalesce(o.xato_vaqti, o.yangilangan)
                                >= now() - make_interval(secs => CAST(:since AS float8))))
  AND (CAST(:search AS text) IS NULL
       OR o.kalit = CAST(:search AS text) OR starts_with(o.kalit, CAST(:search AS text))
       OR (CAST(:number AS bigint) IS NOT NULL
           AND (o.id = CAST(:number AS bigint)
                OR o.payload ->> 'chat_id' = CAST(:number AS text)
                OR y.chat_id = CAST(:number AS bigint))))
ORDER BY o.id DESC
LIMIT :limit;

-- name: lock_for_replay
-- Replay happens in one transaction: lock the rows, decide, then change them. The lock keeps
-- the state the decision saw until the change commits (a second operator replaying the same
-- rows waits here, then finds them pending and is refused); id order avoids deadlocks between
-- two bulk replays. The rows are the given :ids, or with :ids NULL every xato row the filters
-- match. A follow-up's original (payload.message_key) is 'sent' when its marker exists, else
-- its row's state, NULL when no message has the key. A row whose chat is gone for its bot
-- (bloklangan) says which.
SELECT o.id AS id, o.holat AS state, o.kalit AS key,
       o.holat = 'bajarildi' AND o.xato_turi IS NOT DISTINCT FROM 'superseded' AS superseded,
       y.chat_id AS marker_chat_id, y.message_id AS marker_message_id,
       y.yuborilgan_vaqt AS marker_sent_at, y.message_ids AS marker_message_ids,
       o.payload ->> 'message_key' AS original,
       CASE WHEN o.payload ? 'message_key' THEN coalesce(
           (SELECT 'sent' FROM yuborilgan w WHERE w.kalit = o.payload ->> 'message_key'),
           (SELECT w.holat FROM outbox w WHERE w.kalit = o.payload ->> 'message_key'))
       END AS original_state,
       -- Its chat, when the chat is gone for its bot (bloklangan): refused until unblocked.
       b.suhbat AS blocked_chat, o.bot AS bot
FROM outbox o LEFT JOIN yuborilgan y ON y.kalit = o.kalit
     LEFT JOIN bloklangan b ON b.bot = coalesce(o.bot, '') AND b.suhbat = o.suhbat
WHERE CASE WHEN CAST(:ids AS bigint[]) IS NOT NULL THEN o.id = ANY(CAST(:ids AS bigint[]))
      ELSE o.holat = 'xato'
           AND (CAST(:tur AS text) IS NULL OR o.tur = CAST(:tur AS text))
           AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
           AND (CAST(:ustuvorlik AS smallint) IS NULL
                OR o.ustuvorlik = CAST(:ustuvorlik AS smallint))
           AND (CAST(:bot AS text) IS NULL OR o.bot = CAST(:bot AS text))
           AND (CAST(:since AS float8) IS NULL
                OR coalesce(o.xato_vaqti, o.yangilangan)
                   >= now() - make_interval(secs => CAST(:since AS float8)))
      END
ORDER BY o.id
FOR UPDATE OF o;

-- name: replay
-- The failure stays in tarix, with an entry for the replay itself (and, when forced, the
-- marker it removed). A forced replay deletes the key's marker in the same transaction: a
-- relay completes a row whose key has a marker without sending it. The NOTIFY reaches the
-- listening relays at commit, so the rows go out at once rather than at the next poll.
WITH replayed AS (
    UPDATE outbox o
    SET holat = 'kutmoqda',
        urinish = 0,
        keyingi_urinish = now(),
        -- Sent now: its window is over, and an expiry that has passed is lifted (the operator
        -- asked for it; one still ahead stays).
        eng_erta = NULL,
        eskirish = CASE WHEN o.eskirish > now() THEN o.eskirish END,
        band_vaqti = NULL,
        egasi = NULL,
        yakka = false,
        oxirgi_xato = NULL,
        xato_turi = NULL,
        xato_vaqti = NULL,
        tarix = o.tarix || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
            'vaqt', now(),
            'urinish', o.urinish,
            'hodisa', CASE WHEN :force THEN 'replay --force' ELSE 'replay' END,
            'oxirgi_xato', o.oxirgi_xato,
            'xato_turi', o.xato_turi,
            'yuborilgan', (SELECT to_jsonb(y) - 'kalit' FROM yuborilgan y
                           WHERE :force AND y.kalit = o.kalit)))),
        yangilangan = now()
    WHERE o.id = ANY(CAST(:ids AS bigint[])) AND o.holat = 'xato'
    RETURNING o.id, o.kalit
),
forgotten AS (
    DELETE FROM yuborilgan y USING replayed r WHERE :force AND y.kalit = r.kalit
)
SELECT r.id AS id, pg_notify(:channel, '') AS woken FROM replayed r;

-- name: cancel_waiting
-- An operator's cancel keeps the row, unlike the app's (which deletes it): it moves to xato
-- with the reason in oxirgi_xato and tarix, so the page still shows what was withdrawn and
-- when, and a replay undoes it. Only waiting rows (one :id, or a whole :partiya): a claimed
-- one may be on its way to Telegram.
WITH cancelled AS (
    UPDATE outbox
    SET holat = 'xato',
        oxirgi_xato = 'cancelled by operator',
        xato_turi = 'cancelled',
        xato_vaqti = now(),
        tarix = tarix || jsonb_build_array(jsonb_build_object(
            'vaqt', now(), 'urinish', urinish, 'hodisa', 'cancelled by operator',
            'xato_turi', 'cancelled')),
        yangilangan = now()
    WHERE holat = 'kutmoqda'
      AND (id = CAST(:id AS bigint) OR partiya = CAST(:partiya AS text))
    RETURNING 1
)
SELECT count(*) AS cancelled FROM cancelled;

-- name: count_failed
SELECT count(*) AS failed FROM outbox WHERE holat = 'xato';

-- name: failed_filters
-- The kinds and priorities among failed rows, for the page's filters.
SELECT DISTINCT tur AS kind, ustuvorlik AS priority FROM outbox WHERE holat = 'xato';

-- name: finished_per_minute
-- Rows that reached bajarildi and xato, per minute ago, read from the rows as they stand: a
-- replayed failure leaves the failed count, and retention the delivered one. Done rows through
-- their partial index on yangilangan, failed ones through theirs.
SELECT floor(extract(epoch FROM now() - f.at) / 60)::int AS ago, f.holat AS state,
       count(*) AS finished
FROM (SELECT o.holat,
             CASE WHEN o.holat = 'bajarildi' THEN o.yangilangan
                  ELSE coalesce(o.xato_vaqti, o.yangilangan) END AS at
      FROM outbox o
      WHERE (o.holat = 'bajarildi'
             AND o.yangilangan > now() - make_interval(mins => CAST(:minutes AS int)))
         OR (o.holat = 'xato' AND coalesce(o.xato_vaqti, o.yangilangan)
                                  > now() - make_interval(mins => CAST(:minutes AS int)))) f
GROUP BY 1, 2;

-- name: message_holds
-- What holds a pending row (outbox show): one row per reason, in the claim's terms. 'earlier':
-- the first message of its chat, bot and priority still to be sent before it (as a relay with
-- one token sees a row naming no bot: its queue's rows naming none and those naming a bot);
-- 'original': a follow-up's original still to be sent; 'pause': an operator's pause of its
-- queue, bot, kind or batch; 'flood': its bot's flood pause (Telegram's 429), for a row naming
-- no bot the bots of the live relays serving its queue; 'chat': its chat's next free moment;
-- 'window': its window (may go from :opens, due at :at); 'quiet': its chat's quiet hours (until
-- :at; the detail is their zone); 'due': its time (a schedule or a retry's wait).
WITH m AS (SELECT * FROM outbox WHERE id = :id AND holat = 'kutmoqda'),
bots AS (
    SELECT m.bot FROM m WHERE m.bot IS NOT NULL
    UNION
    SELECT b.bot FROM m, relaylar r CROSS JOIN LATERAL unnest(r.botlar) AS b(bot)
    WHERE m.bot IS NULL AND m.navbat = ANY (r.navbatlar)
      AND r.oxirgi_signal > now() - make_interval(secs => r.signal_oraligi * :missed_beats)
)
SELECT 'earlier' AS reason, e.id AS row_id, e.holat AS detail,
       CASE WHEN isfinite(e.keyingi_urinish) THEN e.keyingi_urinish END AS at,
       NULL::timestamptz AS opens
FROM m CROSS JOIN LATERAL (
    SELECT e.id, e.holat, e.keyingi_urinish FROM outbox e
    WHERE coalesce(e.bot, ':' || e.navbat) IN (coalesce(m.bot, ':' || m.navbat), ':' || m.navbat)
      AND e.suhbat = m.suhbat AND e.ustuvorlik = m.ustuvorlik
      AND e.holat IN ('kutmoqda', 'bajarilmoqda')
      AND e.tartib IS NOT NULL AND e.suhbat IS NOT NULL
      AND (e.tartib, e.id) < (m.tartib, m.id)
      AND e.tinch = m.tinch AND (e.tinch_oldin IS NULL OR e.keyingi_urinish <= now())
    ORDER BY e.tartib, e.id LIMIT 1) e
WHERE m.tartib IS NOT NULL AND m.suhbat IS NOT NULL
UNION ALL
SELECT 'original', w.id, w.holat || ' ' || w.kalit,
       CASE WHEN isfinite(w.keyingi_urinish) THEN w.keyingi_urinish END, NULL
FROM m JOIN outbox w ON w.kalit = m.payload ->> 'message_key'
WHERE w.holat IN ('kutmoqda', 'bajarilmoqda')
UNION ALL
SELECT 'pause', NULL, z.doira || ' ' || z.qiymat, NULL, NULL
FROM m JOIN pauza z ON (z.doira = 'navbat' AND z.qiymat = m.navbat)
                    OR (z.doira = 'bot' AND z.qiymat = m.bot)
                    OR (z.doira = 'tur' AND z.qiymat = m.tur)
                    OR (z.doira = 'partiya' AND z.qiymat = m.partiya)
UNION ALL
SELECT 'flood', NULL, h.bot, h.pauza_tugashi, NULL
FROM bot_holati h WHERE h.bot IN (SELECT bot FROM bots) AND h.pauza_tugashi > now()
   AND isfinite(h.pauza_tugashi)
UNION ALL
SELECT 'chat', NULL, c.chat, c.keyingi, NULL
FROM m JOIN chat_navbati c ON c.chat = coalesce(m.suhbat, m.payload ->> 'chat_id')
WHERE c.bot IN (SELECT bot FROM bots) AND c.keyingi > now() AND isfinite(c.keyingi)
UNION ALL
SELECT 'window', NULL, NULL, m.keyingi_urinish, m.eng_erta
FROM m WHERE m.eng_erta IS NOT NULL AND m.keyingi_urinish > now()
  AND isfinite(m.keyingi_urinish) AND isfinite(m.eng_erta)
UNION ALL
SELECT 'quiet', NULL, coalesce(t.tz, '-'),
       CASE WHEN isfinite(m.keyingi_urinish) THEN m.keyingi_urinish END, NULL
FROM m LEFT JOIN tinch_soatlar t ON t.bot = coalesce(m.bot, '') AND t.chat = m.suhbat
WHERE m.tinch_oldin IS NOT NULL AND m.keyingi_urinish > now()
UNION ALL
SELECT 'due', NULL, NULL, CASE WHEN isfinite(m.keyingi_urinish) THEN m.keyingi_urinish END, NULL
FROM m WHERE m.eng_erta IS NULL AND m.keyingi_urinish > now() AND m.tinch_oldin IS NULL

-- name: blocked_chats
-- The chats gone for a bot (bloklangan), newest first; :bot NULL: of every bot ('' is the rows
-- naming none).
SELECT b.bot AS bot, b.suhbat AS chat, b.vaqt AS since, b.xato AS said, b.manba AS learned_from
FROM bloklangan b
WHERE CAST(:bot AS text) IS NULL OR b.bot = CAST(:bot AS text)
ORDER BY b.vaqt DESC, b.bot, b.suhbat
LIMIT :limit;
