"""A private PgBouncer in transaction pooling mode in front of the test PostgreSQL.

It uses the distribution's ``pgbouncer`` (``apt-get install pgbouncer``; ``.ci/run`` installs
it). Where it is absent, ``require_pgbouncer`` skips the test and says so (or fails it, under
``OUTBOX_REQUIRE_SYSTEM_TOOLS``).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from tests.support import free_port, missing_tool

__all__ = ["PgBouncer", "pgbouncer_binary", "require_pgbouncer"]

NOT_INSTALLED = "pgbouncer not installed (apt-get install pgbouncer)"


def pgbouncer_binary() -> str | None:
    # Debian puts it in /usr/sbin, which is not on every user's PATH.
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


def require_pgbouncer() -> str:
    binary = pgbouncer_binary()
    if binary is None:
        missing_tool(NOT_INSTALLED)
    return binary


def _quote(value: str) -> str:
    """A value in PgBouncer's connection string: single-quoted, quotes and backslashes escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class PgBouncer:
    """``pgbouncer`` in a process of its own on a free localhost port.

    Every database of ``server_url``'s server is reachable through it under the same name
    (the ``*`` entry). Clients are trusted (it listens on 127.0.0.1 only, for the test); it logs
    in to the server as the URL's user, with the URL's password if there is one.
    """

    def __init__(self, binary: str, server_url: str, *, pool_size: int = 10) -> None:
        info = psycopg.conninfo.conninfo_to_dict(server_url)
        self.user = str(info.get("user") or getpass.getuser())
        self.port = free_port()
        host = str(info.get("host") or "")
        server = {"host": host, "port": str(info.get("port") or 5432), "user": self.user}
        if info.get("password"):
            server["password"] = str(info["password"])
        # PgBouncer refuses to run as root: there it runs as the owner of the server's socket
        # folder (the embedded server's system user), who can reach that socket.
        self.run_as: str | None = None
        if os.geteuid() == 0:
            owner = os.stat(host).st_uid if host.startswith("/") else None
            self.run_as = pwd.getpwuid(owner).pw_name if owner else "nobody"
        self.dir = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        users = self.dir / "users.txt"
        users.write_text(f'"{self.user}" ""\n')
        self.config = self.dir / "pgbouncer.ini"
        connstr = " ".join(f"{key}={_quote(value)}" for key, value in server.items())
        self.config.write_text(
            "[databases]\n"
            f"* = {connstr}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            f"admin_users = {self.user}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 200\n"
            f"default_pool_size = {pool_size}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
        )
        self.log = self.dir / "pgbouncer.log"
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            for path in (self.dir, users, self.config):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [binary, str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                user=self.run_as,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.close()
            raise

    def url(self, database_url: str) -> str:
        """``database_url``'s database, through PgBouncer."""
        name = urlsplit(database_url).path.lstrip("/")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"

    def admin(self, command: str) -> list[dict[str, Any]]:
        """A command on PgBouncer's admin console (``SHOW POOLS``), its rows as dicts."""
        # The console speaks only the simple query protocol: a client-side cursor uses it.
        with psycopg.connect(
            self.url("/pgbouncer"), autocommit=True, cursor_factory=psycopg.ClientCursor
        ) as conn:
            cursor = conn.execute(command)
            names = [column.name for column in cursor.description or []]
            return [dict(zip(names, found, strict=True)) for found in cursor.fetchall()]

    def describe(self) -> str:
        return f"--- pgbouncer log ---\n{self.log.read_text(errors='replace')}"

    def _wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"pgbouncer exited with {self.proc.returncode}\n{self.describe()}"
                )
            try:
                self.admin("SHOW VERSION")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start\n{self.describe()}") from None
                time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    @classmethod
    @contextlib.contextmanager
    def running(cls, server_url: str) -> Iterator[PgBouncer]:
        bouncer = cls(require_pgbouncer(), server_url)
        try:
            yield bouncer
        finally:
            bouncer.close()
