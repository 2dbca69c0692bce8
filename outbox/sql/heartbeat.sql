-- The relay's own row in the fleet's register (relaylar). Every statement stands alone
-- (autocommit, no session state), so all of it works through PgBouncer in transaction pooling.

-- name: relay_heartbeat
-- Insert on the first beat (and again if maintenance forgot the row while the relay could not
-- reach the database); update on every other beat. Its bots change as its lanes do.
INSERT INTO relaylar
    (id, host, pid, versiya, navbatlar, botlar, rad_botlar, signal_oraligi, jarayonda, jami)
VALUES (:id, :host, :pid, :version, :queues, :bots, :rejected,
        :interval, :in_flight, CAST(:totals AS jsonb))
ON CONFLICT (id) DO UPDATE
SET oxirgi_signal = now(), jarayonda = EXCLUDED.jarayonda, jami = EXCLUDED.jami,
    botlar = EXCLUDED.botlar, rad_botlar = EXCLUDED.rad_botlar;

-- name: forget_relay
-- A relay that stops cleanly takes its row with it.
DELETE FROM relaylar WHERE id = :id;

-- name: forget_gone_relays
DELETE FROM relaylar WHERE oxirgi_signal < now() - make_interval(secs => :after);
