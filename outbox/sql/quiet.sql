-- A chat's quiet hours, changed in the app's transaction (outbox.quiet_hours): text()
-- statements with explicit casts, as app.sql's. Neither commits.
--
-- A change releases the chat's held rows (due again from the moment they were due before
-- their hours held them) and locks every waiting row of the chat that asks for quiet hours:
-- a claim meanwhile skips them, and a claim holding them is waited for and then undone, so
-- no claim judges them by the hours replaced. outbox_tinch_idx finds them by chat.

-- name: set_quiet_hours
-- :boshi NULL clears the chat's hours.
WITH gone AS (
    DELETE FROM tinch_soatlar
    WHERE CAST(:boshi AS time) IS NULL
      AND bot = CAST(:bot AS text) AND chat = CAST(:chat AS text)
),
hours AS (
    INSERT INTO tinch_soatlar (bot, chat, boshi, oxiri, tz)
    SELECT CAST(:bot AS text), CAST(:chat AS text), CAST(:boshi AS time), CAST(:oxiri AS time),
           CAST(:tz AS text)
    WHERE CAST(:boshi AS time) IS NOT NULL
    ON CONFLICT (bot, chat) DO UPDATE
    SET boshi = excluded.boshi, oxiri = excluded.oxiri, tz = excluded.tz, yangilangan = now()
)
UPDATE outbox
SET keyingi_urinish = coalesce(tinch_oldin, keyingi_urinish), tinch_oldin = NULL,
    yangilangan = CASE WHEN tinch_oldin IS NULL THEN yangilangan ELSE now() END
WHERE suhbat = CAST(:chat AS text) AND tinch AND holat = 'kutmoqda'
  AND coalesce(bot, '') = CAST(:bot AS text);

-- name: quiet_hours_of
SELECT boshi, oxiri, tz FROM tinch_soatlar
WHERE bot = CAST(:bot AS text) AND chat = CAST(:chat AS text);
