"""``outbox dev-db``: a development PostgreSQL that stays up, and its URL.

The embedded server (``OUTBOX_DATABASE_URL=embedded``) lives as long as the command that asked
for it. This one keeps it running until Ctrl-C or SIGTERM and prints a URL that psycopg and
SQLAlchemy both take, so that ``outbox migrate``, a relay and the app's own engine share it.
Development only: the server trusts every local user (pgserver's set-up).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

from outbox.commands.options import Commands
from outbox.errors import ConfigError, OutboxError

__all__ = ["DEFAULT_DEV_DB_DIR", "register"]

DEFAULT_DEV_DB_DIR = Path(".outbox") / "dev-db"
_EXTRA = "pip install 'outbox-telegram[embedded]'"
_CHECK_EVERY = 1.0  # seconds between looks at the server while it runs


def register(commands: Commands) -> None:
    dev_db = commands.add(
        "dev-db",
        _cmd_dev_db,
        "a development PostgreSQL (the embedded one) that runs until Ctrl-C; prints its URL",
        database=False,
    )
    dev_db.add(
        "--data-dir",
        env="OUTBOX_DEV_DB_DIR",
        default=str(DEFAULT_DEV_DB_DIR),
        help="the server's data folder (created on first use, kept between runs)",
        metavar="DIR",
    )
    dev_db.add_argument(
        "--print-url",
        action="store_true",
        help="print the URL of the server already running in --data-dir, and exit",
    )


def _pgserver() -> Any:
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset, which is normal on servers and CI.
        warnings.simplefilter("ignore")
        try:
            import pgserver  # noqa: PLC0415 - the embedded extra, only when asked for
        except ImportError:
            raise ConfigError(f"outbox dev-db needs the 'embedded' extra: {_EXTRA}") from None
    return pgserver


def _pgdata(args: argparse.Namespace) -> Path:
    return Path(args.data_dir).expanduser().resolve() / "pgdata"


def _cmd_dev_db(args: argparse.Namespace) -> int:
    pgserver = _pgserver()
    pgdata = _pgdata(args)
    if args.print_url:
        return _print_url(pgdata)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        _forget_dead_users(pgdata)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(pgdata, cleanup_mode="stop")
    except (OSError, RuntimeError, subprocess.SubprocessError) as err:  # pg_ctl, the folder
        raise OutboxError(f"cannot start the development server in {pgdata}: {err}") from None
    url = server.get_uri()
    print(f"export OUTBOX_DATABASE_URL={shlex.quote(url)}", flush=True)
    print(
        f"# a development PostgreSQL in {pgdata.parent}; Ctrl-C stops it "
        "(in another terminal: export OUTBOX_DATABASE_URL=$(outbox dev-db --print-url))",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop.wait(_CHECK_EVERY):
            if not server.get_postmaster_info().is_running():
                print("outbox: the development server stopped by itself", file=sys.stderr)
                return 1
    finally:
        server.cleanup()  # stops the server unless another process still uses it
    print("# the development server is stopped", file=sys.stderr, flush=True)
    return 0


def _forget_dead_users(pgdata: Path) -> None:
    """pgserver stops a server when the last process that asked for it lets go, by a list of
    their pids in the data folder. A process killed with SIGKILL stays on that list and would
    keep the server up after this command's Ctrl-C: drop the pids of processes that are gone."""
    users = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(users.read_text())
    except (OSError, ValueError):
        return
    if isinstance(pids, list):
        alive = [pid for pid in pids if isinstance(pid, int) and _alive(pid)]
        if alive != pids:
            users.write_text(json.dumps(alive))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _print_url(pgdata: Path) -> int:
    from pgserver.utils import PostmasterInfo  # noqa: PLC0415 - the embedded extra

    info = PostmasterInfo.read_from_pgdata(pgdata) if pgdata.is_dir() else None
    if info is None or not info.is_running() or info.status != "ready":
        print(
            f"outbox: no development server runs in {pgdata.parent}: start one with "
            "`outbox dev-db` (it keeps running until Ctrl-C)",
            file=sys.stderr,
        )
        return 1
    print(info.get_uri())
    return 0
