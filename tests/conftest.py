"""Shared fixtures: a real PostgreSQL, one migrated template, a fresh database per test; and
the tiers every test is sorted into.

The server is the embedded one (pgserver) unless ``OUTBOX_TEST_DATABASE_URL`` names another.
Each test gets its own database cloned from a migrated template, which costs a few tens of
milliseconds and keeps tests independent even when they run relays in other processes, or
run in parallel (pytest-xdist: each worker its own template, on one shared server).

Tiers (markers ``unit``, ``db``, ``e2e``; ``make check`` runs the first two, ``make test``
all): a test marked with one of them is in that tier. Otherwise it is ``e2e`` if it is marked
``slow`` or reaches (itself, through its fixtures, or through helpers and classes of the test
modules) anything that runs a relay, the bot, the web page or a server of its own in another
process, a browser or PgBouncer; ``db`` if it uses a database fixture; ``unit`` if neither.
So a new test lands in the right tier without a marker, unless it hides a process behind
something this walk cannot see (then mark it).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
import types
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
import sqlalchemy as sa

from outbox import schema as outbox_schema
from outbox.db import create_engine, normalize_url, with_database
from outbox.embedded import embedded_url
from outbox_testing.fake_telegram import FakeTelegram
from reminders.migrate import migrate_all

if TYPE_CHECKING:
    from tests.support import Relays

TEST_TOKEN = "123456:TEST-token_for-fake"
TEMPLATE = f"outbox_template_{os.getpid()}"
_counter = itertools.count()

TIERS = ("unit", "db", "e2e")
# Fixtures that give a test a database (directly or through another fixture).
DB_FIXTURES = frozenset({"server_url", "template_url", "db_url", "empty_db_url", "engine"})
# Names that start processes or tools of the end-to-end tier: relay processes, the web page
# or the bot as processes, private PostgreSQL servers, PgBouncer, a browser, the example host
# app's commands (Alembic), and plain ``Popen``.
E2E_NAMES = frozenset(
    {
        "relays",
        "Relays",
        "RelayProcess",
        "running_web",
        "OwnPostgres",
        "start_own_postgres",
        "PgBouncer",
        "webdriver",
        "Host",
        "Popen",
    }
)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _functions_of(value: object) -> Iterable[types.FunctionType]:
    """The functions a test helper is made of: itself, or a class's methods and properties."""
    if isinstance(value, types.FunctionType):
        yield value
    elif isinstance(value, type):
        for attribute in vars(value).values():
            member = (
                attribute.__func__
                if isinstance(attribute, (staticmethod, classmethod))
                else attribute
            )
            if isinstance(member, property):
                accessors = (member.fget, member.fset)
                yield from (f for f in accessors if isinstance(f, types.FunctionType))
            elif isinstance(member, types.FunctionType):
                yield member


def _names_reached(roots: Iterable[Any]) -> set[str]:
    """Every global name the roots refer to, following the helpers and classes of the test
    modules (``tests.*``) they reach."""
    names: set[str] = set()
    seen: set[int] = set()
    todo = [f for root in roots for f in _functions_of(root)]
    while todo:
        func = todo.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        found = _code_names(func.__code__)
        names |= found
        for name in found:
            value = func.__globals__.get(name)
            if getattr(value, "__module__", "").startswith("tests"):
                todo.extend(_functions_of(value))
    return names


def _tier(item: pytest.Item) -> str:
    explicit = [m.name for m in item.iter_markers() if m.name in TIERS]
    if explicit:
        return explicit[0]
    fixtures = set(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("slow") is not None or fixtures & E2E_NAMES:
        return "e2e"
    roots: list[Any] = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        roots.extend(d.func for d in defs if d.func.__module__.startswith("tests"))
    if _names_reached(r for r in roots if r is not None) & E2E_NAMES:
        return "e2e"
    return "db" if fixtures & DB_FIXTURES else "unit"


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope == "module" for ds in defs for d in ds)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank: dict[str, int] = {}
    for item in items:
        tier = _tier(item)
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)
        # Run in parallel (make check, make test: pytest-xdist with --dist loadgroup), the
        # tests sharing a module fixture (the demo's two runs) stay on one worker, so it runs once.
        if _shares_a_module_fixture(item):
            module = getattr(item, "module", None)
            item.add_marker(pytest.mark.xdist_group(getattr(module, "__name__", "module")))
        slow = item.get_closest_marker("slow") is not None
        rank[item.nodeid] = {"e2e": 0 if slow else 1, "db": 2}.get(tier, 3)
    # The long tests first, so that in parallel no worker is left with one at the end.
    items.sort(key=lambda item: rank[item.nodeid])


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    given = os.environ.get("OUTBOX_TEST_DATABASE_URL")
    if given:
        yield normalize_url(given)
        return
    with tempfile.TemporaryDirectory(prefix="outbox-test-") as tmp:
        yield embedded_url(Path(tmp))


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
    clause = f' TEMPLATE "{template}"' if template else ""
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
    from tests.support import Relays, relay_env

    with Relays(relay_env(db_url, fake_telegram.api_url), tmp_path).running() as group:
        yield group
