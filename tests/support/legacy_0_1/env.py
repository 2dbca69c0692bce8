"""Version 0.1's Alembic environment, kept to build the databases its users have today."""

from __future__ import annotations

from alembic import context

from outbox.db import create_engine

url = context.config.get_main_option("sqlalchemy.url")
if url is None:
    raise RuntimeError("outbox.migrate sets sqlalchemy.url before running Alembic")

engine = create_engine(url)
with engine.connect() as connection:
    context.configure(connection=connection, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
