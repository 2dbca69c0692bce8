"""Version 0.1's only revision (copied unchanged but for this line): outbox, markers, domain.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE outbox (
            id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            tur             text NOT NULL DEFAULT 'eslatma',
            -- The sent-marker key; a default keeps the lesson's plain INSERTs working.
            kalit           text NOT NULL DEFAULT gen_random_uuid()::text UNIQUE,
            payload         jsonb NOT NULL,
            holat           text NOT NULL DEFAULT 'kutmoqda'
                            CHECK (holat IN ('kutmoqda', 'bajarilmoqda', 'bajarildi', 'xato')),
            urinish         integer NOT NULL DEFAULT 0 CHECK (urinish >= 0),
            keyingi_urinish timestamptz NOT NULL DEFAULT now(),
            band_vaqti      timestamptz,
            oxirgi_xato     text,
            -- Every failure, kept when a replay clears oxirgi_xato.
            tarix           jsonb NOT NULL DEFAULT '[]'::jsonb,
            yaratilgan      timestamptz NOT NULL DEFAULT now(),
            yangilangan     timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    # The claim reads only due pending rows: done rows cost the claim nothing.
    op.execute(
        "CREATE INDEX outbox_kutmoqda_idx ON outbox (keyingi_urinish, id) WHERE holat = 'kutmoqda'"
    )
    # The reaper looks only at claimed rows.
    op.execute("CREATE INDEX outbox_band_idx ON outbox (band_vaqti) WHERE holat = 'bajarilmoqda'")
    # Operators list failures; retention deletes old done rows.
    op.execute("CREATE INDEX outbox_xato_idx ON outbox (id) WHERE holat = 'xato'")
    op.execute(
        "CREATE INDEX outbox_bajarildi_idx ON outbox (yangilangan) WHERE holat = 'bajarildi'"
    )
    # A hot queue table: every state change leaves a dead row version (the indexed columns
    # change, so updates cannot be HOT). Vacuum after 1% dead rows rather than the default 20%,
    # without the cost-based pauses, so the table and its partial indexes stay small.
    op.execute(
        "ALTER TABLE outbox SET (autovacuum_vacuum_scale_factor = 0.01, "
        "autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, "
        "autovacuum_vacuum_cost_delay = 0)"
    )
    # One notification per transaction: Postgres folds identical NOTIFYs of one transaction.
    op.execute(
        """
        CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('outbox', '');
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        "CREATE TRIGGER outbox_notify AFTER INSERT ON outbox "
        "FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify()"
    )
    op.execute(
        """
        CREATE TABLE yuborilgan (
            kalit           text PRIMARY KEY,
            chat_id         bigint NOT NULL,
            message_id      bigint NOT NULL,
            yuborilgan_vaqt timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX yuborilgan_vaqt_idx ON yuborilgan (yuborilgan_vaqt)")
    op.execute(
        """
        CREATE TABLE foydalanuvchi (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            ism         text NOT NULL CHECK (ism <> ''),
            chat_id     bigint NOT NULL,
            vaqt_zonasi text NOT NULL DEFAULT 'Asia/Tashkent',
            yaratilgan  timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(
        """
        CREATE TABLE vazifa (
            id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            foydalanuvchi_id bigint NOT NULL REFERENCES foydalanuvchi (id) ON DELETE CASCADE,
            sarlavha         text NOT NULL CHECK (sarlavha <> ''),
            muddat           timestamptz NOT NULL,
            -- Reminder offsets before muddat, in seconds (default: one hour).
            eslatma_oldin    integer[] NOT NULL DEFAULT '{3600}',
            bajarildi        boolean NOT NULL DEFAULT false,
            yaratilgan       timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("CREATE INDEX vazifa_foydalanuvchi_idx ON vazifa (foydalanuvchi_id)")


def downgrade() -> None:
    op.execute("DROP TABLE vazifa")
    op.execute("DROP TABLE foydalanuvchi")
    op.execute("DROP TABLE yuborilgan")
    op.execute("DROP TABLE outbox")
    op.execute("DROP FUNCTION outbox_notify()")
