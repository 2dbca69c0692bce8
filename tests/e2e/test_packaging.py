"""The wheel itself, built from a copy of the repository as ``pip wheel`` builds it: it holds the
packages and no test module (reminders/tests stays out, though it sits inside reminders/).

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_packaging.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support import ROOT, is_test_module

# What a build never reads: environments, caches, earlier builds, the database of `make demo`.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", ".outbox", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def test_the_wheel_holds_the_packages_and_no_test_module(tmp_path: Path) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE, symlinks=True)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", source],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = [n for n in names if n.endswith(".py")]
    tests = [n for n in modules if is_test_module(n)]
    assert tests == [], f"test modules in the wheel: {tests}"
    for expected in (
        "outbox/relay/__init__.py",
        "reminders/service.py",
        "outbox/migrations/env.py",
    ):
        assert expected in names
