"""The vazifalar domain: users (foydalanuvchi) and their tasks (vazifa).

Revision ID: reminders_0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "reminders_0001"
down_revision = None
branch_labels = ("reminders",)
depends_on = None


def upgrade() -> None:
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
