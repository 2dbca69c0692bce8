"""Alembic environment and versions: one history for the outbox and the vazifalar tables."""
