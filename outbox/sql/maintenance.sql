-- Maintenance: the lock of a round, the reaper, retention, and forgetting idle chats. The relay
-- runs them every round; `outbox reap` and `outbox prune` run the same statements.

-- name: try_maintenance_lock
-- A transaction-level lock: it ends with the round's transaction, so it works through
-- PgBouncer in transaction pooling and cannot outlive a relay that dies mid-round. A relay that
-- hangs inside the round is cut off by the server (SET LOCAL: this transaction only).
SELECT pg_try_advisory_xact_lock(:key),
       set_config('idle_in_transaction_session_timeout', :ms, true);

-- name: reap_stale
-- A claim older than the lease (or without a claim time) belongs to a relay that died or hangs.
-- When the relay held this row alone, the attempt counts: the message may have gone out, or the
-- row itself may be what kills relays; once :max_attempts (the retry policy's) are used up the
-- row goes to xato. When it held other rows too, nothing says which row was at fault: the
-- attempt is not counted and the row becomes a suspect (yakka), claimed alone next time, so
-- that a poison row narrows down to itself. egasi stays on a reaped row until its next claim:
-- the rows of one dead process are counted together even when their claims expire in
-- different rounds. A reaped row is due at once: an expired one is failed when it is claimed.
-- :held are the rows the reaping process itself still holds (:holder's): it is alive, however
-- late, and writes their outcomes itself; reaped, they would be claimed and sent again.
WITH expired AS (
    SELECT id, egasi FROM outbox
    WHERE holat = 'bajarilmoqda'
      AND (band_vaqti IS NULL OR band_vaqti = 'infinity'
           OR band_vaqti < now() - make_interval(secs => :lease))
      AND (egasi IS DISTINCT FROM :holder OR NOT (id = ANY (CAST(:held AS bigint[]))))
),
held AS (
    SELECT egasi, count(*) AS rows FROM outbox
    -- A pending row keeps its holder only as a reaped suspect (yakka).
    WHERE egasi IN (SELECT egasi FROM expired)
      AND (holat = 'bajarilmoqda' OR (holat = 'kutmoqda' AND yakka))
    GROUP BY egasi
),
r AS (
    SELECT e.id, coalesce(h.rows, 1) > 1 AS shared, coalesce(h.rows, 1) AS rows,
           coalesce(h.rows, 1) = 1 AND o.urinish >= :max_attempts AS gives_up
    FROM expired e JOIN outbox o USING (id) LEFT JOIN held h ON h.egasi = e.egasi
)
UPDATE outbox o
SET holat = CASE WHEN r.gives_up THEN 'xato' ELSE 'kutmoqda' END,
    urinish = CASE WHEN r.shared THEN greatest(o.urinish - 1, 0) ELSE o.urinish END,
    yakka = true,
    keyingi_urinish = now(),
    band_vaqti = NULL,
    oxirgi_xato = CASE
        WHEN r.shared THEN 'claim expired after ' || :lease || ' s while its relay held '
            || r.rows || ' rows (relay died or hung); retrying alone, attempt not counted'
        WHEN r.gives_up THEN 'claim expired after ' || :lease || ' s and all attempts are used up'
        ELSE 'claim expired after ' || :lease || ' s (relay died or hung); retrying' END,
    xato_turi = CASE WHEN r.gives_up THEN :too_many ELSE :expired END,
    xato_vaqti = CASE WHEN r.gives_up THEN now() END,
    tarix = o.tarix || jsonb_build_array(jsonb_build_object(
        'vaqt', now(), 'urinish', o.urinish, 'xato', 'claim expired (reaped)',
        'xato_turi', CASE WHEN r.gives_up THEN :too_many ELSE :expired END)),
    yangilangan = now()
FROM r
WHERE o.id = r.id AND o.holat = 'bajarilmoqda'
  AND (o.band_vaqti IS NULL OR o.band_vaqti = 'infinity'
       OR o.band_vaqti < now() - make_interval(secs => :lease))
RETURNING o.holat AS state;

-- name: forget_idle_chats
-- Chats whose next free moment is long past are forgotten (with the reaper, every minute): the
-- table holds the chats of the last minute or so, not every chat ever sent to.
DELETE FROM chat_navbati WHERE keyingi < now() - interval '1 minute';

-- name: prune_done
-- Done rows leave oldest first through the partial index on (yangilangan) of done rows, a batch
-- per statement, each a short transaction. SKIP LOCKED: two pruners share the work.
DELETE FROM outbox
WHERE id IN (
    SELECT id FROM outbox
    WHERE holat = 'bajarildi' AND yangilangan < now() - make_interval(secs => :older_than)
    ORDER BY yangilangan
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
) AND holat = 'bajarildi';

-- name: prune_markers
-- A marker outlives its row: it stops a re-enqueued key from being sent twice. It is kept while
-- a row with its key could still be sent (pending, claimed, or failed and replayable).
DELETE FROM yuborilgan
WHERE kalit IN (
    SELECT y.kalit FROM yuborilgan y
    WHERE y.yuborilgan_vaqt < now() - make_interval(secs => :older_than)
      AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.kalit = y.kalit AND o.holat <> 'bajarildi')
    ORDER BY y.yuborilgan_vaqt
    LIMIT :batch
    FOR UPDATE SKIP LOCKED
);

-- name: count_prunable
-- How many rows and markers prune would delete now (its progress line's total); a NULL :done
-- keeps the done rows.
SELECT
    (SELECT count(*) FROM outbox
     WHERE holat = 'bajarildi' AND yangilangan < now() - make_interval(secs => :done))
  + (SELECT count(*) FROM yuborilgan y
     WHERE y.yuborilgan_vaqt < now() - make_interval(secs => :markers)
       AND NOT EXISTS (SELECT 1 FROM outbox o
                       WHERE o.kalit = y.kalit AND o.holat <> 'bajarildi'));
