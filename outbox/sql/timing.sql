-- When a relay's bots may find work: for each bot (the rows that name it, and with :unnamed
-- also the rows that name no bot) in :queues, the next due moment, counting chats that may not
-- receive yet, the bot's pause and budget, and delivery windows. One row per bot.

-- name: lanes_timing
-- Per bot and queue, one probe of outbox_bot_kutmoqda_idx (two with unnamed rows) finds its
-- first pending row; only when that one is due are its first rows matched against their chats,
-- and only while it is ahead are its windowed rows planned. So a bot with nothing pending costs
-- an index probe per queue. Paused rows are no work: an idle relay does not wake for them, and
-- a drain ends without them. Through epochs: a due time of +-infinity gives +-inf, no error.
SELECT b.bot,
       min(greatest(CASE WHEN f.at > now() THEN least(extract(epoch FROM f.at), e.due)
                         ELSE d.due END,
                    extract(epoch FROM h.pauza_tugashi),
                    extract(epoch FROM h.keyingi_slot) - :horizon))
           -- No row (greatest() skips a NULL): no work, not the bot's '-infinity' defaults.
           FILTER (WHERE f.at IS NOT NULL)
           - extract(epoch FROM now()),
       coalesce(max(extract(epoch FROM h.pauza_tugashi) - extract(epoch FROM now())), 0)::float8,
       coalesce(bool_or(f.at <= now()), false)
FROM unnest(CAST(:bots AS text[]), CAST(:unnamed AS bool[])) AS b(bot, unnamed)
CROSS JOIN unnest(CAST(:queues AS text[])) AS q(navbat)
CROSS JOIN LATERAL (
    SELECT min(keyingi_urinish) AS at FROM (
        (SELECT keyingi_urinish FROM outbox r
        WHERE holat = 'kutmoqda' AND r.bot = b.bot AND navbat = q.navbat
          AND NOT EXISTS (SELECT 1 FROM pauza
                          WHERE (doira = 'navbat' AND qiymat = q.navbat)
                             OR (doira = 'bot' AND qiymat = b.bot))
          AND (NOT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya'))
               OR NOT EXISTS (SELECT 1 FROM pauza p
                              WHERE (p.doira = 'tur' AND p.qiymat = r.tur)
                                 OR (p.doira = 'partiya' AND p.qiymat = r.partiya)))
        ORDER BY keyingi_urinish, id LIMIT 1)
        UNION ALL
        (SELECT keyingi_urinish FROM outbox r
        WHERE holat = 'kutmoqda' AND b.unnamed AND r.bot IS NULL AND navbat = q.navbat
          AND NOT EXISTS (SELECT 1 FROM pauza
                          WHERE (doira = 'navbat' AND qiymat = q.navbat)
                             OR (doira = 'bot' AND qiymat = b.bot))
          AND (NOT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya'))
               OR NOT EXISTS (SELECT 1 FROM pauza p
                              WHERE (p.doira = 'tur' AND p.qiymat = r.tur)
                                 OR (p.doira = 'partiya' AND p.qiymat = r.partiya)))
        ORDER BY keyingi_urinish, id LIMIT 1)) first
) f
LEFT JOIN LATERAL (
    -- A row whose chat may not receive yet is due when its chat may (the first rows only).
    SELECT min(greatest(extract(epoch FROM p.keyingi_urinish), extract(epoch FROM c.keyingi)))
           AS due
    FROM (((SELECT keyingi_urinish, id, payload ->> 'chat_id' AS chat FROM outbox r
        WHERE holat = 'kutmoqda' AND r.bot = b.bot AND navbat = q.navbat AND f.at <= now()
          AND NOT EXISTS (SELECT 1 FROM pauza
                          WHERE (doira = 'navbat' AND qiymat = q.navbat)
                             OR (doira = 'bot' AND qiymat = b.bot))
          AND (NOT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya'))
               OR NOT EXISTS (SELECT 1 FROM pauza p
                              WHERE (p.doira = 'tur' AND p.qiymat = r.tur)
                                 OR (p.doira = 'partiya' AND p.qiymat = r.partiya)))
        ORDER BY keyingi_urinish, id LIMIT 64)
        UNION ALL
        (SELECT keyingi_urinish, id, payload ->> 'chat_id' AS chat FROM outbox r
        WHERE holat = 'kutmoqda' AND b.unnamed AND r.bot IS NULL AND navbat = q.navbat AND f.at <= now()
          AND NOT EXISTS (SELECT 1 FROM pauza
                          WHERE (doira = 'navbat' AND qiymat = q.navbat)
                             OR (doira = 'bot' AND qiymat = b.bot))
          AND (NOT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya'))
               OR NOT EXISTS (SELECT 1 FROM pauza p
                              WHERE (p.doira = 'tur' AND p.qiymat = r.tur)
                                 OR (p.doira = 'partiya' AND p.qiymat = r.partiya)))
        ORDER BY keyingi_urinish, id LIMIT 64))
          ORDER BY keyingi_urinish, id LIMIT 64) p
    LEFT JOIN chat_navbati c ON c.bot = b.bot AND c.chat = p.chat
) d ON true
LEFT JOIN LATERAL (
    -- While its first row is ahead, a bot's windowed rows may be due before their time: the
    -- claim's plan has the k-th of them (in deadline order) start by deadline_k - k / rate, not
    -- before its window opens.
    SELECT min(greatest(extract(epoch FROM w.eng_erta),
                        extract(epoch FROM w.keyingi_urinish) - w.k / :rate)) AS due
    FROM (SELECT keyingi_urinish, eng_erta, row_number() OVER (ORDER BY keyingi_urinish, id) AS k
          FROM (((SELECT keyingi_urinish, id, eng_erta FROM outbox r
        WHERE holat = 'kutmoqda' AND r.bot = b.bot AND navbat = q.navbat
            AND :rate > 0 AND f.at > now() AND eng_erta IS NOT NULL
            AND keyingi_urinish > now()
            AND keyingi_urinish <= now() + make_interval(secs => :lookahead)
          AND NOT EXISTS (SELECT 1 FROM pauza
                          WHERE (doira = 'navbat' AND qiymat = q.navbat)
                             OR (doira = 'bot' AND qiymat = b.bot))
          AND (NOT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya'))
               OR NOT EXISTS (SELECT 1 FROM pauza p
                              WHERE (p.doira = 'tur' AND p.qiymat = r.tur)
                                 OR (p.doira = 'partiya' AND p.qiymat = r.partiya)))
        ORDER BY keyingi_urinish, id LIMIT :plan_rows)
        UNION ALL
        (SELECT keyingi_urinish, id, eng_erta FROM outbox r
        WHERE holat = 'kutmoqda' AND b.unnamed AND r.bot IS NULL AND navbat = q.navbat
            AND :rate > 0 AND f.at > now() AND eng_erta IS NOT NULL
            AND keyingi_urinish > now()
            AND keyingi_urinish <= now() + make_interval(secs => :lookahead)
          AND NOT EXISTS (SELECT 1 FROM pauza
                          WHERE (doira = 'navbat' AND qiymat = q.navbat)
                             OR (doira = 'bot' AND qiymat = b.bot))
          AND (NOT EXISTS (SELECT 1 FROM pauza WHERE doira IN ('tur', 'partiya'))
               OR NOT EXISTS (SELECT 1 FROM pauza p
                              WHERE (p.doira = 'tur' AND p.qiymat = r.tur)
                                 OR (p.doira = 'partiya' AND p.qiymat = r.partiya)))
        ORDER BY keyingi_urinish, id LIMIT :plan_rows))
                ORDER BY keyingi_urinish, id LIMIT :plan_rows) ahead) w
) e ON true
LEFT JOIN bot_holati h ON h.bot = b.bot
GROUP BY b.bot;
