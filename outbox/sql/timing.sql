-- When a relay's bots may find work: for each bot of :bots, in :queues, the next due moment,
-- counting chats that may not receive yet, the bot's pause and budget, and delivery windows.
-- One row per bot.

-- name: lanes_timing
-- Per lane (a bot's rows of a queue; with :unnamed also the queue's rows that name no bot),
-- one probe of outbox_lane_kutmoqda_idx finds its first pending row; only when that one is due
-- are its first rows matched against their chats, and only while it is ahead are its windowed
-- rows planned. So a bot with nothing pending costs an index probe per lane. Paused rows, and
-- the paid rows of a bot whose paid lane a refusal stopped (:paid, a relay with a paid lane),
-- are no work: an idle relay does not wake for them, and a drain ends without them. Through epochs: a
-- due time of +-infinity gives +-inf, no error.
WITH bots AS (
    SELECT * FROM unnest(CAST(:bots AS text[]), CAST(:unnamed AS bool[])) AS b(bot, unnamed)
),
clock AS MATERIALIZED (
    -- The moment the answer counts from, read after this statement's snapshot: now() is read
    -- before it is planned, and a retry committed in between with its own now() as its time
    -- would look due in the future (and a drain would end without it). Read once.
    SELECT clock_timestamp() AS t
),
lanes AS (
    SELECT b.bot, l.k, ARRAY[b.bot, CASE WHEN b.unnamed THEN ':' || q.navbat END] AS ks,
           -- The bot's paid lane is stopped (a refusal): its rows are no work until it goes on.
           CAST(:paid AS boolean) AND coalesce((SELECT h.pullik_pauza_tugashi > now()
                                                FROM bot_holati h WHERE h.bot = b.bot), false)
               AS paid_stopped
    FROM bots b
    CROSS JOIN unnest(CAST(:queues AS text[])) AS q(navbat)
    CROSS JOIN LATERAL (SELECT b.bot || ':' || q.navbat AS k
                        UNION ALL SELECT ':' || q.navbat WHERE b.unnamed) l
    WHERE NOT EXISTS (SELECT 1 FROM pauza
                      WHERE (doira = 'navbat' AND qiymat = q.navbat)
                         OR (doira = 'bot' AND qiymat = b.bot))
),
kinds AS (
    -- A kind or a batch is paused somewhere: only then is each row asked.
    SELECT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya')) AS paused
),
timed AS (
    SELECT l.bot, f.at, d.due AS chat_due, e.due AS window_due
    FROM lanes l
    CROSS JOIN LATERAL (
        SELECT min(o.keyingi_urinish) AS at FROM (
            SELECT o.keyingi_urinish FROM outbox o
            WHERE coalesce(o.bot, '') || ':' || o.navbat = l.k AND o.holat = 'kutmoqda'
              AND NOT (l.paid_stopped AND o.payload @> jsonb_build_object('allow_paid_broadcast', true))
              AND (NOT (SELECT paused FROM kinds) OR NOT EXISTS (
                       SELECT 1 FROM pauza z
                       WHERE (z.doira = 'tur' AND z.qiymat = o.tur)
                          OR (z.doira = 'partiya' AND z.qiymat = o.partiya)))
            ORDER BY o.keyingi_urinish, o.id LIMIT 1) o
    ) f
    LEFT JOIN LATERAL (
        -- Due now: a row whose chat may not receive yet is due when its chat may (the first
        -- rows only). A row held behind an earlier one of its chat is no work of its own: the
        -- earlier one is (its retry's time, or, claimed, its outcome wakes the claimer). If all
        -- the first rows are held, the claim's walk looks further: due now.
        SELECT coalesce(min(greatest(extract(epoch FROM p.keyingi_urinish),
                                     extract(epoch FROM c.keyingi))) FILTER (WHERE NOT p.held),
                        extract(epoch FROM now())) AS due
        FROM (SELECT o.keyingi_urinish, o.payload ->> 'chat_id' AS chat,
                     o.tartib IS NOT NULL AND o.suhbat IS NOT NULL AND EXISTS (
                         SELECT 1 FROM outbox e
                         WHERE coalesce(e.bot, ':' || e.navbat) = ANY (l.ks)
                           AND e.suhbat = o.suhbat AND e.ustuvorlik = o.ustuvorlik
                           AND e.holat IN ('kutmoqda', 'bajarilmoqda')
                           AND e.tartib IS NOT NULL AND e.suhbat IS NOT NULL
                           AND (e.tartib, e.id) < (o.tartib, o.id)
                           -- As the claim's probe: not across quiet hours (outbox_0018).
                           AND e.tinch = o.tinch
                           AND (e.tinch_oldin IS NULL OR e.keyingi_urinish <= now())) AS held
              FROM outbox o
              WHERE coalesce(o.bot, '') || ':' || o.navbat = l.k AND o.holat = 'kutmoqda'
                AND f.at <= now()
                AND NOT (l.paid_stopped AND o.payload @> jsonb_build_object('allow_paid_broadcast', true))
                AND (NOT (SELECT paused FROM kinds) OR NOT EXISTS (
                         SELECT 1 FROM pauza z
                         WHERE (z.doira = 'tur' AND z.qiymat = o.tur)
                            OR (z.doira = 'partiya' AND z.qiymat = o.partiya)))
              ORDER BY o.keyingi_urinish, o.id LIMIT 64) p
        LEFT JOIN chat_navbati c ON c.bot = l.bot AND c.chat = p.chat
    ) d ON true
    LEFT JOIN LATERAL (
        -- Ahead: the claim's plan has the k-th windowed row (in deadline order) start by
        -- deadline_k - k / rate, not before its window opens.
        SELECT min(greatest(extract(epoch FROM w.eng_erta),
                            extract(epoch FROM w.keyingi_urinish) - w.k / :rate)) AS due
        FROM (SELECT o.keyingi_urinish, o.eng_erta,
                     row_number() OVER (ORDER BY o.keyingi_urinish, o.id) AS k
              FROM outbox o
              WHERE coalesce(o.bot, '') || ':' || o.navbat = l.k AND o.holat = 'kutmoqda'
                AND :rate > 0 AND f.at > now() AND o.eng_erta IS NOT NULL
                AND o.keyingi_urinish > now()
                AND o.keyingi_urinish <= now() + make_interval(secs => :lookahead)
                AND (NOT (SELECT paused FROM kinds) OR NOT EXISTS (
                         SELECT 1 FROM pauza z
                         WHERE (z.doira = 'tur' AND z.qiymat = o.tur)
                            OR (z.doira = 'partiya' AND z.qiymat = o.partiya)))
              ORDER BY o.keyingi_urinish, o.id LIMIT :plan_rows) w
    ) e ON true
)
SELECT b.bot,
       min(greatest(CASE WHEN t.at > c.t THEN least(extract(epoch FROM t.at), t.window_due)
                         ELSE t.chat_due END,
                    extract(epoch FROM h.pauza_tugashi),
                    -- A slot clock a day ahead counts, as claim_rows reads it, as free now.
                    extract(epoch FROM CASE WHEN h.slot > c.t + interval '1 day'
                                            THEN c.t + make_interval(secs => :horizon)
                                            ELSE h.slot END) - :horizon))
           -- No row (greatest() skips a NULL): no work, not the bot's '-infinity' defaults.
           FILTER (WHERE t.at IS NOT NULL)
           - extract(epoch FROM c.t),
       coalesce(max(extract(epoch FROM h.pauza_tugashi) - extract(epoch FROM c.t)), 0)::float8,
       coalesce(bool_or(t.at <= c.t), false)
FROM bots b
CROSS JOIN clock c
LEFT JOIN timed t ON t.bot = b.bot
LEFT JOIN LATERAL (
    -- The clock that frees the bot's next slot: with a running paid lane (:paid), either.
    SELECT h.*, CASE WHEN :paid AND h.pullik_pauza_tugashi <= c.t
                     THEN least(h.keyingi_slot, h.pullik_slot) ELSE h.keyingi_slot END AS slot
    FROM bot_holati h WHERE h.bot = b.bot
) h ON true
GROUP BY b.bot, c.t
