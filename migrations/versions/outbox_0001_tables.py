"""The outbox and its sent markers.

Revision ID: outbox_0001
Revises:
Create Date: 2026-11-29

Every name is qualified by the outbox's schema (``outbox.migrate.target_schema``), so this
history runs the same through ``outbox migrate`` and inside a host's own Alembic run.
"""

from __future__ import annotations

from alembic import op

from outbox.migrate import create_schema_sql, revision_comment, target_schema

revision = "outbox_0001"
down_revision = None
branch_labels = ("outbox",)
depends_on = None


def upgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(create_schema_sql(target_schema()))
    op.execute(
        f"""
        CREATE TABLE {s}.outbox (
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
        f"CREATE INDEX outbox_kutmoqda_idx ON {s}.outbox (keyingi_urinish, id) "
        "WHERE holat = 'kutmoqda'"
    )
    # The reaper looks only at claimed rows.
    op.execute(
        f"CREATE INDEX outbox_band_idx ON {s}.outbox (band_vaqti) WHERE holat = 'bajarilmoqda'"
    )
    # Operators list failures; retention deletes old done rows.
    op.execute(f"CREATE INDEX outbox_xato_idx ON {s}.outbox (id) WHERE holat = 'xato'")
    op.execute(
        f"CREATE INDEX outbox_bajarildi_idx ON {s}.outbox (yangilangan) WHERE holat = 'bajarildi'"
    )
    # A hot queue table: every state change leaves a dead row version (the indexed columns
    # change, so updates cannot be HOT). Vacuum after 1% dead rows rather than the default 20%,
    # without the cost-based pauses, so the table and its partial indexes stay small.
    op.execute(
        f"ALTER TABLE {s}.outbox SET (autovacuum_vacuum_scale_factor = 0.01, "
        "autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, "
        "autovacuum_vacuum_cost_delay = 0)"
    )
    # One notification per transaction: Postgres folds identical NOTIFYs of one transaction.
    # The channel is named after the schema (outbox.schema.notify_channel), so two outboxes in
    # one database wake only their own relays.
    op.execute(
        f"""
        CREATE FUNCTION {s}.outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify(CASE WHEN TG_TABLE_SCHEMA = 'public' THEN 'outbox'
                                   ELSE 'outbox_' || TG_TABLE_SCHEMA END, '');
            RETURN NULL;
        END
        $$
        """
    )
    op.execute(
        f"CREATE TRIGGER outbox_notify AFTER INSERT ON {s}.outbox "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {s}.outbox_notify()"
    )
    op.execute(
        f"""
        CREATE TABLE {s}.yuborilgan (
            kalit           text PRIMARY KEY,
            chat_id         bigint NOT NULL,
            message_id      bigint NOT NULL,
            yuborilgan_vaqt timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute(f"CREATE INDEX yuborilgan_vaqt_idx ON {s}.yuborilgan (yuborilgan_vaqt)")
    op.execute(revision_comment(revision))


def downgrade() -> None:
    s = f'"{target_schema()}"'
    op.execute(f"DROP TABLE {s}.yuborilgan")
    op.execute(f"DROP TABLE {s}.outbox")
    op.execute(f"DROP FUNCTION {s}.outbox_notify()")
