"""The test suite's own machinery: system tools that CI requires, and the tiers (a test's tier
is its folder; tests/support/tiers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import missing_tool
from tests.support.tiers import tier_of


def test_a_missing_tool_skips_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUTBOX_REQUIRE_SYSTEM_TOOLS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="pgbouncer not installed"):
        missing_tool("pgbouncer not installed")


def test_a_missing_tool_fails_where_ci_requires_the_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_REQUIRE_SYSTEM_TOOLS", "1")
    with pytest.raises(pytest.fail.Exception, match="pgbouncer not installed"):
        missing_tool("pgbouncer not installed")


# --- the tiers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "tier"),
    [
        ("tests/unit/test_relay.py", "unit"),
        ("tests/db/test_relay.py", "db"),
        ("tests/e2e/test_relay.py", "e2e"),
        ("reminders/tests/db/test_reminders.py", "db"),
        ("reminders/tests/e2e/test_bot.py", "e2e"),
        ("tests/test_relay.py", None),
        ("tests/support/test_relay.py", None),
        ("unit/test_relay.py", None),
    ],
)
def test_a_tests_tier_is_its_folder(path: str, tier: str | None) -> None:
    assert tier_of(Path("/repo") / path) == tier


# An inner session with the tiers plugin and stand-ins for the shared fixtures (no database is
# made: the stand-ins only have the names of the real ones).
_PLUGINS = """
import pytest

pytest_plugins = ["tests.support.tiers"]


@pytest.fixture
def db_url() -> str:
    return "postgresql://nowhere/db"


@pytest.fixture
def relays() -> str:
    return "relay processes"
"""


def _suite(pytester: pytest.Pytester, files: dict[str, str]) -> None:
    pytester.makeconftest(_PLUGINS)
    for name, body in files.items():
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)


def test_the_folder_gives_the_marker(pytester: pytest.Pytester) -> None:
    plain = "def test_it() -> None:\n    pass\n"
    _suite(
        pytester,
        {
            "tests/unit/test_a.py": plain,
            "tests/db/test_b.py": "def test_it(db_url: str) -> None:\n    assert db_url\n",
            "tests/e2e/test_c.py": "def test_it(relays: str) -> None:\n    assert relays\n",
        },
    )
    for tier, module in (("unit", "test_a"), ("db", "test_b"), ("e2e", "test_c")):
        result = pytester.runpytest_inprocess("-m", tier, "-v", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=1, deselected=2)
        result.stdout.fnmatch_lines([f"tests/{tier}/{module}.py::test_it PASSED*"])


def test_a_unit_test_asking_for_a_database_fails_and_says_where_it_belongs(
    pytester: pytest.Pytester,
) -> None:
    _suite(
        pytester,
        {"tests/unit/test_a.py": "def test_it(db_url: str) -> None:\n    assert db_url\n"},
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*a unit test asks for a database (db_url)*db folder*"])


def test_a_db_test_asking_for_relay_processes_fails(pytester: pytest.Pytester) -> None:
    _suite(
        pytester,
        {"tests/db/test_a.py": "def test_it(relays: str) -> None:\n    assert relays\n"},
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*a db test asks for processes (relays)*e2e folder*"])


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("tests/test_a.py", "def test_it() -> None:\n    pass\n", "*not in a tier folder*"),
        (
            "tests/unit/test_a.py",
            "import pytest\n\n\n@pytest.mark.e2e\ndef test_it() -> None:\n    pass\n",
            "*marked e2e in the unit folder*",
        ),
        (
            "tests/db/test_a.py",
            "import pytest\n\n\n@pytest.mark.slow\ndef test_it() -> None:\n    pass\n",
            "*marked slow in the db folder*",
        ),
    ],
    ids=["outside the tiers", "marked another tier", "slow short of e2e"],
)
def test_a_misplaced_test_stops_the_run(
    pytester: pytest.Pytester, name: str, body: str, says: str
) -> None:
    _suite(pytester, {name: body})
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([says])
