WITH chosen AS (
    SELECT (b ->> 0)::bigint AS id, b ->> 1 AS chat,
           timestamptz 'epoch' + (b ->> 2)::bigint * interval '1 microsecond' AS send_at,
           timestamptz 'epoch' + (b ->> 3)::bigint * interval '1 microsecond' AS chat_free
    FROM jsonb_array_elements(%(bookings)s::jsonb) AS b
),
chats AS (
    INSERT INTO "public".chat_navbati AS c (bot, chat, keyingi)
    SELECT %(bot)s, chat, chat_free FROM chosen WHERE chat_free IS NOT NULL
    ON CONFLICT (bot, chat) DO UPDATE SET keyingi = excluded.keyingi
    WHERE c.keyingi <= (SELECT h.send_at FROM chosen h
                        WHERE h.chat = excluded.chat AND h.chat_free IS NOT NULL)
    RETURNING chat
),
taken AS (
    SELECT * FROM chosen WHERE chat_free IS NULL OR chat IN (SELECT chat FROM chats)
),
bump AS (
    UPDATE "public".bot_holati
    SET keyingi_slot = CASE WHEN %(paid)s THEN keyingi_slot ELSE to_timestamp(%(next_slot)s) END,
        pullik_slot = CASE WHEN %(paid)s THEN to_timestamp(%(next_slot)s) ELSE pullik_slot END
    WHERE bot = %(bot)s AND %(next_slot)s::float8 IS NOT NULL
),
held AS (
    UPDATE "public".outbox o
    SET keyingi_urinish = least(to_timestamp((h ->> 1)::float8), o.eskirish),
        tinch_oldin = coalesce(o.tinch_oldin, o.keyingi_urinish), yangilangan = now()
    FROM jsonb_array_elements(%(held)s::jsonb) AS h
    WHERE o.id = (h ->> 0)::bigint AND o.holat = 'kutmoqda'
)
UPDATE "public".outbox o
SET holat = 'bajarilmoqda', urinish = least(o.urinish, 999) + 1, band_vaqti = now(),
    egasi = %(holder)s, yangilangan = now(), tinch_oldin = NULL
FROM taken t
WHERE o.id = t.id
RETURNING o.id AS id, o.tur AS kind, o.kalit AS key, o.payload::text AS payload,
          o.urinish AS attempts,
          (SELECT true FROM "public".yuborilgan y WHERE y.kalit = o.kalit) IS NOT NULL AS already_sent,
          o.band_vaqti AS claimed_at,
          extract(epoch FROM t.send_at - clock_timestamp())::float8 AS wait,
          o.navbat AS queue,
          CASE WHEN o.payload ? 'message_key' THEN
              (SELECT json_build_array(y.chat_id, y.message_id, y.message_ids)::text
               FROM "public".yuborilgan y WHERE y.kalit = o.payload ->> 'message_key') END AS original,
          CASE WHEN o.payload ? 'message_key' THEN
              (SELECT m.holat || coalesce(':' || m.xato_turi, '') FROM "public".outbox m
               WHERE m.kalit = o.payload ->> 'message_key') END AS original_state,
          CASE WHEN isfinite(o.eskirish)
               THEN extract(epoch FROM o.eskirish - clock_timestamp())::float8 END AS expires_in,
          o.traceparent AS traceparent, o.tracestate AS tracestate
