"""The tiers (a pytest plugin, loaded by the repository's ``conftest.py``): a test's tier is the
folder it is in.

``tests/unit``, ``tests/db`` and ``tests/e2e`` (and the same three under ``reminders/tests``)
hold the tests of the tiers ``unit`` (no database, no process of its own), ``db`` (a real
PostgreSQL, in the test's process) and ``e2e`` (processes, ``kill -9``, Alembic, PgBouncer, a
browser). Each test gets its folder's marker, so ``pytest -m unit`` selects the unit tier;
``make check`` runs ``unit`` and ``db``, ``make test`` everything. ``slow`` marks the crash
and restart tests, all end to end.

The folders stay honest: a test outside them, a tier marker that contradicts the folder, a unit
test that asks for a database fixture or a test short of the end-to-end tier that asks for a
fixture starting processes fails with a message that says where it belongs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fixtures import DB_FIXTURES, E2E_FIXTURES

__all__ = ["TIERS", "tier_of"]

TIERS = ("unit", "db", "e2e")
_TIER = pytest.StashKey[str]()
# The order tests start in: the long ones first, so that in parallel no worker is left with
# one at the end.
_RANK = {"slow": 0, "e2e": 1, "db": 2, "unit": 3}


def tier_of(path: Path) -> str | None:
    """The tier of a test file: the folder after the nearest ``tests`` folder above it."""
    parts = path.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i - 1] == "tests" and parts[i] in TIERS:
            return parts[i]
    return None


def _misplaced(item: pytest.Item, tier: str | None) -> str | None:
    where = "tests/<tier>/ or reminders/tests/<tier>/, <tier> one of unit, db, e2e"
    if tier is None:
        return f"{item.nodeid}: not in a tier folder; a test lives in {where}"
    marked = [m.name for m in item.iter_markers() if m.name in TIERS and m.name != tier]
    if marked:
        return f"{item.nodeid}: marked {marked[0]} in the {tier} folder; its folder is its tier"
    if tier != "e2e" and item.get_closest_marker("slow") is not None:
        return f"{item.nodeid}: marked slow in the {tier} folder; slow tests are end to end"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    problems = []
    for item in items:
        tier = tier_of(item.path)
        problem = _misplaced(item, tier)
        if problem is not None or tier is None:
            problems.append(problem)
            continue
        item.stash[_TIER] = tier
        item.add_marker(tier)
    if problems:
        raise pytest.UsageError("\n".join(p for p in problems if p))

    def rank(item: pytest.Item) -> int:
        slow = item.get_closest_marker("slow") is not None
        return _RANK["slow" if slow else item.stash[_TIER]]

    items.sort(key=rank)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture is set up: a unit test asking for a database, or a unit or db test
    asking for relay processes, fails here (and gets neither)."""
    tier = item.stash.get(_TIER, None)
    asked = set(getattr(item, "fixturenames", ()))
    if tier == "unit" and asked & DB_FIXTURES:
        names = ", ".join(sorted(asked & DB_FIXTURES))
        pytest.fail(
            f"a unit test asks for a database ({names}): move it to the db folder of its tests",
            pytrace=False,
        )
    if tier in {"unit", "db"} and asked & E2E_FIXTURES:
        names = ", ".join(sorted(asked & E2E_FIXTURES))
        pytest.fail(
            f"a {tier} test asks for processes ({names}): move it to the e2e folder of its tests",
            pytrace=False,
        )
