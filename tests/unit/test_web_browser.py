"""The operator's page in a real headless Chromium, as a person on call uses it.

Chromium and its driver come from the distribution (``apt-get install chromium
chromium-driver``; ``.ci/run`` installs them); selenium drives them. Without them these tests
skip and say why. ``OUTBOX_SCREENSHOTS=1`` also writes docs/web-desktop.png and
docs/web-phone.png (the pictures of docs/web.md).

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_web_browser.py``.
"""

from __future__ import annotations

import shutil

import pytest

from tests.support.webpage import chromium


@pytest.mark.parametrize(
    ("present", "named"),
    [({"chromedriver"}, "chromium not installed"), ({"chromium"}, "chromedriver not installed")],
)
def test_a_missing_browser_tool_is_named(
    monkeypatch: pytest.MonkeyPatch, present: set[str], named: str
) -> None:
    monkeypatch.delenv("OUTBOX_REQUIRE_SYSTEM_TOOLS", raising=False)
    monkeypatch.setattr(
        shutil, "which", lambda name: f"/usr/bin/{name}" if name in present else None
    )
    with pytest.raises(pytest.skip.Exception, match=named):
        chromium()
