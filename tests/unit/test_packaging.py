"""The wheel's hand-kept package list against the folders in the repository: every folder of
the packages is listed, except the tests of the vazifalar domain (reminders/tests), which the
wheel never ships; tests/e2e/test_packaging.py builds the wheel and looks inside.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_packaging.py``.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path
from typing import Any

from tests.support import ROOT, is_test_module

# Folders inside the packages that are not shipped: the domain's tests beside its code.
NOT_SHIPPED = (ROOT / "reminders" / "tests",)


def _setuptools() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(config["tool"]["setuptools"])


def _folder(package: str, package_dir: dict[str, str]) -> Path:
    """Where ``package`` lives in the repository, the package-dir mapping applied."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        mapped = package_dir.get(".".join(parts[:n]))
        if mapped is not None:
            return ROOT.joinpath(mapped, *parts[n:])
    return ROOT.joinpath(*parts)


def _shipped(path: Path) -> bool:
    return not any(path == kept or kept in path.parents for kept in NOT_SHIPPED)


def _shipped_folders(folder: Path) -> list[Path]:
    inside = (p for p in folder.rglob("*") if p.is_dir() and p.name != "__pycache__")
    return [folder, *(p for p in inside if _shipped(p))]


def test_every_folder_of_the_packages_is_listed() -> None:
    # setuptools treats a folder of data files (templates, static) as a package: one missing
    # from the list is still shipped today, with a warning on every install, and dropped by a
    # future setuptools.
    config = _setuptools()
    package_dir = config.get("package-dir", {})
    listed = {_folder(p, package_dir): p for p in config["packages"]}
    tops = {p for p in config["packages"] if "." not in p} | set(package_dir)
    present = {f for top in tops for f in _shipped_folders(_folder(top, package_dir))}
    missing = sorted(str(f.relative_to(ROOT)) for f in present - set(listed))
    assert missing == [], f"folders missing from [tool.setuptools] packages: {missing}"
    absent = sorted(p for f, p in listed.items() if not f.is_dir())
    assert absent == [], f"listed packages without a folder: {absent}"


def test_no_listed_package_holds_a_test_module() -> None:
    config = _setuptools()
    package_dir = config.get("package-dir", {})
    listed = [p for p in config["packages"] if "tests" in p.split(".")]
    assert listed == [], f"test packages listed in [tool.setuptools] packages: {listed}"
    modules = [
        str(path.relative_to(ROOT))
        for package in config["packages"]
        for path in _folder(package, package_dir).glob("*.py")
        if is_test_module(path.name)
    ]
    assert modules == [], f"test modules inside shipped packages: {modules}"


def test_the_domains_tests_are_in_its_package_folder_and_not_shipped() -> None:
    # The check above would pass vacuously if reminders/tests moved: it must be where it is.
    assert (ROOT / "reminders" / "tests" / "__init__.py").is_file()
    assert not any(_shipped(folder) for folder in NOT_SHIPPED)
    assert [is_test_module(n) for n in ("reminders/tests/db/x.py", "a/conftest.py")] == [True, True]
    assert not is_test_module("reminders/testing.py")


def test_every_data_file_of_the_packages_is_in_package_data() -> None:
    config = _setuptools()
    package_dir = config.get("package-dir", {})
    data = config.get("package-data", {})
    unshipped = []
    for package in config["packages"]:
        folder = _folder(package, package_dir)
        for path in folder.iterdir():
            if path.is_dir() or path.suffix in {".py", ".pyc"}:
                continue
            if not any(fnmatch.fnmatch(path.name, pattern) for pattern in data.get(package, [])):
                unshipped.append(str(path.relative_to(ROOT)))
    assert unshipped == [], f"files no package-data pattern ships: {sorted(unshipped)}"


def test_the_async_extra_brings_greenlet() -> None:
    # SQLAlchemy 2.1 no longer installs greenlet by itself, and its asyncio extension (which
    # the *_async enqueue twins run on) cannot start without it: the extra must ask for it.
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras: dict[str, list[str]] = config["project"]["optional-dependencies"]
    wanted = {"greenlet", "sqlalchemy[asyncio]"}
    names = {r.split(">")[0].split("=")[0].strip().lower() for r in extras["async"]}
    assert names & wanted, extras["async"]
    own = [r.split("[", 1)[1] for r in extras["dev"] if r.startswith("outbox-telegram[")]
    assert any("async" in r.split("]")[0].split(",") for r in own), extras["dev"]
