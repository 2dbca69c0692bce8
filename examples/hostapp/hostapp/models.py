"""The shop's own tables. The outbox's tables are not here: they belong to outbox-telegram."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customer"

    id: Mapped[int] = mapped_column(sa.BigInteger, sa.Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(sa.Text)
    chat_id: Mapped[int] = mapped_column(sa.BigInteger)
    orders: Mapped[list[Order]] = relationship(back_populates="customer")


class Order(Base):
    __tablename__ = "shop_order"

    id: Mapped[int] = mapped_column(sa.BigInteger, sa.Identity(), primary_key=True)
    customer_id: Mapped[int] = mapped_column(sa.ForeignKey("customer.id"), index=True)
    item: Mapped[str] = mapped_column(sa.Text)
    placed_at: Mapped[datetime] = mapped_column(
        sa.DateTime(timezone=True), server_default=sa.func.now()
    )
    customer: Mapped[Customer] = relationship(back_populates="orders")
