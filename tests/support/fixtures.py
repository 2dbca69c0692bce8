"""The shared fixtures (a pytest plugin, loaded by the repository's ``conftest.py`` for
``tests/`` and ``reminders/tests/`` alike): a real PostgreSQL, one migrated template, a fresh
database per test, the fake Bot API and relay processes.

The server is the embedded one (pgserver, run without fsync) unless
``OUTBOX_TEST_DATABASE_URL`` names another. Each test gets its own database cloned from a
migrated template, which keeps tests independent even when they run relays in other processes,
or run in parallel (pytest-xdist: each worker its own embedded server and template; on a server
named by the variable, each worker its own template).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from outbox import schema as outbox_schema
from outbox.db import create_engine, normalize_url, with_database
from outbox.embedded import embedded_url
from outbox_testing.fake_telegram import FakeTelegram
from reminders.migrate import migrate_all
from tests.support import TEST_TOKEN, Relays, relay_env

TEMPLATE = f"outbox_template_{os.getpid()}"
_counter = itertools.count()

# The fixtures that give a test a database (directly or through another fixture): a unit test
# may ask for none of them (tests.support.tiers).
DB_FIXTURES = frozenset({"server_url", "template_url", "db_url", "empty_db_url", "engine"})
# The fixtures that start processes: only an end-to-end test may ask for them.
E2E_FIXTURES = frozenset({"relays"})


# Where the suite's own servers keep their files: a memory file system when the machine has
# one with room. On a disk, creating and dropping each test's database (a copy of some 300
# files, unlinked afterwards) cost about 220 ms of kernel time a clone even without fsync; in
# memory about 15 ms.
_MEMORY_DIR = Path("/dev/shm")
_MEMORY_ROOM = 2 << 30


def _server_parent() -> str | None:
    """The folder for the suite's servers: OUTBOX_TEST_DATA_DIR, else memory, else the
    system's temporary folder (None)."""
    given = os.environ.get("OUTBOX_TEST_DATA_DIR")
    if given:
        return given
    try:
        if os.access(_MEMORY_DIR, os.W_OK) and shutil.disk_usage(_MEMORY_DIR).free > _MEMORY_ROOM:
            return str(_MEMORY_DIR)
    except OSError:
        pass
    return None


def _given_server() -> str | None:
    """A server named by OUTBOX_TEST_DATABASE_URL, left as it is configured; else the suite
    starts its own."""
    return os.environ.get("OUTBOX_TEST_DATABASE_URL")


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    given = _given_server()
    if given:
        yield normalize_url(given)
        return
    with tempfile.TemporaryDirectory(prefix="outbox-test-", dir=_server_parent()) as tmp:
        url = embedded_url(Path(tmp))
        # A throwaway server: no test survives an operating system crash, so nothing needs
        # its writes on the disk before the call returns. A server named by
        # OUTBOX_TEST_DATABASE_URL is left as it is configured.
        with _admin(url) as conn:
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("SELECT pg_reload_conf()")
        try:
            yield url
        finally:
            _stop_embedded(Path(tmp) / "pgdata")


def _stop_embedded(pgdata: Path) -> None:
    """Stop the suite's server before its folder goes: pgserver stops it at exit by reading a
    file in that folder, and without the file it would leave the server running (in memory)."""
    import pgserver  # imported by embedded_url already

    pgserver.get_server(pgdata).cleanup()


def _admin(server: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(server, autocommit=True)


@pytest.fixture(scope="session")
def template_url(server_url: str) -> Iterator[str]:
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{TEMPLATE}"')
    url = with_database(server_url, TEMPLATE)
    migrate_all(url)
    yield url
    with _admin(server_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')


@contextlib.contextmanager
def _scratch_database(server: str, prefix: str, template: str | None = None) -> Iterator[str]:
    name = f"{prefix}_{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
    # On the suite's own server (no fsync, in memory) a file copy took 11 ms against 26 for the
    # default, which writes every page to the WAL; a given server keeps the default (a file
    # copy checkpoints twice).
    strategy = "" if _given_server() else " STRATEGY FILE_COPY"
    clause = f' TEMPLATE "{template}"{strategy}' if template else ""
    with _admin(server) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{clause}')
    try:
        yield with_database(server, name)
    finally:
        with _admin(server) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def db_url(server_url: str, template_url: str) -> Iterator[str]:
    """A freshly migrated database of the test's own."""
    with _scratch_database(server_url, "outbox_t", TEMPLATE) as url:
        yield url


@pytest.fixture
def empty_db_url(server_url: str) -> Iterator[str]:
    """A database without the schema, for 'run outbox migrate first' checks."""
    with _scratch_database(server_url, "outbox_empty") as url:
        yield url


@pytest.fixture
def engine(db_url: str) -> Iterator[sa.Engine]:
    eng = create_engine(db_url)
    yield eng
    eng.dispose()


@pytest.fixture
def schema_setting_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests of ``outbox.configure`` (and an in-process CLI's ``--schema``), which set a
    process-wide value: unset before, restored after."""
    monkeypatch.setattr(outbox_schema, "_configured", None)
    monkeypatch.delenv("OUTBOX_SCHEMA", raising=False)


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    """The fake Bot API on a free localhost port, accepting only TEST_TOKEN."""
    fake = FakeTelegram(token=TEST_TOKEN).start_in_thread()
    yield fake
    fake.stop_thread()


@pytest.fixture
def relays(db_url: str, fake_telegram: FakeTelegram, tmp_path: Path) -> Iterator[Relays]:
    """Relay processes against ``db_url`` and the fake; none outlives the test."""
    with Relays(relay_env(db_url, fake_telegram.api_url), tmp_path).running() as group:
        yield group
