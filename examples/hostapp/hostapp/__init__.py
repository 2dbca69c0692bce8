"""A small shop: customers place orders, and each order's Telegram confirmation goes through the
outbox in the same transaction as the order itself."""
