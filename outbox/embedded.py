"""The embedded PostgreSQL used when no database URL is given.

pgserver ships the PostgreSQL binaries inside a wheel and starts a private server in a data
folder, listening only on a Unix socket. Every process that asks for the same folder shares one
server; it stops when the last of them exits.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DATA_DIR", "embedded_url", "postgres_bin_dir"]

DEFAULT_DATA_DIR = Path(".outbox")

# Keeps the pgserver handles alive for the life of the process: dropping a handle stops the
# server once no other process uses it.
_servers: dict[Path, Any] = {}


def _data_dir() -> Path:
    return Path(os.environ.get("OUTBOX_DATA_DIR", DEFAULT_DATA_DIR))


def embedded_url(data_dir: Path | None = None) -> str:
    """Start (or join) the embedded server and return its connection URL."""
    pgdata = (data_dir or _data_dir()).resolve() / "pgdata"
    server = _servers.get(pgdata)
    if server is None:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset, which is normal on servers and CI.
            warnings.simplefilter("ignore")
            import pgserver  # noqa: PLC0415 - imported only when the embedded server is wanted

            server = pgserver.get_server(pgdata, cleanup_mode="stop")
        _servers[pgdata] = server
    return str(server.get_uri())


def postgres_bin_dir() -> Path:
    """The folder holding pgserver's ``pg_ctl``, ``initdb`` and friends."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver._commands import POSTGRES_BIN_PATH  # noqa: PLC0415

    return Path(POSTGRES_BIN_PATH)
