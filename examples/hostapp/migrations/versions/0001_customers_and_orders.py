"""Customers and their orders.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

The id is the one outbox-telegram 0.1 gave its own first revision: the outbox's revisions are
now named outbox_*, in a version table of their own, so a host may number its history freely.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "customer",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "shop_order",
        sa.Column("id", sa.BigInteger(), sa.Identity(), primary_key=True),
        sa.Column("customer_id", sa.BigInteger(), sa.ForeignKey("customer.id"), nullable=False),
        sa.Column("item", sa.Text(), nullable=False),
        sa.Column(
            "placed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )
    op.create_index("ix_shop_order_customer_id", "shop_order", ["customer_id"])


def downgrade() -> None:
    op.drop_index("ix_shop_order_customer_id", table_name="shop_order")
    op.drop_table("shop_order")
    op.drop_table("customer")
