-- The claim, in a few statements run in one transaction by outbox/queries/claim.py.
--
-- claim_rows locks the bot's budget row (every relay of the bot claims in turn) and the due
-- rows it may take, and returns them with what the slot arithmetic needs; Python then orders
-- them, gives each its send slot and keeps one message per chat (plan_claim); claim_take
-- books those slots and chats and marks the rows claimed. Rows locked by claim_rows but not
-- taken are let go at commit.
--
-- Parameters: :bot (the bot's id, the key of bot_holati), :unnamed (the lane also takes rows
-- that name no bot), :queue, :holder (this process), :limit (rows asked for), :reserve (rows
-- the starvation bound may add), :rate (the bot's messages a second, 0: no limit), :horizon
-- (seconds of slots a claim may book ahead), :lookahead and :plan_rows (the windows' plan),
-- :chat_on (chat spacing on), :idle_ms (how long, in milliseconds, the claim's transaction may sit
-- idle before the server ends it), :lanes (the rows taken, by their allow_paid_broadcast:
-- {true,false} every row, no paid lane; {false} the free lane's; {true} the paid lane's) and
-- :paid (the paid lane: its clock, bot_holati.pullik_slot, and its stop); :mark is what
-- makes a row paid, '{"allow_paid_broadcast": true}' (a payload that contains it).

-- name: claim_rows
WITH RECURSIVE
budget AS (
    -- The clock, not now(): a claim that waited for another's lock counts from when it got it.
    -- A lane's slot clock (c) a day ahead is no claim's booking (they book a horizon, at most a
    -- minute, ahead) but plain SQL's, 'infinity' say: it counts as booked up to the horizon.
    SELECT CASE WHEN c > clock_timestamp() + interval '1 day'
                THEN clock_timestamp() + :horizon * interval '1s'
                ELSE greatest(clock_timestamp(), c) END AS base, clock_timestamp() AS t0,
           -- A claim left idle mid-transaction (its relay's link went silent) is ended by the
           -- server, and with it this lock, which the relay's next claim waits for.
           set_config('idle_in_transaction_session_timeout', :idle_ms, true) AS idle_limit,
           -- The paid lane stops alone (Stars balance, audience): the free lane goes on.
           greatest(pauza_tugashi, CASE WHEN :paid THEN pullik_pauza_tugashi END) > now()
           OR EXISTS (SELECT 1 FROM pauza
                      WHERE (doira = 'navbat' AND qiymat = :queue)
                         OR (doira = 'bot' AND qiymat = :bot)) AS paused
    FROM (SELECT *, CASE WHEN :paid THEN pullik_slot ELSE keyingi_slot END AS c
          FROM bot_holati WHERE bot = :bot FOR UPDATE) h
),
room AS (
    -- How many rows may be claimed: none while paused; with a rate, the slots free within
    -- the horizon (what a relay that dies can hold back).
    SELECT CASE WHEN coalesce((SELECT paused FROM budget), false) THEN 0
                WHEN :rate <= 0 THEN :limit
                ELSE least(:limit, greatest(0, 1 + floor((:horizon
                     - extract(epoch FROM (SELECT base - t0 FROM budget))) * :rate)::int))
           END AS n
),
held AS (
    -- The pauses of kinds and batches (a kind's value is its tur, a batch's its partiya), read
    -- once (mostly none: each row's probe of it is then a scan of nothing).
    SELECT * FROM pauza WHERE doira IN ('tur', 'partiya')
),
keys(k) AS (
    -- The lane's rows, as outbox_claim_idx keys them (bot:queue): those naming its bot, and
    -- those naming none if it takes them.
    SELECT :bot || ':' || :queue UNION ALL SELECT ':' || :queue WHERE :unnamed
),
lane_bots AS (
    -- The lane's bot as outbox_order_idx keys it: its id, and ':queue' for the rows naming
    -- none if it takes them (they are its rows).
    SELECT ARRAY[:bot, CASE WHEN :unnamed THEN ':' || :queue END] AS ks
),
plan AS (
    -- Delivery windows: with the windowed rows in deadline order, the k-th must start by
    -- deadline_k - k / rate. Rows up to the last one past that moment may go early.
    SELECT greatest(now(), max(d) FILTER (
               WHERE d - make_interval(secs => k / :rate) <= now())) AS until
    FROM (SELECT w.keyingi_urinish AS d,
                 row_number() OVER (ORDER BY w.keyingi_urinish, w.id) AS k
          FROM keys CROSS JOIN LATERAL (
              SELECT o.id, o.keyingi_urinish FROM outbox o
              WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k AND o.holat = 'kutmoqda'
                AND o.eng_erta IS NOT NULL AND o.keyingi_urinish > now()
                AND o.keyingi_urinish <= now() + make_interval(secs => :lookahead)
              ORDER BY o.keyingi_urinish, o.id
              LIMIT :plan_rows) w
          ORDER BY w.keyingi_urinish, w.id
          LIMIT :plan_rows) w
    WHERE :rate > 0
),
clear AS (
    -- A due suspect of this lane, or one this process holds, goes alone (claim_alone).
    SELECT NOT EXISTS (SELECT 1 FROM outbox s
                       WHERE s.yakka
                         AND ((s.holat = 'kutmoqda' AND s.keyingi_urinish <= now()
                               AND s.navbat = :queue AND (s.payload @> :mark) = ANY (:lanes)
                               AND (s.bot = :bot OR (s.bot IS NULL AND :unnamed))
                               -- A paused suspect does not hold back the queue.
                               AND NOT EXISTS (SELECT 1 FROM held z WHERE z.qiymat =
                                   CASE z.doira WHEN 'tur' THEN s.tur ELSE s.partiya END))
                              OR (s.holat = 'bajarilmoqda' AND s.egasi = :holder))) AS ok
),
alone AS (
    -- Not held by its chat's order: it was claimable once, and a suspect that waited for a row
    -- the walk cannot take while it waits would stop the lane.
    SELECT o.id, o.ustuvorlik, o.keyingi_urinish
    FROM outbox o
    WHERE o.yakka AND o.holat = 'kutmoqda' AND o.keyingi_urinish <= now()
      AND o.navbat = :queue AND (o.bot = :bot OR (o.bot IS NULL AND :unnamed))
      AND (o.payload @> :mark) = ANY (:lanes) AND NOT (SELECT ok FROM clear)
      AND NOT EXISTS (SELECT 1 FROM outbox WHERE egasi = :holder AND holat = 'bajarilmoqda')
      AND NOT EXISTS (SELECT 1 FROM held z WHERE z.qiymat =
                          CASE z.doira WHEN 'tur' THEN o.tur ELSE o.partiya END)
    ORDER BY o.keyingi_urinish, o.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
present(k, v) AS (
    -- The priorities with pending rows, highest first: one probe of outbox_claim_idx each.
    SELECT k, (SELECT o.ustuvorlik FROM outbox o
               WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k
                 AND o.holat = 'kutmoqda'
               ORDER BY o.ustuvorlik DESC LIMIT 1)
    FROM keys
    UNION ALL
    SELECT k, (SELECT o.ustuvorlik FROM outbox o
               WHERE coalesce(o.bot, '') || ':' || o.navbat = p.k
                 AND o.holat = 'kutmoqda' AND o.ustuvorlik < p.v
               ORDER BY o.ustuvorlik DESC LIMIT 1)
    FROM present p WHERE p.v IS NOT NULL
),
walk AS (
    -- Priority first, then due time, then id: one walk of the index for each priority
    -- present, highest first, read only as far as the room (a LIMIT stops the walks).
    SELECT c.* FROM (SELECT DISTINCT v FROM present WHERE v IS NOT NULL ORDER BY v DESC) p
    CROSS JOIN LATERAL (
        SELECT r.* FROM keys CROSS JOIN LATERAL (
            SELECT o.id, o.ustuvorlik, o.keyingi_urinish
            FROM outbox o
            WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k
              AND o.holat = 'kutmoqda' AND o.ustuvorlik = p.v
              AND o.keyingi_urinish <= (SELECT until FROM plan)
              AND coalesce(o.eng_erta, o.keyingi_urinish) <= now()
              -- The lane's rows: with a paid lane, each clock books its own.
              AND NOT o.yakka AND (SELECT ok FROM clear) AND (o.payload @> :mark) = ANY (:lanes)
              AND NOT EXISTS (SELECT 1 FROM held z WHERE z.qiymat =
                                  CASE z.doira WHEN 'tur' THEN o.tur ELSE o.partiya END)
              -- A follow-up waits while its original is still to be sent.
              AND (NOT o.payload ? 'message_key' OR NOT EXISTS (
                       SELECT 1 FROM outbox m WHERE m.kalit = o.payload ->> 'message_key'
                                                AND m.holat IN ('kutmoqda', 'bajarilmoqda')))
              -- A chat's message waits while an earlier one of its bot and priority is still to
              -- be sent: one probe of outbox_order_idx.
              AND (o.tartib IS NULL OR o.suhbat IS NULL OR NOT EXISTS (
                       SELECT 1 FROM outbox e
                       WHERE coalesce(e.bot, ':' || e.navbat) = ANY ((SELECT ks FROM lane_bots)::text[])
                         AND e.suhbat = o.suhbat AND e.ustuvorlik = o.ustuvorlik
                         AND e.holat IN ('kutmoqda', 'bajarilmoqda')
                         AND e.tartib IS NOT NULL AND e.suhbat IS NOT NULL
                         AND (e.tartib, e.id) < (o.tartib, o.id)
                         -- Not across quiet hours (outbox_0018): a row that asks for them
                         -- neither holds nor waits for one that does not, nor for one they hold.
                         AND e.tinch = o.tinch AND (e.tinch_oldin IS NULL OR e.keyingi_urinish <= now())))
              -- A chat that may not receive yet never fills a claim (head-of-line blocking).
              AND (NOT :chat_on OR coalesce(
                       (SELECT cn.keyingi FROM chat_navbati cn
                        WHERE cn.bot = :bot
                          AND cn.chat = coalesce(o.payload ->> 'chat_id', (
                                  SELECT y.chat_id::text FROM yuborilgan y
                                  WHERE y.kalit = o.payload ->> 'message_key'))),
                       '-infinity') <= now())
            ORDER BY o.keyingi_urinish, o.id
            LIMIT :limit
            FOR UPDATE OF o SKIP LOCKED
        ) r
        ORDER BY r.keyingi_urinish, r.id
        LIMIT :limit
    ) c
    LIMIT (SELECT n FROM room)
)
-- Times as seconds since the epoch: a row written by hand may hold an infinity.
SELECT room.n AS room, extract(epoch FROM (SELECT base FROM budget))::float8 AS base,
       extract(epoch FROM (SELECT until FROM plan))::float8 AS until,
       (SELECT array_agg(DISTINCT v) FROM present WHERE v IS NOT NULL)::text AS present, f.part,
       o.id, o.ustuvorlik, extract(epoch FROM o.keyingi_urinish)::float8 AS due,
       o.eskirish <= now() AS expired,
       coalesce(o.payload ->> 'chat_id', (SELECT y.chat_id::text FROM yuborilgan y
                                          WHERE y.kalit = o.payload ->> 'message_key')) AS chat,
       -- An album counts as its items (Telegram counts each); anything else as one.
       CASE WHEN jsonb_typeof(o.payload -> 'media') = 'array'
                 AND lower(o.payload ->> 'method') = 'sendmediagroup'
            THEN least(greatest(jsonb_array_length(o.payload -> 'media'), 1), 10)
            ELSE 1 END AS weight, o.tinch AS quiet
FROM room
LEFT JOIN (SELECT 'alone' AS part, id FROM alone UNION ALL SELECT 'walk', id FROM walk) f ON true
LEFT JOIN outbox o ON o.id = f.id

-- name: claim_oldest
-- The starvation bound, asked only when claim_rows filled the claim and a lower priority
-- waits: the oldest claimable rows of the priorities it reached (:priorities) compete for the
-- reserved slots. :until is claim_rows' windows moment; :taken, the rows it holds already.
WITH keys(k) AS (
    SELECT :bot || ':' || :queue UNION ALL SELECT ':' || :queue WHERE :unnamed
),
lane_bots AS (
    SELECT ARRAY[:bot, CASE WHEN :unnamed THEN ':' || :queue END] AS ks
),
paused AS (
    SELECT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya')) AS some_paused
),
oldest AS (
    SELECT c.id FROM unnest(:priorities::smallint[]) AS p(v)
    CROSS JOIN keys
    CROSS JOIN LATERAL (
        SELECT o.id, o.keyingi_urinish
        FROM outbox o
        WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k
          AND o.holat = 'kutmoqda' AND o.ustuvorlik = p.v AND o.id <> ALL(:taken::bigint[])
          AND o.keyingi_urinish <= to_timestamp(:until)
          AND coalesce(o.eng_erta, o.keyingi_urinish) <= now()
          AND NOT o.yakka
          AND (o.payload @> :mark) = ANY (:lanes)
          AND (NOT (SELECT some_paused FROM paused) OR NOT EXISTS (
                   SELECT 1 FROM pauza z WHERE (z.doira = 'tur' AND z.qiymat = o.tur)
                                            OR (z.doira = 'partiya' AND z.qiymat = o.partiya)))
          -- A follow-up waits while its original is still to be sent.
          AND (NOT o.payload ? 'message_key' OR NOT EXISTS (
                   SELECT 1 FROM outbox m WHERE m.kalit = o.payload ->> 'message_key'
                                            AND m.holat IN ('kutmoqda', 'bajarilmoqda')))
          -- A chat's message waits for the earlier ones of its bot and priority.
          AND (o.tartib IS NULL OR o.suhbat IS NULL OR NOT EXISTS (
                   SELECT 1 FROM outbox e
                   WHERE coalesce(e.bot, ':' || e.navbat) = ANY ((SELECT ks FROM lane_bots)::text[])
                     AND e.suhbat = o.suhbat AND e.ustuvorlik = o.ustuvorlik
                     AND e.holat IN ('kutmoqda', 'bajarilmoqda')
                     AND e.tartib IS NOT NULL AND e.suhbat IS NOT NULL
                     AND (e.tartib, e.id) < (o.tartib, o.id)
                     AND e.tinch = o.tinch
                     AND (e.tinch_oldin IS NULL OR e.keyingi_urinish <= now())))
          -- A chat that may not receive yet never fills a claim (head-of-line blocking).
          AND (NOT :chat_on OR coalesce(
                   (SELECT cn.keyingi FROM chat_navbati cn
                    WHERE cn.bot = :bot
                      AND cn.chat = coalesce(o.payload ->> 'chat_id', (
                              SELECT y.chat_id::text FROM yuborilgan y
                              WHERE y.kalit = o.payload ->> 'message_key'))),
                   '-infinity') <= now())
        ORDER BY o.keyingi_urinish, o.id
        LIMIT :reserve
        FOR UPDATE OF o SKIP LOCKED
    ) c
    ORDER BY c.keyingi_urinish, c.id
    LIMIT :reserve
)
SELECT 'oldest' AS part, o.id, o.ustuvorlik, extract(epoch FROM o.keyingi_urinish)::float8,
       o.eskirish <= now(),
       coalesce(o.payload ->> 'chat_id', (SELECT y.chat_id::text FROM yuborilgan y
                                          WHERE y.kalit = o.payload ->> 'message_key')),
       CASE WHEN jsonb_typeof(o.payload -> 'media') = 'array'
                 AND lower(o.payload ->> 'method') = 'sendmediagroup'
            THEN least(greatest(jsonb_array_length(o.payload -> 'media'), 1), 10)
            ELSE 1 END, o.tinch
FROM oldest JOIN outbox o USING (id)

-- name: claim_quiet
-- The quiet hours of the locked rows that ask for them (:ids), as 'start end zone': asked only
-- when claim_rows or claim_oldest returned such a row, one key probe each. A row of NULLs says
-- that no chat has quiet hours at all (the claimer then asks again only a while later).
SELECT o.id, t.boshi || ' ' || t.oxiri || ' ' || t.tz
FROM outbox o JOIN tinch_soatlar t ON t.bot = coalesce(o.bot, '') AND t.chat = o.suhbat
WHERE o.id = ANY(:ids::bigint[])
UNION ALL
SELECT NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM tinch_soatlar)

-- name: claim_take
WITH chosen AS (
    -- plan_claim's bookings: [[id, chat, send_at, chat_free], ...], times as microseconds
    -- since the epoch (whole numbers: Python writes them in a third of a float's time), read
    -- back as the outcome write reads band_us.
    SELECT (b ->> 0)::bigint AS id, b ->> 1 AS chat,
           timestamptz 'epoch' + (b ->> 2)::bigint * interval '1 microsecond' AS send_at,
           timestamptz 'epoch' + (b ->> 3)::bigint * interval '1 microsecond' AS chat_free
    FROM jsonb_array_elements(:bookings::jsonb) AS b
),
chats AS (
    -- Each chat's next free moment, booked only if the chat is free by this row's slot
    -- (checked against the newest version of the chat's row: another relay's claim counts).
    INSERT INTO chat_navbati AS c (bot, chat, keyingi)
    SELECT :bot, chat, chat_free FROM chosen WHERE chat_free IS NOT NULL
    ON CONFLICT (bot, chat) DO UPDATE SET keyingi = excluded.keyingi
    WHERE c.keyingi <= (SELECT h.send_at FROM chosen h
                        WHERE h.chat = excluded.chat AND h.chat_free IS NOT NULL)
    RETURNING chat
),
taken AS (
    SELECT * FROM chosen WHERE chat_free IS NULL OR chat IN (SELECT chat FROM chats)
),
bump AS (
    -- The lane's clock: the paid one for the paid lane, the free one otherwise.
    UPDATE bot_holati
    SET keyingi_slot = CASE WHEN :paid THEN keyingi_slot ELSE to_timestamp(:next_slot) END,
        pullik_slot = CASE WHEN :paid THEN to_timestamp(:next_slot) ELSE pullik_slot END
    WHERE bot = :bot AND :next_slot::float8 IS NOT NULL
),
held AS (
    -- Rows inside their chat's quiet hours ([[id, end], ...]): due again when these end (or
    -- expire), remembering when they were due (a change of the hours puts them back). No attempt.
    UPDATE outbox o
    SET keyingi_urinish = least(to_timestamp((h ->> 1)::float8), o.eskirish),
        tinch_oldin = coalesce(o.tinch_oldin, o.keyingi_urinish), yangilangan = now()
    FROM jsonb_array_elements(:held::jsonb) AS h
    WHERE o.id = (h ->> 0)::bigint AND o.holat = 'kutmoqda'
)
UPDATE outbox o
SET holat = 'bajarilmoqda', urinish = least(o.urinish, 999) + 1, band_vaqti = now(),
    egasi = :holder, yangilangan = now(), tinch_oldin = NULL
FROM taken t
WHERE o.id = t.id
RETURNING o.id AS id, o.tur AS kind, o.kalit AS key, o.payload::text AS payload,
          o.urinish AS attempts,
          -- A scalar subquery, not EXISTS: always one probe of the marker's key.
          (SELECT true FROM yuborilgan y WHERE y.kalit = o.kalit) IS NOT NULL AS already_sent,
          o.band_vaqti AS claimed_at,
          extract(epoch FROM t.send_at - clock_timestamp())::float8 AS wait,
          o.navbat AS queue,
          CASE WHEN o.payload ? 'message_key' THEN
              (SELECT json_build_array(y.chat_id, y.message_id, y.message_ids)::text
               FROM yuborilgan y WHERE y.kalit = o.payload ->> 'message_key') END AS original,
          CASE WHEN o.payload ? 'message_key' THEN
              (SELECT m.holat || coalesce(':' || m.xato_turi, '') FROM outbox m
               WHERE m.kalit = o.payload ->> 'message_key') END AS original_state,
          CASE WHEN isfinite(o.eskirish)
               THEN extract(epoch FROM o.eskirish - clock_timestamp())::float8 END AS expires_in,
          o.traceparent AS traceparent, o.tracestate AS tracestate
