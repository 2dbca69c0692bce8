"""The test suite's own machinery: system tools that CI requires, and the tiers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import E2E_NAMES, _names_reached
from tests.support import Relays, missing_tool, wait_until


def test_a_missing_tool_skips_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OUTBOX_REQUIRE_SYSTEM_TOOLS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="pgbouncer not installed"):
        missing_tool("pgbouncer not installed")


def test_a_missing_tool_fails_where_ci_requires_the_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTBOX_REQUIRE_SYSTEM_TOOLS", "1")
    with pytest.raises(pytest.fail.Exception, match="pgbouncer not installed"):
        missing_tool("pgbouncer not installed")


# --- the tiers: what a test reaches through the helpers of the test modules ------------------


class _Harness:
    def start(self) -> None:
        _start_relays()


def _start_relays() -> int:
    return len(Relays({}, Path()).started)  # never called


def _plain() -> int:
    return len("no process")


def test_a_test_reaching_a_process_through_helpers_and_classes_is_end_to_end() -> None:
    def through_a_class() -> None:
        _Harness().start()

    def through_a_lambda() -> None:
        wait_until(lambda: _start_relays() == 0, 1, "a relay")

    for test in (through_a_class, through_a_lambda):
        assert "Relays" in _names_reached([test]) & E2E_NAMES


def test_a_test_reaching_no_process_is_not_end_to_end() -> None:
    def plain() -> None:
        _plain()

    assert not _names_reached([plain]) & E2E_NAMES
