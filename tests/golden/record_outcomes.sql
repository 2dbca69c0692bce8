WITH r AS (
    SELECT *, timestamptz 'epoch' + band_us * interval '1 microsecond' AS band_vaqti
    FROM json_to_recordset(CAST(%(batch)s AS json))
        AS r(id bigint, urinish int, attempts int, holat text, delay float8, xato text,
             xato_turi text, kalit text, chat_id bigint, message_id bigint, new_chat_id bigint,
             band_us bigint, message_ids bigint[], gone boolean)
    LIMIT %(count)s
),
markers AS (
    INSERT INTO "public".yuborilgan (kalit, chat_id, message_id, message_ids)
    SELECT kalit, chat_id, message_id, message_ids FROM r WHERE message_id IS NOT NULL
    ON CONFLICT (kalit) DO NOTHING
),
gone AS (
    INSERT INTO "public".bloklangan (bot, suhbat, xato, manba)
    SELECT coalesce(o.bot, ''), coalesce(r.new_chat_id::text, o.suhbat),
           regexp_replace(coalesce(r.xato, ''), '^Telegram refused \(403\): ', ''), o.id
    FROM r JOIN "public".outbox o ON o.id = r.id
    WHERE r.gone AND o.holat = (SELECT 'bajarilmoqda') AND o.urinish = r.urinish
      AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti)
      AND coalesce(r.new_chat_id::text, o.suhbat) IS NOT NULL
    ON CONFLICT (bot, suhbat) DO NOTHING
)
UPDATE "public".outbox o
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
WHERE o.id = r.id AND o.holat = (SELECT 'bajarilmoqda') AND o.urinish = r.urinish
  AND (r.band_vaqti IS NULL OR o.band_vaqti = r.band_vaqti);
