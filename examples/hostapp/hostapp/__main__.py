"""``python -m hostapp``: the shop's command line (what its web handlers would do).

python -m hostapp customer NAME CHAT_ID      prints the customer's id
python -m hostapp order CUSTOMER_ID ITEM     prints the order's id
python -m hostapp order-async CUSTOMER_ID ITEM [--driver asyncpg]
python -m hostapp cancel ORDER_ID
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

from sqlalchemy.orm import Session

from hostapp import db, orders


async def _order_async(customer_id: int, item: str, driver: str) -> int:
    # Only the async path needs SQLAlchemy's asyncio support (greenlet).
    from sqlalchemy.ext.asyncio import AsyncSession  # noqa: PLC0415

    engine = db.async_engine(driver)
    try:
        async with AsyncSession(engine) as session, session.begin():
            order = await orders.place_order_async(session, customer_id=customer_id, item=item)
            return order.id
    finally:
        await engine.dispose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hostapp")
    sub = parser.add_subparsers(dest="command", required=True)
    customer = sub.add_parser("customer")
    customer.add_argument("name")
    customer.add_argument("chat_id", type=int)
    order = sub.add_parser("order")
    order.add_argument("customer_id", type=int)
    order.add_argument("item")
    order_async = sub.add_parser("order-async")
    order_async.add_argument("customer_id", type=int)
    order_async.add_argument("item")
    order_async.add_argument("--driver", choices=("psycopg", "asyncpg"), default="psycopg")
    cancel = sub.add_parser("cancel")
    cancel.add_argument("order_id", type=int)
    args = parser.parse_args(argv)

    if args.command == "order-async":
        print(asyncio.run(_order_async(args.customer_id, args.item, args.driver)))
        return 0
    engine = db.engine()
    try:
        with Session(engine) as session, session.begin():
            if args.command == "customer":
                print(orders.add_customer(session, name=args.name, chat_id=args.chat_id).id)
            elif args.command == "order":
                print(orders.place_order(session, customer_id=args.customer_id, item=args.item).id)
            else:
                withdrawn = orders.cancel_order(session, args.order_id)
                print("withdrawn" if withdrawn else "already sent")
    finally:
        engine.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
