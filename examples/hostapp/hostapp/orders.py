"""Placing an order: the order row and its confirmation message commit together, or neither.

``outbox.enqueue`` joins the session's transaction and never commits; the relay sends the
message once the transaction has committed, and never if it rolls back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session

import outbox
from hostapp.models import Customer, Order

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


def add_customer(session: Session, *, name: str, chat_id: int) -> Customer:
    customer = Customer(name=name, chat_id=chat_id)
    session.add(customer)
    session.flush()
    return customer


def place_order(session: Session, *, customer_id: int, item: str) -> Order:
    customer = session.get_one(Customer, customer_id)
    order = Order(customer=customer, item=item)
    session.add(order)
    session.flush()  # the order's id names its message
    outbox.enqueue(
        session,
        key=f"order-{order.id}",
        payload={"chat_id": customer.chat_id, "text": f"Order {order.id}: {item} is confirmed"},
    )
    return order


def cancel_order(session: Session, order_id: int) -> bool:
    """Delete the order and withdraw its confirmation if it has not gone out yet."""
    session.execute(sa.delete(Order).where(Order.id == order_id))
    return outbox.cancel(session, [f"order-{order_id}"]) == 1


async def place_order_async(session: AsyncSession, *, customer_id: int, item: str) -> Order:
    """``place_order`` for an asyncio app (psycopg or asyncpg)."""
    customer = await session.get_one(Customer, customer_id)
    order = Order(customer=customer, item=item)
    session.add(order)
    await session.flush()
    await outbox.enqueue_async(
        session,
        key=f"order-{order.id}",
        payload={"chat_id": customer.chat_id, "text": f"Order {order.id}: {item} is confirmed"},
    )
    return order
