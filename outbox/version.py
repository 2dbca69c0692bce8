"""The installed package's version, one source for ``--version``, the logs and the register."""

from __future__ import annotations

import functools
from importlib import metadata

__all__ = ["DISTRIBUTION", "package_version"]

DISTRIBUTION = "outbox-telegram"


@functools.cache
def package_version() -> str:
    """The version pip installed (pyproject.toml's); ``unknown`` when run from a bare copy."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"
