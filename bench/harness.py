"""What every part of the suite shares: the Postgres server, databases, the fake Bot API.

The server is the embedded one (pgserver) in ``.outbox/bench`` unless ``OUTBOX_BENCH_DATABASE_URL``
names another. A migrated template database is built once per run and every part clones its own
database from it, so parts never see each other's rows. The fake Bot API and, where the figure is
about the product as a user runs it, the relay run as separate processes, so that neither takes
the interpreter lock of the process that measures.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from outbox import migrate
from outbox.db import normalize_url

TOKEN = "123456:bench-token_for-the-fake-bot-api"
BENCH_DATA_DIR = Path(".outbox/bench")
_counter = itertools.count()


@dataclass
class Figure:
    """One row of the results table."""

    part: str
    name: str
    value: float
    unit: str
    baseline: str = ""  # what the ratio is taken against
    ratio: float | None = None
    target: str = ""
    met: bool | None = None  # None: no target for this figure
    note: str = ""


def at_least(value: float, baseline: float, times: float, of: str = "") -> dict[str, Any]:
    """A figure's ratio to its baseline's value, its target (at least ``times``x, ``of`` named
    after it) and whether it is met: ``Figure(..., **at_least(...))``."""
    ratio = value / baseline
    return {"ratio": ratio, "target": f">= {times:g}x {of}".rstrip(), "met": ratio >= times}


class PartUnavailable(Exception):
    """A part cannot run here (a peer library is not installed): one line, not a traceback."""


@dataclass
class Options:
    quick: bool = False
    peers: bool = False
    log: list[str] = field(default_factory=list)
    db_path_rates: list[float] = field(default_factory=list)  # every drain of parts 3 and 7

    def scale(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def say(self, message: str) -> None:
        line = f"[bench {time.strftime('%H:%M:%S')}] {message}"
        self.log.append(line)
        print(line, file=sys.stderr, flush=True)


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


class Server:
    """The Postgres server of the run and the migrated template its databases are cloned from."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.template = f"bench_template_{os.getpid()}"
        self._admin(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')
        self._admin(f'CREATE DATABASE "{self.template}"')
        migrate.upgrade(with_database(url, self.template))

    @classmethod
    def start(cls) -> Server:
        given = os.environ.get("OUTBOX_BENCH_DATABASE_URL")
        if given:
            return cls(normalize_url(given))
        from outbox.embedded import embedded_url

        return cls(embedded_url(BENCH_DATA_DIR))

    def _admin(self, sql: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql)

    def close(self) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{self.template}" WITH (FORCE)')

    @contextlib.contextmanager
    def database(self, label: str, *, migrated: bool = True) -> Iterator[str]:
        """A database of the part's own, dropped afterwards."""
        name = f"bench_{label}_{next(_counter)}_{uuid.uuid4().hex[:6]}"
        template = f' TEMPLATE "{self.template}"' if migrated else ""
        self._admin(f'CREATE DATABASE "{name}"{template}')
        try:
            yield with_database(self.url, name)
        finally:
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- filling the outbox --------------------------------------------------------------------

_FILL = """
INSERT INTO outbox (kalit, payload, holat, keyingi_urinish, navbat)
SELECT %(prefix)s || g,
       jsonb_build_object('chat_id', %(chat_base)s::bigint + g %% %(chats)s::bigint,
                          'text', %(text)s || g),
       %(holat)s,
       now(),
       %(navbat)s
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""


def fill(
    url: str,
    count: int,
    *,
    first: int = 1,
    chats: int | None = None,
    chat_base: int = 1_000_000,
    holat: str = "kutmoqda",
    text: str = "Eslatma: vazifa #",
    prefix: str = "bench-",
    navbat: str = "default",
) -> None:
    """Insert ``count`` due rows in one statement; chat ids cycle over ``chats`` chats."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            _FILL,
            {
                "prefix": prefix,
                "chat_base": chat_base,
                "chats": chats or count + first,
                "text": text,
                "holat": holat,
                "navbat": navbat,
                "first": first,
                "last": first + count - 1,
            },
        )


def counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT holat, count(*) FROM outbox GROUP BY holat").fetchall()
    return {str(state): int(n) for state, n in rows}


def vacuum_analyze(url: str, *tables: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")


# --- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _outbox_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "outbox.cli", *args]


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env["TELEGRAM_BOT_TOKEN"] = TOKEN
    env.update(extra)
    return env


def _stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class FakeBotApi:
    """``outbox fake-telegram`` in a process of its own, driven through its control API.

    It accepts ``token`` only, or with ``token=None`` any well-formed token (several bots).
    """

    def __init__(
        self, *, latency_ms: float = 0.0, enforce_limits: bool = False, token: str | None = TOKEN
    ) -> None:
        args = ["--latency", f"{latency_ms:g}ms", *(["--enforce-limits"] if enforce_limits else [])]
        # A free port can be taken by another program before the fake binds it: try again.
        for attempt in range(3):
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the fake
            self._proc = subprocess.Popen(
                _outbox_command("fake-telegram", "--port", str(self.port), *args),
                # An empty TELEGRAM_BOT_TOKEN: the fake serves any well-formed token.
                env=_child_env({"TELEGRAM_BOT_TOKEN": token or ""}),
                stdout=subprocess.DEVNULL,
                stderr=self._errors,
            )
            self._http = httpx.Client(base_url=self.url, timeout=60.0)
            if self._wait_started(timeout=30.0):
                return
            self.close()
            self._errors.seek(0)
            said = self._errors.read().decode(errors="replace").strip()
            if attempt == 2:
                raise RuntimeError(f"the fake Bot API did not start: {said[-2000:]}")

    def cpu_seconds(self) -> float:
        """The CPU time the fake's process has used so far (Linux)."""
        return cpu_seconds(self._proc.pid)

    def _wait_started(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._proc.poll() is None and time.monotonic() < deadline:
            try:
                self.stats()
            except httpx.TransportError:
                time.sleep(0.05)
            else:
                return True
        return False

    def stats(self) -> dict[str, int]:
        answer: dict[str, int] = self._http.get("/_fake/stats").raise_for_status().json()
        return answer

    def delivered(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self._http.get("/_fake/delivered").raise_for_status().json()
        return answer

    def requests(self) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self._http.get("/_fake/requests").raise_for_status().json()
        return answer

    def reset(self) -> None:
        self._http.post("/_fake/reset").raise_for_status()

    def script(self, chat_id: int | None, fault: dict[str, Any], times: int = 1) -> None:
        """Answer ``chat_id``'s next ``times`` requests with ``fault`` (the control API's shape:
        ``{"kind": "server_error", "status": 500}``)."""
        body = {"chat_id": chat_id, "fault": fault, "times": times}
        self._http.post("/_fake/script", json=body).raise_for_status()

    def wait_delivered(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.stats()["delivered"] < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        self._http.close()
        _stop(self._proc)
        self._errors.close()

    def __enter__(self) -> FakeBotApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RelayProcess:
    """``outbox relay`` as a user runs it, with its default settings plus ``args``, sending
    as the bot of ``token``."""

    def __init__(
        self, database_url: str, api_url: str, args: Sequence[str] = (), *, token: str = TOKEN
    ) -> None:
        env = _child_env(
            {
                "OUTBOX_DATABASE_URL": database_url,
                "OUTBOX_TELEGRAM_API_URL": api_url,
                "OUTBOX_LOG_LEVEL": "WARNING",
                "TELEGRAM_BOT_TOKEN": token,
            }
        )
        self._proc = subprocess.Popen(
            _outbox_command("relay", *args),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def alive(self) -> bool:
        return self._proc.poll() is None

    def cpu_seconds(self) -> float:
        """The CPU time the relay process has used so far (Linux)."""
        return cpu_seconds(self._proc.pid)

    def kill(self) -> None:
        """SIGKILL: the relay dies holding whatever it claimed."""
        self._proc.kill()
        self._proc.wait()

    def close(self) -> str:
        """Stop it (SIGTERM, as in production) and return what it logged."""
        _stop(self._proc)
        return self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""

    def __enter__(self) -> RelayProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- small statistics ---------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100.0 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def dump_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
