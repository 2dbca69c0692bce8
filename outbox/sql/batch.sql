-- A batch's (broadcast's) progress: the rows that share a partiya, through the batch index
-- (partiya, holat, yangilangan). Its cancel is cancel_waiting (operator.sql).

-- name: batch_progress
-- A row is paused if its batch (:batch_paused), its queue (:queues) or its kind (:kinds) is:
-- the pauses are read first and passed in (a handful of names). :window: the seconds over
-- which the rate is measured.
SELECT count(*) AS total,
       count(*) FILTER (WHERE holat = 'bajarildi') AS sent,
       count(*) FILTER (WHERE holat = 'xato') AS failed,
       count(*) FILTER (WHERE holat = 'xato' AND xato_turi = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE holat = 'xato' AND xato_turi = 'chat_blocked') AS chat_blocked,
       count(*) FILTER (WHERE holat = 'bajarilmoqda') AS sending,
       count(*) FILTER (WHERE holat = 'kutmoqda' AND (CAST(:batch_paused AS boolean)
                        OR navbat = ANY(CAST(:queues AS text[]))
                        OR tur = ANY(CAST(:kinds AS text[])))) AS paused,
       count(*) FILTER (WHERE holat = 'kutmoqda') AS pending,
       count(*) FILTER (WHERE holat = 'bajarildi'
                        AND yangilangan > now() - make_interval(secs => :window)) AS recent,
       min(yangilangan) FILTER (WHERE holat = 'bajarildi'
                        AND yangilangan > now() - make_interval(secs => :window)) AS recent_from,
       -- Sent with allow_paid_broadcast (the paid lane, with one): each may cost 0.1 Star.
       count(*) FILTER (WHERE payload @> '{"allow_paid_broadcast": true}') AS paid,
       count(*) FILTER (WHERE holat = 'bajarildi'
                        AND payload @> '{"allow_paid_broadcast": true}') AS paid_sent,
       min(yaratilgan) AS started,
       max(yangilangan) FILTER (WHERE holat = 'bajarildi') AS last_sent,
       now() AS now
FROM outbox
WHERE partiya = :partiya;

-- name: batch_report
-- A line per row of the batch still in the table (retention deletes done rows and sent
-- markers after theirs), in id order: one statement, read as a stream, so one snapshot.
-- A follow-up's chat is its original's; a sent row's chat and message come from its marker.
SELECT o.kalit,
       coalesce(y.chat_id::text, o.payload ->> 'chat_id', (
           SELECT m.chat_id::text FROM yuborilgan m WHERE m.kalit = o.payload ->> 'message_key'
       )) AS chat_id,
       o.holat, o.xato_turi, o.urinish,
       CASE WHEN o.holat = 'bajarildi' THEN coalesce(y.yuborilgan_vaqt, o.yangilangan) END
           AS sent_at,
       y.message_id, o.oxirgi_xato
FROM outbox o
LEFT JOIN yuborilgan y ON y.kalit = o.kalit AND o.holat = 'bajarildi'
WHERE o.partiya = :partiya
ORDER BY o.id;
