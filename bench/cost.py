"""What one drain costs, per message: CPU on each side, WAL, commits, rows and index entries.

Read from the server itself, around one drain of a database of its own:

- CPU from ``/proc`` (the server must run on this machine, as the embedded one does): this
  process (the relay runs in it), the server's backends serving the drain's database, the
  server's other processes (checkpointer, WAL writer, autovacuum: a process that exits is
  counted through its parent's ``cutime``), and everything else the machine ran meanwhile.
- WAL bytes from ``pg_current_wal_lsn()``; full-page images, syncs and checkpoints from
  ``pg_stat_wal`` and ``pg_stat_bgwriter``; commits from ``pg_stat_database``; rows written and
  autovacuum runs from ``pg_stat_user_tables`` (read once the drain's backends have exited,
  which flushes their counters).
- Index entries written, per index, from ``pg_waldump`` over the drain's WAL (a temporary
  replication slot keeps the segments until they are read): one ``Btree`` insert record is one
  entry. Without ``pg_waldump`` or local access to the data directory this part is left out.

pg_stat_statements would give the server's time per statement, but pgserver's build does not
ship it; the backends' CPU is the same figure summed over the statements.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from outbox.embedded import postgres_bin_dir

_TICK = os.sysconf("SC_CLK_TCK")
OUTBOX_TABLES = ("outbox", "yuborilgan", "chat_navbati", "bot_holati")


def _proc_cpu(pid: int, *, children: bool = False) -> float:
    """CPU seconds of a process (with its reaped children's when asked); 0 once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime, cutime, cstime are fields 14-17 of stat(5); [0] here is field 3.
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / _TICK


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry.name))
    return found


def _machine_busy() -> float:
    """CPU seconds all cores have been busy since boot (everything but idle and iowait)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / _TICK


@dataclass
class _Cpu:
    own: float
    backends: dict[int, float]  # pid -> CPU seconds, for the drain's database
    server: float
    machine: float

    @classmethod
    def read(cls, postmaster: int | None, backends: list[int]) -> _Cpu:
        own = time.process_time()
        drain = {pid: _proc_cpu(pid) for pid in backends}
        server = 0.0
        if postmaster is not None:
            server = _proc_cpu(postmaster, children=True)
            server += sum(_proc_cpu(pid) for pid in _children(postmaster))
        return cls(own, drain, server, _machine_busy())


_SERVER_STATS = """
SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = %(db)s),
       pg_current_wal_lsn() - '0/0'::pg_lsn,
       (SELECT wal_fpi FROM pg_stat_wal), (SELECT wal_sync FROM pg_stat_wal),
       (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter),
       (SELECT buffers_checkpoint + buffers_backend FROM pg_stat_bgwriter)
"""
_TABLE_STATS = """
SELECT relname, n_tup_ins + n_tup_upd + n_tup_del, n_tup_hot_upd, n_tup_upd,
       autovacuum_count + autoanalyze_count
FROM pg_stat_user_tables WHERE relname = ANY(%(tables)s)
"""


@dataclass
class DrainCost:
    """The figures of one drain, per message where the name says so."""

    messages: int
    seconds: float
    relay_cpu_us: float
    pg_backend_us: float  # the server's backends serving the drain
    pg_other_us: float  # the server's other processes (WAL writer, checkpointer, autovacuum)
    machine_other_cores: float  # cores the rest of the machine kept busy meanwhile
    wal_bytes: float
    fpi: float  # full-page images written to the WAL, per message
    wal_syncs: float
    commits: float
    rows: float  # heap rows inserted, updated or deleted
    hot_share: float  # of the updates of the first table (outbox), the share that was HOT
    checkpoints: int  # started during the drain
    autovacuums: int  # autovacuum and autoanalyze runs on the drain's tables
    index_entries: float | None = None
    entries_by_index: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        entries = "" if self.index_entries is None else f", {self.index_entries:.1f} index entries"
        return (
            f"per message: relay {self.relay_cpu_us:.0f} us CPU, PostgreSQL "
            f"{self.pg_backend_us:.0f} us (+{self.pg_other_us:.0f} us background), "
            f"{self.wal_bytes:,.0f} B WAL ({self.fpi:.3f} full pages), "
            f"{self.commits:.3f} commits, {self.rows:.2f} rows{entries}; "
            f"{self.checkpoints} checkpoint(s), {self.autovacuums} autovacuum/analyze run(s), "
            f"rest of the machine {self.machine_other_cores:.2f} cores busy"
        )

    def details(self) -> str:
        by_index = ", ".join(f"{name} {n:.2f}" for name, n in self.entries_by_index.items())
        return (
            f"WAL syncs {self.wal_syncs:.3f}/msg, HOT updates {100 * self.hot_share:.0f} % of "
            f"the queue table's; index entries per message: {by_index or 'n/a'}"
        )


class CostProbe:
    """Measures one drain of database ``db`` on the server at ``admin_url``.

    Use: ``with probe.watching():`` around the whole drain (it holds the WAL), and inside it
    ``probe.start(...)`` just before and ``probe.stop(...)`` just after the timed run, while
    the relay's connections are open; ``probe.result(messages)`` once they have closed.
    """

    def __init__(
        self, admin_url: str, db_url: str, db: str, tables: tuple[str, ...] = OUTBOX_TABLES
    ) -> None:
        self._admin_url, self._db_url, self._db = admin_url, db_url, db
        self._tables = tables
        self._admin: psycopg.Connection[Any] | None = None
        self._postmaster: int | None = None
        self._data_dir: Path | None = None
        self._before: dict[str, Any] = {}
        self._after: dict[str, Any] = {}

    @contextlib.contextmanager
    def watching(self) -> Iterator[CostProbe]:
        with psycopg.connect(self._admin_url, autocommit=True) as admin:
            self._admin = admin
            self._postmaster = self._find_postmaster(admin)
            slot = f"bench_cost_{os.getpid()}"
            try:
                # Temporary: dropped with this session. It keeps the drain's WAL segments
                # from being recycled by a checkpoint before pg_waldump reads them.
                admin.execute("SELECT pg_create_physical_replication_slot(%s, true, true)", (slot,))
                self._data_dir = Path(str(admin.execute("SHOW data_directory").fetchone()[0]))  # type: ignore[index]
            except psycopg.Error:
                self._data_dir = None
            try:
                yield self
            finally:
                self._admin = None

    @staticmethod
    def _find_postmaster(admin: psycopg.Connection[Any]) -> int | None:
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'"
        ).fetchone()
        if row is None or not Path(f"/proc/{row[0]}").exists():
            return None  # not on this machine
        fields = Path(f"/proc/{row[0]}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1])

    def _backends(self) -> list[int]:
        assert self._admin is not None
        rows = self._admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (self._db,),
        ).fetchall()
        return [int(pid) for (pid,) in rows]

    def _server_stats(self) -> tuple[Any, ...]:
        assert self._admin is not None
        row = self._admin.execute(_SERVER_STATS, {"db": self._db}).fetchone()
        assert row is not None
        return tuple(row)

    def _table_stats(self) -> dict[str, tuple[int, ...]]:
        with psycopg.connect(self._db_url, autocommit=True) as conn:
            rows = conn.execute(_TABLE_STATS, {"tables": list(self._tables)}).fetchall()
        return {str(r[0]): tuple(int(v) for v in r[1:]) for r in rows}

    def start(self) -> None:
        self._before = {
            "tables": self._table_stats(),
            "server": self._server_stats(),
            "cpu": _Cpu.read(self._postmaster, self._backends()),
            "at": time.perf_counter(),
        }

    def stop(self) -> None:
        self._after = {
            "at": time.perf_counter(),
            # The relay's connections open during the drain: its backends are found now.
            "cpu": _Cpu.read(self._postmaster, self._backends()),
            "lsn": self._server_stats()[1],
        }

    def result(self, messages: int) -> DrainCost:
        self._wait_backends_gone()
        before, after = self._before, self._after
        server_after = self._server_stats()
        tables = self._table_stats()
        b, a = before["cpu"], after["cpu"]
        seconds = after["at"] - before["at"]
        per = 1e6 / messages
        pg_backend = sum(cpu - b.backends.get(pid, 0.0) for pid, cpu in a.backends.items())
        pg_all = a.server - b.server
        own = a.own - b.own
        commits, _, fpi, syncs, checkpoints, _ = (
            x - y for x, y in zip(server_after, before["server"], strict=True)
        )

        def delta(table: str, k: int) -> int:
            was: tuple[int, ...] = before["tables"].get(table, (0,) * 4)
            return tables.get(table, (0,) * 4)[k] - was[k]

        updates = delta(self._tables[0], 2)
        cost = DrainCost(
            messages=messages,
            seconds=seconds,
            relay_cpu_us=own * per,
            pg_backend_us=pg_backend * per,
            pg_other_us=max(0.0, pg_all - pg_backend) * per,
            machine_other_cores=max(0.0, (a.machine - b.machine) - own - pg_all) / seconds,
            wal_bytes=(after["lsn"] - before["server"][1]) / messages,
            fpi=fpi / messages,
            wal_syncs=syncs / messages,
            commits=commits / messages,
            rows=sum(delta(t, 0) for t in self._tables) / messages,
            hot_share=delta(self._tables[0], 1) / updates if updates else 0.0,
            checkpoints=int(checkpoints),
            autovacuums=sum(delta(t, 3) for t in self._tables),
        )
        entries = self._index_entries(int(before["server"][1]), int(after["lsn"]))
        if entries is not None:
            cost.index_entries = sum(entries.values()) / messages
            cost.entries_by_index = {k: v / messages for k, v in entries.most_common()}
        return cost

    def _wait_backends_gone(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self._backends() and time.monotonic() < deadline:
            time.sleep(0.05)

    def _index_entries(self, start: int, end: int) -> Counter[str] | None:
        """Btree insert records of the drain's WAL, by index name."""
        waldump = postgres_bin_dir() / "pg_waldump"
        if self._data_dir is None or not waldump.exists() or end <= start:
            return None
        with psycopg.connect(self._db_url, autocommit=True) as conn:
            names: dict[str, str] = dict(
                conn.execute(
                    "SELECT pg_relation_filenode(c.oid)::text, c.relname FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE c.relkind = 'i' AND n.nspname NOT IN ('pg_catalog', 'pg_toast')"
                ).fetchall()
            )
            db_oid = conn.execute(
                "SELECT oid FROM pg_database WHERE datname = current_database()"
            ).fetchone()
        assert db_oid is not None
        counts: Counter[str] = Counter()
        pattern = re.compile(rf"desc: INSERT_(?:LEAF|POST).*? rel \d+/{db_oid[0]}/(\d+) ")
        args = [
            str(waldump),
            "-p",
            str(self._data_dir / "pg_wal"),
            "-s",
            _lsn(start),
            "-e",
            _lsn(end),
            "-r",
            "Btree",
        ]
        proc = subprocess.run(args, capture_output=True, text=True, check=False)
        for match in pattern.finditer(proc.stdout):
            name = names.get(match.group(1))
            if name is not None:
                counts[name] += 1
        return counts if counts or proc.returncode == 0 else None


def _lsn(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"
