-- The queue's counts and health (outbox status, the web page's header, health checks), each
-- bot's figures and the fleet's register as the operator reads them. A status is a health
-- check, run often: the live states are counted through their partial indexes (as large as
-- the backlog), while done rows and sent markers, which grow with every message sent until
-- retention removes them, are counted only in small tables and otherwise estimated.

-- name: count_by_state
SELECT holat AS state, count(*) AS n FROM outbox GROUP BY holat;

-- name: table_sizes
-- The tables' sizes by the planner's statistics (-1 until first vacuumed or analysed).
-- :outbox and :markers name the tables, qualified.
SELECT (SELECT reltuples::float8 FROM pg_class WHERE oid = CAST(:outbox AS regclass))
           AS outbox_rows,
       (SELECT reltuples::float8 FROM pg_class WHERE oid = CAST(:markers AS regclass))
           AS marker_rows;

-- name: count_markers
SELECT count(*) AS markers FROM yuborilgan;

-- name: status_per_queue
-- The figures of every queue (or of :navbat), from which the whole outbox's are summed. Each
-- state is read on its own so that its partial index serves it; done rows only when
-- :count_done.
SELECT navbat AS queue,
       count(*) FILTER (WHERE holat = 'kutmoqda') AS pending,
       count(*) FILTER (WHERE holat = 'bajarilmoqda') AS in_progress,
       count(*) FILTER (WHERE holat = 'bajarildi') AS done,
       count(*) FILTER (WHERE holat = 'xato') AS failed,
       -- A row held behind an earlier message of its chat waits for that one, not for a relay:
       -- counted apart, and not the queue's lag.
       coalesce(extract(epoch FROM now() - min(keyingi_urinish) FILTER (
           WHERE holat = 'kutmoqda' AND keyingi_urinish <= now() AND NOT held
             AND keyingi_urinish > '-infinity')), 0)::float8 AS lag,
       count(*) FILTER (WHERE held) AS held,
       -- Claims older than the lease or without a claim time: the reaper returns them.
       count(*) FILTER (WHERE holat = 'bajarilmoqda' AND (band_vaqti IS NULL
           OR band_vaqti = 'infinity' OR band_vaqti < now() - make_interval(secs => :lease)))
           AS stuck_claims,
       -- Due at infinity: no relay ever claims them (refused since outbox_0002).
       count(*) FILTER (WHERE holat = 'kutmoqda' AND keyingi_urinish = 'infinity') AS never_due
FROM (
    -- Held: due, behind an earlier message of its chat (bot, priority) still to be sent. One
    -- walk of outbox_order_idx, in its order: a row that is not its chat's first is held (a
    -- probe per row cost several times as much beside a backlog). Rows without a chat apart.
    SELECT navbat, holat, keyingi_urinish, NULL::timestamptz AS band_vaqti, held
    FROM (SELECT o.navbat, o.holat, o.keyingi_urinish,
                 o.keyingi_urinish <= now() AND o.tartib IS NOT NULL
                 AND row_number() OVER (PARTITION BY coalesce(o.bot, ':' || o.navbat), o.suhbat,
                                                     o.ustuvorlik, o.tinch
                                        ORDER BY o.tartib, o.id) > 1 AS held
          FROM outbox o
          WHERE o.holat IN ('kutmoqda', 'bajarilmoqda') AND o.suhbat IS NOT NULL
            AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))) w
    WHERE holat = 'kutmoqda'
    UNION ALL
    SELECT navbat, holat, keyingi_urinish, NULL, false FROM outbox
    WHERE holat = 'kutmoqda' AND suhbat IS NULL
      AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))
    UNION ALL
    SELECT navbat, 'bajarilmoqda', NULL, band_vaqti, false FROM outbox
    WHERE holat = 'bajarilmoqda'
      AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))
    UNION ALL
    SELECT navbat, 'xato', NULL, NULL, false FROM outbox WHERE holat = 'xato'
      AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))
    UNION ALL
    SELECT navbat, 'bajarildi', NULL, NULL, false FROM outbox
    WHERE holat = 'bajarildi' AND CAST(:count_done AS boolean)
      AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))
) r
GROUP BY navbat
ORDER BY navbat;

-- name: lane_figures
-- Priorities, windows, expiry and blocked chats in one statement: the pending rows read once through their
-- partial index, the failed ones through theirs (the row with a NULL priority).
SELECT ustuvorlik AS priority,
       count(*) FILTER (WHERE keyingi_urinish <= now()) AS due,
       count(*) FILTER (WHERE eng_erta IS NOT NULL) AS windowed,
       count(*) FILTER (WHERE eskirish <= now() + make_interval(secs => :within)) AS expiring,
       0::bigint AS expired, 0::bigint AS chat_blocked
FROM outbox
WHERE holat = 'kutmoqda' AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text))
GROUP BY ustuvorlik
UNION ALL
-- Failed rows never sent: expired, or their chat gone for the bot (outbox_0017).
SELECT NULL, 0, 0, 0, count(*) FILTER (WHERE xato_turi = 'expired'),
       count(*) FILTER (WHERE xato_turi = 'chat_blocked')
FROM outbox
WHERE holat = 'xato' AND xato_turi IN ('expired', 'chat_blocked')
  AND (CAST(:navbat AS text) IS NULL OR navbat = CAST(:navbat AS text));

-- name: list_relays
-- A relay is alive while its last heartbeat is younger than :missed_beats of its intervals.
SELECT r.id AS id, r.host AS host, r.pid AS pid, r.versiya AS version, r.navbatlar AS queues,
       r.botlar AS bots, r.rad_botlar AS rejected_bots, r.boshlangan AS started_at,
       r.oxirgi_signal AS last_seen, r.signal_oraligi AS interval, r.jarayonda AS in_flight,
       r.jami AS totals,
       r.oxirgi_signal > now() - make_interval(secs => r.signal_oraligi * :missed_beats)
           AS alive,
       greatest(extract(epoch FROM now() - r.oxirgi_signal), 0)::float8 AS silent_seconds
FROM relaylar r
ORDER BY r.host, r.pid, r.id;

-- name: unserved_queues
-- Due rows grouped first (through the partial index on pending rows), then the few queues
-- matched against the few live relays.
SELECT d.navbat AS queue, d.due AS due
FROM (SELECT navbat, count(*) AS due FROM outbox
      WHERE holat = 'kutmoqda' AND keyingi_urinish <= now() GROUP BY navbat) d
WHERE NOT EXISTS (
    SELECT 1 FROM relaylar r
    WHERE d.navbat = ANY (r.navbatlar)
      AND r.oxirgi_signal > now() - make_interval(secs => r.signal_oraligi * :missed_beats))
ORDER BY d.navbat;

-- name: bot_status
-- Each bot's rows in the live states (each through its own partial index), lag and pauses,
-- and how many live relays hold its token (and how many were told 401). Bots without live
-- rows show when a live relay holds their token.
WITH live_rows AS (
    SELECT bot, 'kutmoqda' AS holat, keyingi_urinish FROM outbox
    WHERE holat = 'kutmoqda' AND bot IS NOT NULL
    UNION ALL
    SELECT bot, 'bajarilmoqda', NULL FROM outbox WHERE holat = 'bajarilmoqda' AND bot IS NOT NULL
    UNION ALL
    SELECT bot, 'xato', NULL FROM outbox WHERE holat = 'xato' AND bot IS NOT NULL
),
counted AS (
    SELECT bot,
           count(*) FILTER (WHERE holat = 'kutmoqda') AS pending,
           count(*) FILTER (WHERE holat = 'bajarilmoqda') AS in_progress,
           count(*) FILTER (WHERE holat = 'xato') AS failed,
           coalesce(extract(epoch FROM now() - min(keyingi_urinish) FILTER (
               WHERE keyingi_urinish <= now() AND keyingi_urinish > '-infinity')), 0)::float8
               AS lag
    FROM live_rows GROUP BY bot
),
held AS (
    SELECT b.bot, count(*) AS relays,
           count(*) FILTER (WHERE b.bot = ANY (r.rad_botlar)) AS rejected
    FROM relaylar r CROSS JOIN LATERAL unnest(r.botlar) AS b(bot)
    WHERE r.oxirgi_signal > now() - make_interval(secs => r.signal_oraligi * :missed_beats)
    GROUP BY b.bot
)
SELECT coalesce(c.bot, h.bot) AS bot,
       coalesce(c.pending, 0) AS pending, coalesce(c.in_progress, 0) AS in_progress,
       coalesce(c.failed, 0) AS failed, coalesce(c.lag, 0) AS lag,
       coalesce(h.relays, 0) AS relays, coalesce(h.rejected, 0) AS rejected,
       coalesce((SELECT s.pauza_tugashi > now() FROM bot_holati s
                 WHERE s.bot = coalesce(c.bot, h.bot)), false) AS flood_paused,
       -- Its paid lane stopped (Telegram refused a paid broadcast): Telegram's words.
       (SELECT coalesce(s.pullik_pauza_sababi, '') FROM bot_holati s
        WHERE s.bot = coalesce(c.bot, h.bot) AND s.pullik_pauza_tugashi > now()) AS paid_stopped,
       EXISTS (SELECT 1 FROM pauza p WHERE p.doira = 'bot'
               AND p.qiymat = coalesce(c.bot, h.bot)) AS operator_paused
FROM counted c FULL JOIN held h ON h.bot = c.bot
WHERE CAST(:bot AS text) IS NULL OR coalesce(c.bot, h.bot) = CAST(:bot AS text)
ORDER BY length(coalesce(c.bot, h.bot)), coalesce(c.bot, h.bot);
