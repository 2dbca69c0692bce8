"""The shop's Alembic environment, as ``alembic init`` made it, plus one line for the outbox.

``include_object=outbox.migrate.include_object`` keeps autogenerate and ``alembic check`` away
from the outbox's tables, whether ``outbox migrate`` made them (alembic.ini) or this very
history did (alembic_included.ini lists the outbox's revisions in ``version_locations``).
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from hostapp.db import engine
from hostapp.models import Base

import outbox.migrate

if context.config.config_file_name is not None:
    fileConfig(context.config.config_file_name)


def run_migrations_online() -> None:
    connectable = engine()
    with connectable.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            include_object=outbox.migrate.include_object,
        )
        with context.begin_transaction():
            context.run_migrations()
    connectable.dispose()


run_migrations_online()
