"""Helpers shared by the tests (of ``tests/`` and ``reminders/tests/``): relays in this process
or as real processes against the fake Bot API, waiting for conditions, and looking at the outbox
table. The fixtures are in ``tests.support.fixtures``, the tiers in ``tests.support.tiers``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from outbox import queries
from outbox.cli import main as cli_main
from outbox.config import RelayConfig
from outbox.embedded import postgres_bin_dir
from outbox.ratelimit import RateLimits
from outbox.relay import Relay, RunSummary
from outbox.relay.claimer import fleet_limits
from outbox.relay.completer import Completer
from outbox.relay.flood import FloodControl
from outbox.relay.send_pool import SendPool
from outbox.relay.store import Store
from outbox.retry import RetryPolicy
from outbox.telegram import Sender, TelegramSender
from outbox_testing.fake_telegram import FakeTelegram

__all__ = [
    "DEFAULT_LIMITS",
    "ROOT",
    "TEST_TOKEN",
    "UNLIMITED",
    "OwnPostgres",
    "RelayProcess",
    "Relays",
    "add_rows_for_retention",
    "backends",
    "chats_of",
    "enqueue_numbered",
    "eventually",
    "insert_raw",
    "is_test_module",
    "make_relay",
    "missing_tool",
    "outbox_columns",
    "outcome_writer",
    "printed_spans",
    "relay_env",
    "row",
    "rows_and_markers",
    "rows_fingerprint",
    "run_cli",
    "run_module",
    "send_pool",
    "start_own_postgres",
    "states",
    "text",
    "wait_until",
]


T = TypeVar("T")

# The repository's folder (README.md, docs/, deploy/, examples/).
ROOT = Path(__file__).resolve().parents[2]
# The only token the fake Bot API of the tests accepts.
TEST_TOKEN = "123456:TEST-token_for-fake"

# Set by CI (.ci/run), which installs Chromium and PgBouncer: a test whose tool is missing
# fails there instead of skipping, so a broken install cannot leave CI green.
REQUIRE_SYSTEM_TOOLS = "OUTBOX_REQUIRE_SYSTEM_TOOLS"


def is_test_module(name: str) -> bool:
    """Whether a file (a path in the wheel or the repository) is part of a test suite."""
    parts = name.split("/")
    stem = parts[-1].removesuffix(".py")
    return "tests" in parts[:-1] or stem == "conftest" or stem.startswith("test_")


def missing_tool(reason: str) -> NoReturn:
    """Skip the test, saying which system tool is missing and how to get it; where
    ``OUTBOX_REQUIRE_SYSTEM_TOOLS=1`` fail instead."""
    if os.environ.get(REQUIRE_SYSTEM_TOOLS, "") not in {"", "0"}:
        pytest.fail(f"{reason}, and {REQUIRE_SYSTEM_TOOLS} is set", pytrace=False)
    pytest.skip(reason)


# Rate limits off: tests that are not about pacing need not wait for Telegram's limits.
UNLIMITED = RateLimits(per_bot=0, per_chat=0, per_group_per_minute=0)

# relay_env's settings that put the relay's own default limits back (Telegram's: per bot, per
# private chat, per group), for the tests about keeping them.
DEFAULT_LIMITS = {
    "OUTBOX_RATE_LIMIT": f"{RateLimits().per_bot:g}",
    "OUTBOX_CHAT_RATE_LIMIT": f"{RateLimits().per_chat:g}",
    "OUTBOX_GROUP_RATE_LIMIT": f"{RateLimits().per_group_per_minute:g}",
}


def make_relay(
    db_url: str, fake: FakeTelegram, tracer_provider: object | None = None, **config: Any
) -> Relay:
    """A relay in this process against ``db_url`` and the fake; rate limits off by default."""
    cfg = RelayConfig(database_url=db_url, **{"rate_limits": UNLIMITED, **config})
    sender = TelegramSender(
        TEST_TOKEN,
        api_url=fake.api_url,
        pool_size=cfg.concurrency,
        read_timeout=cfg.telegram_timeout,
    )
    return Relay(cfg, sender, tracer_provider=tracer_provider)


def insert_raw(conn: sa.Connection | Session, key: str, payload: Any) -> None:
    """A row written by plain SQL, as the lesson's INSERT does: no check on the way in."""
    conn.execute(
        sa.text("INSERT INTO outbox (kalit, payload) VALUES (:key, CAST(:payload AS jsonb))"),
        {"key": key, "payload": json.dumps(payload)},
    )


def relay_env(db_url: str, api_url: str, **settings: str) -> dict[str, str]:
    """The environment of a relay process: rate limits off, everything else default.

    ``settings`` adds or overrides variables (``OUTBOX_LEASE="2s"`` and so on).
    """
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_", "OTEL_"))
    }
    env.update(
        OUTBOX_DATABASE_URL=db_url,
        TELEGRAM_BOT_TOKEN=TEST_TOKEN,
        OUTBOX_TELEGRAM_API_URL=api_url,
        OUTBOX_RATE_LIMIT="0",
        OUTBOX_CHAT_RATE_LIMIT="0",
        OUTBOX_GROUP_RATE_LIMIT="0",
        OUTBOX_LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="1",
    )
    env.update(settings)
    return env


def outcome_writer(db_url: str) -> tuple[Completer, Store, RunSummary]:
    """A relay's outcome writer (schema ``public``) on a connection of its own, and its counts;
    the caller closes the connection."""
    stopping, total = asyncio.Event(), RunSummary()
    connection = Store(db_url, "record", stopping)
    completer = Completer(
        connection,
        schema="public",
        flush_interval=0.02,
        grace_seconds=0.0,
        stopping=stopping,
        total=total,
    )
    return completer, connection, total


def send_pool(
    sender: Sender,
    completer: Completer,
    total: RunSummary,
    *,
    limits: RateLimits = UNLIMITED,
    flood: FloodControl | None = None,
    concurrency: int = 1,
) -> SendPool:
    """A relay's send pool alone: the claim's ``limits``, every row still claimed, and no
    token rejected."""

    async def still_claimed(_row: queries.ClaimedRow) -> bool:
        return True

    return SendPool(
        sender,
        concurrency=concurrency,
        limits=fleet_limits(limits, horizon=1.0),
        retry=RetryPolicy(),
        flood=flood or FloodControl(schema="public"),
        completer=completer,
        still_claimed=still_claimed,
        stopping=asyncio.Event(),
        total=total,
        on_unauthorized=lambda _err: None,
    )


def run_module(
    module: str,
    *argv: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """``python -m module argv...`` in a process of its own (``outbox.cli``, ``reminders``),
    its output captured; the exit code is the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", module, *argv],
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``outbox argv...`` in this process: its exit code, stdout and stderr."""
    code = cli_main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class RelayProcess:
    """``outbox relay`` in a process of its own; output goes to files (no pipe can fill up)."""

    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        name: str,
        *args: str,
        launcher: Sequence[str] = (),
    ) -> None:
        self.name = name
        # ``launcher`` runs the relay, such as ``ip netns exec NAME`` (which execs it: the
        # process is still the relay's).
        self.argv = [*launcher, sys.executable, "-m", "outbox.cli", "relay", *args]
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            # Run from the log folder: the relay must not depend on the working directory.
            self.proc = subprocess.Popen(
                self.argv, env=dict(env), stdout=out, stderr=err, cwd=log_dir
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """kill -9: no cleanup of any kind happens in the relay."""
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then wait for the exit code; a relay that does not stop fails the test."""
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.name} did not stop within {timeout:g} s of SIGTERM\n{self.describe()}"
            ) from None

    def wait(self, timeout: float = 20.0) -> int:
        return self.proc.wait(timeout)

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def describe(self) -> str:
        return (
            f"--- {self.name} stdout ---\n{self.stdout}\n--- {self.name} stderr ---\n{self.stderr}"
        )


class Relays:
    """Starts relay processes and makes sure none outlives the test."""

    def __init__(
        self, env: Mapping[str, str], log_dir: Path, *, launcher: Sequence[str] = ()
    ) -> None:
        self.env = dict(env)
        self.log_dir = log_dir
        self.launcher = tuple(launcher)
        self.started: list[RelayProcess] = []

    def start(self, *args: str, **settings: str) -> RelayProcess:
        name = f"relay{len(self.started) + 1}"
        relay = RelayProcess(
            {**self.env, **settings}, self.log_dir, name, *args, launcher=self.launcher
        )
        self.started.append(relay)
        return relay

    def describe(self) -> str:
        return "\n".join(r.describe() for r in self.started)

    def timed_out(self) -> set[int]:
        """The rows whose send a relay logged as not answered in time: each may have been
        delivered, and is sent again (the documented duplicate without a crash; a loaded
        machine can hold an in-process fake's answers back that long)."""
        logged = re.compile(r"outbox (\d+) [^\n]*did not answer in time")
        return {int(i) for relay in self.started for i in logged.findall(relay.stderr)}

    def close(self) -> None:
        for relay in self.started:
            if relay.alive():
                with contextlib.suppress(ProcessLookupError, OSError):
                    os.kill(relay.pid, signal.SIGCONT)  # a test may have stopped it
                relay.kill()

    @contextlib.contextmanager
    def running(self) -> Iterator[Relays]:
        try:
            yield self
        finally:
            self.close()


def wait_until(
    condition: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.05,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{detail}")
        time.sleep(interval)


async def eventually(
    condition: Callable[[], T | None], timeout: float, what: str, *, interval: float = 0.02
) -> T:
    """``wait_until`` for a test that runs a relay in its own event loop: the condition (which
    may block, on the database say) runs in a thread, and the relay keeps running meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(condition)
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(interval)


def states(engine: sa.Engine) -> dict[str, int]:
    with engine.begin() as conn:
        return queries.count_by_state(conn, schema="public")


def chats_of(engine: sa.Engine, ids: Collection[int]) -> set[int]:
    """The chat ids of the rows ``ids`` (their payload's)."""
    with engine.connect() as conn:
        chats = conn.exec_driver_sql(
            "SELECT (payload->>'chat_id')::bigint FROM outbox WHERE id = ANY(%(ids)s)",
            {"ids": sorted(ids)},
        )
        return set(chats.scalars())


def backends(engine: sa.Engine, where: str) -> list[str]:
    """Queries of the other sessions on the test's database that match ``where`` (SQL on
    pg_stat_activity), e.g. relay connections waiting for a lock."""
    with engine.begin() as conn:
        found = conn.exec_driver_sql(
            "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
            f"AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND ({where})"
        ).scalars()
        return list(found)


def text(chat: int, n: int | None = None) -> dict[str, Any]:
    """A plain message's payload to ``chat``; ``n`` tells apart several to one chat."""
    return {"chat_id": chat, "text": f"eslatma {chat}" if n is None else f"eslatma {chat}/{n}"}


def row(engine: sa.Engine, key: str, *, plain: bool = False) -> dict[str, Any]:
    """One outbox row by key, with its sent marker's chat and message id (or None).

    ``plain=True`` reads only the columns psycopg decodes whatever a row holds (id, holat,
    urinish, oxirgi_xato): no payload nested too deeply, no timestamp at infinity.
    """
    columns = (
        "o.id, o.holat, o.urinish, o.oxirgi_xato"
        if plain
        else "o.id, o.holat, o.urinish, o.payload, o.oxirgi_xato, o.tarix, o.keyingi_urinish, "
        "o.yangilangan, y.chat_id AS marker_chat, y.message_id AS marker_message"
    )
    with engine.begin() as conn:
        found = (
            conn.exec_driver_sql(
                f"SELECT {columns} FROM outbox o LEFT JOIN yuborilgan y USING (kalit) "
                "WHERE o.kalit = %(k)s",
                {"k": key},
            )
            .mappings()
            .one()
        )
    return dict(found)


def enqueue_numbered(engine: sa.Engine, n: int, *, first_chat: int) -> None:
    """``n`` messages in one transaction: message i goes to chat ``first_chat + i``."""
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO outbox (kalit, payload) "
            "SELECT 'n' || i, jsonb_build_object('chat_id', %(first)s + i, 'text', 'xabar ' || i) "
            "FROM generate_series(0, %(n)s - 1) AS i",
            {"n": n, "first": first_chat},
        )


class OwnPostgres:
    """A PostgreSQL server of the test's own, on a TCP port, that the test stops and starts;
    with ``standby_of``, a streaming standby of that server, which ``promote`` makes a primary.

    It uses the binaries of the pgserver wheel, all of them (``pg_basebackup`` included).
    Postgres refuses to run as root; as root the server runs as pgserver's system user
    ``pgserver`` (created by pgserver when missing), as pgserver itself does. Its folder is a
    temporary one of its own, not under pytest's: every pytest session that starts (another
    worker's, another checkout's) makes pytest's folder private to root again, and the
    server's user would lose its data folder mid-test.
    """

    def __init__(
        self,
        *,
        standby_of: OwnPostgres | None = None,
        listen: Sequence[str] = ("127.0.0.1",),
        trust: Sequence[str] = (),
    ) -> None:
        # The addresses it listens on (the first is the URL's), and the networks (CIDR) whose
        # clients it trusts as it trusts those of 127.0.0.1.
        self.listen = tuple(listen)
        base = Path(tempfile.mkdtemp(prefix="outbox-pg-"))
        self.base = base
        self.bin = postgres_bin_dir()
        self.pgdata = base / "pgdata"
        self.logfile = base / "postgres.log"
        self.port = free_port()
        self.user: str | None = None
        self._orphans: list[int] = []  # a killed postmaster's processes
        self.pgdata.mkdir(mode=0o700, parents=True)
        if os.geteuid() == 0:
            self.user = _postgres_system_user(self.pgdata, base)
        try:
            self._make_data(standby_of)
        except BaseException:
            shutil.rmtree(base, ignore_errors=True)
            raise
        with (self.pgdata / "pg_hba.conf").open("a", encoding="utf-8") as hba:
            for network in trust:
                hba.write(f"host all all {network} trust\n")

    def _make_data(self, standby_of: OwnPostgres | None) -> None:
        if standby_of is None:
            self._run(
                "initdb",
                "-D",
                str(self.pgdata),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            )
            return
        # A streaming standby, as PostgreSQL's own tools make one: a base backup of the
        # running primary, with standby.signal and primary_conninfo written (-R).
        self._run(
            "pg_basebackup",
            "-D",
            str(self.pgdata),
            "-h",
            "127.0.0.1",
            "-p",
            str(standby_of.port),
            "-U",
            "postgres",
            "-R",
            "--checkpoint=fast",
            "--no-sync",
        )

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{self.listen[0]}:{self.port}/postgres"

    def start(self) -> None:
        addresses = ",".join(self.listen)
        options = f"-c listen_addresses={addresses} -p {self.port} -k '' -c fsync=on"
        self._run(
            "pg_ctl",
            "-D",
            str(self.pgdata),
            "-l",
            str(self.logfile),
            "-w",
            "-t",
            "30",
            "-o",
            options,
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.pgdata), "-m", mode, "-w", "-t", "30", "stop")

    def promote(self) -> None:
        """A standby becomes a primary; returns once it takes writes."""
        self._run("pg_ctl", "-D", str(self.pgdata), "-w", "-t", "30", "promote")

    def kill_postmaster(self) -> None:
        """kill -9 of the postmaster: its listening socket goes at once, and its other
        processes end by themselves when they notice (``close`` ends any still there)."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        self._orphans = _children(pid)
        os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        for pid in self._orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.base, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        try:
            subprocess.run(
                [str(self.bin / program), *args],
                check=True,
                capture_output=True,
                user=self.user,
                cwd=self.pgdata.parent,
                timeout=60,
            )
        except subprocess.CalledProcessError as err:
            err.add_note(f"stderr: {err.stderr.decode(errors='replace')}")
            if self.logfile.exists():
                err.add_note(f"server log: {self.logfile.read_text(errors='replace')[-2000:]}")
            raise


def start_own_postgres(
    *, listen: Sequence[str] = ("127.0.0.1",), trust: Sequence[str] = ()
) -> OwnPostgres:
    """A private PostgreSQL server listening on ``listen`` (trusting clients of the networks
    ``trust`` too), started (the test skips where one cannot be set up); the caller closes it."""
    try:
        server = OwnPostgres(listen=listen, trust=trust)
    except subprocess.CalledProcessError as err:  # e.g. no way to add the postgres user
        pytest.skip(f"cannot set up a private PostgreSQL server here: {err.stderr!r}")
    server.start()
    return server


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat_file.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat_file.parent.name))
    return found


def free_port() -> int:
    """A free port below the ephemeral range, so that no client socket takes it meanwhile
    (the server must get the same port back when it restarts)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, 32_000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free TCP port for PostgreSQL")


def _postgres_system_user(pgdata: Path, base: Path) -> str:
    """Let pgserver's system user run the binaries and own the data (and log) folder."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs, on import of pgserver
        from pgserver.utils import (  # only when running as root
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

    user = "pgserver"
    entry = ensure_user_exists(user)
    bin_dir = postgres_bin_dir()
    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(bin_dir)
    readable = stat.S_IRGRP | stat.S_IROTH
    ensure_folder_permissions(bin_dir, readable | stat.S_IXGRP | stat.S_IXOTH)
    ensure_folder_permissions(bin_dir.parent / "lib", readable)
    for path in (pgdata, base):
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return user


def add_rows_for_retention(engine: sa.Engine) -> None:
    """Done rows 8 and 1 days old, a failed row 90 days old, and sent markers 31 days and
    moments old: retention with its defaults deletes 'old' (row and marker) only."""
    with engine.begin() as conn:
        for key, age_days in (("old", 8), ("recent", 1)):
            insert_raw(conn, key, {"chat_id": 1, "text": key})
            conn.exec_driver_sql(
                "UPDATE outbox SET holat = 'bajarildi', "
                "yangilangan = now() - make_interval(days => %(d)s) WHERE kalit = %(k)s",
                {"d": age_days, "k": key},
            )
        insert_raw(conn, "failed-long-ago", {"chat_id": 1, "text": "x"})
        conn.exec_driver_sql(
            "UPDATE outbox SET holat = 'xato', yangilangan = now() - interval '90 days' "
            "WHERE kalit = 'failed-long-ago'"
        )
        conn.exec_driver_sql(
            "INSERT INTO yuborilgan (kalit, chat_id, message_id, yuborilgan_vaqt) VALUES "
            "('old', 1, 1, now() - interval '31 days'), ('recent', 1, 2, now())"
        )


def rows_and_markers(engine: sa.Engine) -> tuple[list[str], list[str]]:
    """The keys of every outbox row and of every sent marker, sorted."""
    with engine.begin() as conn:
        rows = conn.exec_driver_sql("SELECT kalit FROM outbox ORDER BY kalit").scalars()
        markers = conn.exec_driver_sql("SELECT kalit FROM yuborilgan ORDER BY 1").scalars()
        return list(rows), list(markers)


def printed_spans(output: str) -> list[dict[str, Any]]:
    """The spans OpenTelemetry's console exporter printed (JSON documents), among a process's
    other lines."""
    decoder, spans, at = json.JSONDecoder(), [], output.find("{")
    while at != -1:
        try:
            found, end = decoder.raw_decode(output, at)
        except ValueError:
            found, end = None, at + 1
        if isinstance(found, dict) and "context" in found:
            spans.append(found)
        at = output.find("{", end)
    return spans


def outbox_columns(conn: psycopg.Connection[Any]) -> list[str]:
    """The outbox table's columns now, in order (a later revision may add its own)."""
    found = conn.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = 'outbox' "
        "ORDER BY ordinal_position"
    )
    return [str(r[0]) for r in found]


def rows_fingerprint(conn: psycopg.Connection[Any], columns: list[str]) -> object:
    """Every outbox row's values of ``columns``, in one hash: a revision kept them all."""
    values = ", ".join(f"o.{c}" for c in columns)
    found = conn.execute(
        f"SELECT md5(string_agg(row({values})::text, ',' ORDER BY id)) FROM outbox o"
    )
    return found.fetchone()
