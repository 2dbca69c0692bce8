-- The operator's pauses (table pauza): a queue, a bot, a kind (tur) or a batch stops being
-- claimed by every relay until it is resumed. The claim keeps them by its own condition.

-- name: pause
INSERT INTO pauza (doira, qiymat) VALUES (:doira, :qiymat)
ON CONFLICT (doira, qiymat) DO NOTHING
RETURNING yaratilgan AS since;

-- name: resume
-- A resume wakes every listening relay: the rows it frees may be due already, and an idle
-- relay would otherwise find them at its next poll.
WITH gone AS (DELETE FROM pauza WHERE doira = :doira AND qiymat = :qiymat RETURNING 1)
SELECT true AS resumed FROM gone, pg_notify(:channel, '') AS woken;

-- name: list_pauses
SELECT doira AS scope, qiymat AS value, yaratilgan AS since FROM pauza ORDER BY doira, qiymat;

-- name: unpaused_lag
-- The age of the oldest due row that no pause holds, per queue: what the status calls lag
-- while something is paused (a paused queue's rows wait on purpose). Run only then.
SELECT o.navbat AS queue, extract(epoch FROM now() - min(o.keyingi_urinish))::float8 AS lag
FROM outbox o
WHERE o.holat = 'kutmoqda' AND o.keyingi_urinish <= now() AND o.keyingi_urinish > '-infinity'
  AND (CAST(:navbat AS text) IS NULL OR o.navbat = CAST(:navbat AS text))
  AND NOT EXISTS (SELECT 1 FROM pauza p
                  WHERE (p.doira = 'navbat' AND p.qiymat = o.navbat)
                     OR (p.doira = 'tur' AND p.qiymat = o.tur)
                     OR (p.doira = 'partiya' AND p.qiymat = o.partiya))
  -- Nor a row held behind an earlier message of its chat (status_per_queue's held).
  AND (o.tartib IS NULL OR o.suhbat IS NULL OR NOT EXISTS (
           SELECT 1 FROM outbox e
           WHERE coalesce(e.bot, ':' || e.navbat) IN (coalesce(o.bot, ':' || o.navbat), ':' || o.navbat)
             AND e.suhbat = o.suhbat AND e.ustuvorlik = o.ustuvorlik
             AND e.holat IN ('kutmoqda', 'bajarilmoqda')
             AND e.tartib IS NOT NULL AND e.suhbat IS NOT NULL
             AND (e.tartib, e.id) < (o.tartib, o.id)
             AND e.tinch = o.tinch AND (e.tinch_oldin IS NULL OR e.keyingi_urinish <= now())))
GROUP BY o.navbat;

-- name: stop_paid_lane
-- Telegram refused a paid broadcast for the bot's Stars balance or its audience: the bot's paid
-- lane stops for every relay for :seconds (its rows wait; the free lane goes on), with
-- Telegram's words. Returns a row only when the lane was running (who stopped it says so).
UPDATE bot_holati
SET pullik_pauza_tugashi = now() + make_interval(secs => :seconds), pullik_pauza_sababi = :reason
WHERE bot = :bot AND pullik_pauza_tugashi <= now()
RETURNING pullik_pauza_tugashi AS until;

-- name: resume_paid_lane
-- An operator resumes a stopped paid lane (outbox resume --paid BOT): the relays are woken.
WITH lifted AS (
    UPDATE bot_holati SET pullik_pauza_tugashi = '-infinity', pullik_pauza_sababi = NULL
    WHERE bot = :bot AND pullik_pauza_tugashi > now()
    RETURNING 1
)
SELECT true AS resumed FROM lifted, pg_notify(:channel, '') AS woken;

-- name: paid_lane_stops
-- The bots whose paid lane is stopped now: until when, and why.
SELECT bot, pullik_pauza_tugashi AS until, pullik_pauza_sababi AS reason
FROM bot_holati WHERE pullik_pauza_tugashi > now() ORDER BY bot;
