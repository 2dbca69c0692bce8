WITH keys(k) AS (
    SELECT %(bot)s || ':' || %(queue)s UNION ALL SELECT ':' || %(queue)s WHERE %(unnamed)s
),
lane_bots AS (
    SELECT ARRAY[%(bot)s, CASE WHEN %(unnamed)s THEN ':' || %(queue)s END] AS ks
),
paused AS (
    SELECT EXISTS (SELECT 1 FROM "public".pauza WHERE doira IN ('tur', 'partiya')) AS some_paused
),
oldest AS (
    SELECT c.id FROM unnest(%(priorities)s::smallint[]) AS p(v)
    CROSS JOIN keys
    CROSS JOIN LATERAL (
        SELECT o.id, o.keyingi_urinish
        FROM "public".outbox o
        WHERE coalesce(o.bot, '') || ':' || o.navbat = keys.k
          AND o.holat = 'kutmoqda' AND o.ustuvorlik = p.v AND o.id <> ALL(%(taken)s::bigint[])
          AND o.keyingi_urinish <= to_timestamp(%(until)s)
          AND coalesce(o.eng_erta, o.keyingi_urinish) <= now()
          AND NOT o.yakka
          AND (o.payload @> %(mark)s) = ANY (%(lanes)s)
          AND (NOT (SELECT some_paused FROM paused) OR NOT EXISTS (
                   SELECT 1 FROM "public".pauza z WHERE (z.doira = 'tur' AND z.qiymat = o.tur)
                                            OR (z.doira = 'partiya' AND z.qiymat = o.partiya)))
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
                     AND e.tinch = o.tinch
                     AND (e.tinch_oldin IS NULL OR e.keyingi_urinish <= now())))
          AND (NOT %(chat_on)s OR coalesce(
                   (SELECT cn.keyingi FROM "public".chat_navbati cn
                    WHERE cn.bot = %(bot)s
                      AND cn.chat = coalesce(o.payload ->> 'chat_id', (
                              SELECT y.chat_id::text FROM "public".yuborilgan y
                              WHERE y.kalit = o.payload ->> 'message_key'))),
                   '-infinity') <= now())
        ORDER BY o.keyingi_urinish, o.id
        LIMIT %(reserve)s
        FOR UPDATE OF o SKIP LOCKED
    ) c
    ORDER BY c.keyingi_urinish, c.id
    LIMIT %(reserve)s
)
SELECT 'oldest' AS part, o.id, o.ustuvorlik, extract(epoch FROM o.keyingi_urinish)::float8,
       o.eskirish <= now(),
       coalesce(o.payload ->> 'chat_id', (SELECT y.chat_id::text FROM "public".yuborilgan y
                                          WHERE y.kalit = o.payload ->> 'message_key')),
       CASE WHEN jsonb_typeof(o.payload -> 'media') = 'array'
                 AND lower(o.payload ->> 'method') = 'sendmediagroup'
            THEN least(greatest(jsonb_array_length(o.payload -> 'media'), 1), 10)
            ELSE 1 END, o.tinch
FROM oldest JOIN "public".outbox o USING (id)
