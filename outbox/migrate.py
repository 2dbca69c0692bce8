"""The outbox's own Alembic history, beside whatever history the host app keeps
(docs/adopting.md): run by ``outbox migrate`` (:func:`upgrade`) with its own version table
``outbox_alembic_version``, never touching the host's, or by the host's own Alembic run through
:data:`VERSIONS_LOCATION` (the branch ``outbox``, ids starting ``outbox_``). Either way the
host's autogenerate leaves the outbox's tables alone through :func:`include_object`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from alembic import command, context
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from outbox import queries, sql
from outbox.db import connect_errors, create_engine, normalize_url
from outbox.errors import SchemaMismatch
from outbox.schema import (
    COMMENT_PREFIX,
    DEFAULT_SCHEMA,
    KNOWN_REVISIONS,
    OWN_COLUMNS,
    current_schema,
    maintenance_lock_key,
    resolve_schema,
)

__all__ = [
    "BRANCH",
    "VERSIONS_LOCATION",
    "VERSION_TABLE",
    "Upgraded",
    "create_schema_sql",
    "include_object",
    "revision_comment",
    "run_migrations",
    "target_schema",
    "upgrade",
]

SCRIPT_PACKAGE = "outbox.migrations"
VERSION_TABLE = "outbox_alembic_version"
# For a host's alembic.ini: version_locations = %(here)s/versions outbox.migrations:versions
VERSIONS_LOCATION = f"{SCRIPT_PACKAGE}:versions"
BRANCH = "outbox"
# The tables a host's autogenerate leaves alone: the ones the named queries qualify, and the
# outbox's own version table.
OUTBOX_TABLES = frozenset({*sql.TABLES, VERSION_TABLE})
_SCHEMA_ATTRIBUTE = "outbox_schema"
_RESULT_ATTRIBUTE = "outbox_upgraded"
_LEGACY_REVISION = "0001"  # the single history of version 0.1, shared with the domain tables


@dataclass(frozen=True, slots=True)
class Upgraded:
    """What an upgrade did, as read under the migrators' lock (two at once: one creates, the
    other finds the tables up to date)."""

    before: str | None  # the revision the tables were at; None: there were none
    after: str | None

    def describe(self, tables: str) -> str:
        """One line for a person: created, upgraded, or already up to date."""
        if self.before is None and self.after is not None:
            return f"created {tables} (revision {self.after})"
        if self.before != self.after:
            return f"upgraded {tables} from revision {self.before} to {self.after}"
        return f"{tables} are up to date (revision {self.after})"


def _config(url: str, script_package: str, schema: str) -> Config:
    config = Config()
    config.set_main_option("script_location", f"{script_package}:")
    # Alembic reads the URL through ConfigParser, which treats % as interpolation.
    config.set_main_option("sqlalchemy.url", normalize_url(url).replace("%", "%%"))
    config.attributes[_SCHEMA_ATTRIBUTE] = schema
    return config


def upgrade(url: str, revision: str = "head", *, schema: str | None = None) -> Upgraded:
    """Bring the outbox tables at ``url`` up to ``revision``; safe to run again at any time.
    Refuses (``SchemaMismatch``) another program's ``outbox`` table; adopts version 0.1's."""
    schema = resolve_schema(schema)
    config = _config(url, SCRIPT_PACKAGE, schema)
    with connect_errors(url):
        _adopt_or_refuse(config, url, schema)
        command.upgrade(config, revision)
    return _upgraded(config)


def upgrade_history(
    url: str, script_package: str, revision: str = "head", *, stamp: bool = False
) -> Upgraded:
    """Run (or with ``stamp`` only record) another package's history through the same
    environment: an app's own, such as the vazifalar domain's."""
    config = _config(url, script_package, current_schema())
    with connect_errors(url):
        (command.stamp if stamp else command.upgrade)(config, revision)
    return _upgraded(config)


def _upgraded(config: Config) -> Upgraded:
    found = config.attributes.get(_RESULT_ATTRIBUTE)
    # A stamp runs no migrations: the environment reports nothing.
    return found if isinstance(found, Upgraded) else Upgraded(None, None)


@contextlib.contextmanager
def _migrators_lock(url: str, schema: str) -> Iterator[sa.Connection]:
    """One transaction holding the lock that lets one migrator of ``schema`` run at a time."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            lock = maintenance_lock_key(f"migrate:{schema}")
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock})
            yield conn
    finally:
        engine.dispose()


def _adopt_or_refuse(config: Config, url: str, schema: str) -> None:
    """Look at the schema before Alembic does: refuse a foreign ``outbox`` table, and record
    version 0.1's tables as at the first revision, in one transaction (a failure halfway leaves
    nothing half done) under the migrators' lock (two first runs adopt once)."""
    with _migrators_lock(url, schema) as conn:
        facts = queries.schema_facts_sync(conn, schema=schema)
        if facts is None or _has_table(conn, schema, VERSION_TABLE):
            return
        comment, columns = facts
        if comment.startswith(COMMENT_PREFIX):
            raise SchemaMismatch(
                f"the outbox tables in schema {schema} are migrated by the host's own "
                f"Alembic history (branch {BRANCH}): upgrade them there, not with "
                "`outbox migrate`"
            )
        if not columns >= OWN_COLUMNS:
            raise SchemaMismatch(
                f"schema {schema} already has a table named outbox that outbox-telegram "
                "did not create; put the outbox in a schema of its own with --schema or "
                "OUTBOX_SCHEMA"
            )
        conn.execute(sa.text(_comment_sql(schema, KNOWN_REVISIONS[0])))
        # Version 0.1 kept its one revision in the default alembic_version, where a host's
        # history would trip over it; the outbox's own version table replaces it.
        if _has_table(conn, schema, "alembic_version"):
            conn.execute(
                sa.text(
                    f'DELETE FROM "{schema}".alembic_version WHERE version_num = :legacy '
                    f'AND (SELECT count(*) FROM "{schema}".alembic_version) = 1'
                ),
                {"legacy": _LEGACY_REVISION},
            )
        versions = MigrationContext.configure(
            conn, opts={"version_table": VERSION_TABLE, "version_table_schema": schema}
        )
        versions.stamp(ScriptDirectory.from_config(config), KNOWN_REVISIONS[0])


def _has_table(conn: sa.Connection, schema: str, table: str) -> bool:
    found = conn.execute(sa.text("SELECT to_regclass(:name)"), {"name": f'"{schema}".{table}'})
    return found.scalar() is not None


def create_schema_sql(schema: str) -> str:
    """CREATE SCHEMA only if it is missing: even with IF NOT EXISTS, PostgreSQL first asks for
    the CREATE privilege on the database, which an app's user that owns its schema (or was
    granted CREATE on public) often does not have."""
    return (
        f"DO $$ BEGIN IF to_regnamespace('{schema}') IS NULL THEN "
        f'CREATE SCHEMA "{schema}"; END IF; END $$'
    )


def _comment_sql(schema: str, revision: str) -> str:
    return f"COMMENT ON TABLE \"{schema}\".outbox IS '{COMMENT_PREFIX}{revision}'"


# --- used by the migration environment and the revisions ---------------------------------------


def target_schema() -> str:
    """The schema the running migration works in: the one ``upgrade`` was given, or in a host's
    own Alembic run the configured one (``outbox.configure`` or ``OUTBOX_SCHEMA``)."""
    attributes: Mapping[str, Any] = context.config.attributes if context.config else {}
    return resolve_schema(attributes.get(_SCHEMA_ATTRIBUTE))


def revision_comment(revision: str) -> str:
    """The statement that records, in the outbox table's comment, the revision its schema is
    at; every revision ends with it (the relay and the commands check it)."""
    return _comment_sql(target_schema(), revision)


def run_migrations(*, version_table: str, own_schema: bool) -> None:
    """The body of an ``env.py``: online migrations with a version table of their own, in
    the outbox's schema with ``own_schema`` (else the search path's).

    One migrator at a time (two relays' start-up jobs may migrate together). The lock and every
    revision share one transaction: behind a transaction-pooling PgBouncer, a lock held across
    transactions would stay behind in a pooled server connection.
    """
    url = context.config.get_main_option("sqlalchemy.url")
    if url is None:
        raise RuntimeError("outbox.migrate sets sqlalchemy.url before running Alembic")
    schema = target_schema()
    with _migrators_lock(url, schema) as connection:
        if own_schema:
            connection.execute(sa.text(create_schema_sql(schema)))
        # Alembic runs inside the caller's transaction and leaves the commit to it.
        context.configure(
            connection=connection,
            version_table=version_table,
            version_table_schema=schema if own_schema else None,
        )
        migrations = context.get_context()
        before = migrations.get_current_revision()
        with context.begin_transaction():
            context.run_migrations()
        result = Upgraded(before, migrations.get_current_revision())
        context.config.attributes[_RESULT_ATTRIBUTE] = result


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """An ``include_object`` hook for the host's ``context.configure``: autogenerate and
    ``alembic check`` leave the outbox's tables (and their indexes and columns) alone."""
    table = obj if type_ == "table" else getattr(obj, "table", None)
    if table is None or table.name not in OUTBOX_TABLES:
        return True
    # Autogenerate names the connection's default schema None: public, or what the host's
    # search_path puts first (an app whose role defaults to its own schema).
    return (table.schema or _default_schema()) != current_schema()


def _default_schema() -> str:
    try:
        return context.get_context().dialect.default_schema_name or DEFAULT_SCHEMA
    # Not inside an Alembic run (a direct compare_metadata call): NameError before any run in
    # this process, AttributeError after one has ended.
    except (NameError, AttributeError):
        return DEFAULT_SCHEMA
