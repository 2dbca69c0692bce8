WITH RECURSIVE
budget AS (
    SELECT CASE WHEN c > clock_timestamp() + interval '1 day'
                THEN clock_timestamp() + %(horizon)s * interval '1s'
                ELSE greatest(clock_timestamp(), c) END AS base, clock_timestamp() AS t0,
           set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true) AS idle_limit,
           greatest(pauza_tugashi, CASE WHEN %(paid)s THEN pullik_pauza_tugashi END) > now()
           OR EXISTS (SELECT 1 FROM "public".pauza
                      WHERE (doira = 'navbat' AND qiymat = %(queue)s)
                         OR (doira = 'bot' AND qiymat = %(bot)s)) AS paused
    FROM (SELECT *, CASE WHEN %(paid)s THEN pullik_slot ELSE keyingi_slot END AS c
          FROM "public".bot_holati WHERE bot = %(bot)s FOR UPDATE) h
),
room AS (
    SELECT CASE WHEN coalesce((SELECT paused FROM budget), false) THEN 0
                WHEN %(rate)s <= 0 THEN %(limit)s
                ELSE least(%(limit)s, greatest(0, 1 + floor((%(horizon)s
                     - extract(epoch FROM (SELECT base - t0 FROM budget))) * %(rate)s)::int))
           END AS n
),
held AS (
    SELECT * FROM "public".pauza WHERE doira IN ('tur', 'partiya')
),
keys(k) AS (
    SELECT %(bot)s || ':' || %(queue)s UNION ALL SELECT ':' || %(queue)s WHERE %(unnamed)s
),
lane_bots AS (
    SELECT ARRAY[%(bot)s, CASE WHEN %(unnamed)s THEN ':' || %(queue)s END] AS ks
),
plan AS (
    SELECT greatest(now(), max(d) FILTER (
               WHERE d - make_interval(secs => k / %(rate)s) <= now())) AS until
    FROM (SELECT w.keyingi_urinish AS d,
                 row_number() OVER (ORDER BY w.keyingi_urinish, w.id) AS k
          FROM keys CROSS JOIN LATERAL (
              SELECT o.id, o.keyingi_urinish FROM "public".outbox o
              WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k AND o.holat = 'kutmoqda'
                AND o.eng_erta IS NOT NULL AND o.keyingi_urinish > now()
                AND o.keyingi_urinish <= now() + make_interval(secs => %(lookahead)s)
              ORDER BY o.keyingi_urinish, o.id
              LIMIT %(plan_rows)s) w
          ORDER BY w.keyingi_urinish, w.id
          LIMIT %(plan_rows)s) w
    WHERE %(rate)s > 0
),
clear AS (
    SELECT NOT EXISTS (SELECT 1 FROM "public".outbox s
                       WHERE s.yakka
                         AND ((s.holat = 'kutmoqda' AND s.keyingi_urinish <= now()
                               AND s.navbat = %(queue)s AND (s.payload @> %(mark)s) = ANY (%(lanes)s)
                               AND (s.bot = %(bot)s OR (s.bot IS NULL AND %(unnamed)s))
                               AND NOT EXISTS (SELECT 1 FROM held z WHERE z.qiymat =
                                   CASE z.doira WHEN 'tur' THEN s.tur ELSE s.partiya END))
                              OR (s.holat = 'bajarilmoqda' AND s.egasi = %(holder)s))) AS ok
),
alone AS (
    SELECT o.id, o.ustuvorlik, o.keyingi_urinish
    FROM "public".outbox o
    WHERE o.yakka AND o.holat = 'kutmoqda' AND o.keyingi_urinish <= now()
      AND o.navbat = %(queue)s AND (o.bot = %(bot)s OR (o.bot IS NULL AND %(unnamed)s))
      AND (o.payload @> %(mark)s) = ANY (%(lanes)s) AND NOT (SELECT ok FROM clear)
      AND NOT EXISTS (SELECT 1 FROM "public".outbox WHERE egasi = %(holder)s AND holat = 'bajarilmoqda')
      AND NOT EXISTS (SELECT 1 FROM held z WHERE z.qiymat =
                          CASE z.doira WHEN 'tur' THEN o.tur ELSE o.partiya END)
    ORDER BY o.keyingi_urinish, o.id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
),
present(k, v) AS (
    SELECT k, (SELECT o.ustuvorlik FROM "public".outbox o
               WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k
                 AND o.holat = 'kutmoqda'
               ORDER BY o.ustuvorlik DESC LIMIT 1)
    FROM keys
    UNION ALL
    SELECT k, (SELECT o.ustuvorlik FROM "public".outbox o
               WHERE coalesce(o.bot, '') || ':' || o.navbat = p.k
                 AND o.holat = 'kutmoqda' AND o.ustuvorlik < p.v
               ORDER BY o.ustuvorlik DESC LIMIT 1)
    FROM present p WHERE p.v IS NOT NULL
),
walk AS (
    SELECT c.* FROM (SELECT DISTINCT v FROM present WHERE v IS NOT NULL ORDER BY v DESC) p
    CROSS JOIN LATERAL (
        SELECT r.* FROM keys CROSS JOIN LATERAL (
            SELECT o.id, o.ustuvorlik, o.keyingi_urinish
            FROM "public".outbox o
            WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k
              AND o.holat = 'kutmoqda' AND o.ustuvorlik = p.v
              AND o.keyingi_urinish <= (SELECT until FROM plan)
              AND coalesce(o.eng_erta, o.keyingi_urinish) <= now()
              AND NOT o.yakka AND (SELECT ok FROM clear) AND (o.payload @> %(mark)s) = ANY (%(lanes)s)
              AND NOT EXISTS (SELECT 1 FROM held z WHERE z.qiymat =
                                  CASE z.doira WHEN 'tur' THEN o.tur ELSE o.partiya END)
              AND (NOT o.payload ? 'message_key' OR NOT EXISTS (
                       SELECT 1 FROM "public".outbox m WHERE m.kalit = o.payload ->> 'message_key'
                                                AND m.holat IN ('kutmoqda', 'bajarilmoqda')))
              AND (o.tartib IS NULL OR o.suhbat IS NULL OR NOT EXISTS (
                       SELECT 1 FROM "public".outbox e
                       WHERE coalesce(e.bot, ':' || e.navbat) = ANY ((SELECT ks FROM lane_bots)::text[])
                         AND e.suhbat = o.suhbat AND e.ustuvorlik = o.ustuvorlik
                         AND e.holat IN ('kutmoqda', 'bajarilmoqda')
                         AND e.tartib IS NOT NULL AND e.suhbat IS NOT NULL
                         AND (e.tartib, e.id) < (o.tartib, o.id)
                         AND e.tinch = o.tinch AND (e.tinch_oldin IS NULL OR e.keyingi_urinish <= now())))
              AND (NOT %(chat_on)s OR coalesce(
                       (SELECT cn.keyingi FROM "public".chat_navbati cn
                        WHERE cn.bot = %(bot)s
                          AND cn.chat = coalesce(o.payload ->> 'chat_id', (
                                  SELECT y.chat_id::text FROM "public".yuborilgan y
                                  WHERE y.kalit = o.payload ->> 'message_key'))),
                       '-infinity') <= now())
            ORDER BY o.keyingi_urinish, o.id
            LIMIT %(limit)s
            FOR UPDATE OF o SKIP LOCKED
        ) r
        ORDER BY r.keyingi_urinish, r.id
        LIMIT %(limit)s
    ) c
    LIMIT (SELECT n FROM room)
)
SELECT room.n AS room, extract(epoch FROM (SELECT base FROM budget))::float8 AS base,
       extract(epoch FROM (SELECT until FROM plan))::float8 AS until,
       (SELECT array_agg(DISTINCT v) FROM present WHERE v IS NOT NULL)::text AS present, f.part,
       o.id, o.ustuvorlik, extract(epoch FROM o.keyingi_urinish)::float8 AS due,
       o.eskirish <= now() AS expired,
       coalesce(o.payload ->> 'chat_id', (SELECT y.chat_id::text FROM "public".yuborilgan y
                                          WHERE y.kalit = o.payload ->> 'message_key')) AS chat,
       CASE WHEN jsonb_typeof(o.payload -> 'media') = 'array'
                 AND lower(o.payload ->> 'method') = 'sendmediagroup'
            THEN least(greatest(jsonb_array_length(o.payload -> 'media'), 1), 10)
            ELSE 1 END AS weight, o.tinch AS quiet
FROM room
LEFT JOIN (SELECT 'alone' AS part, id FROM alone UNION ALL SELECT 'walk', id FROM walk) f ON true
LEFT JOIN "public".outbox o ON o.id = f.id
