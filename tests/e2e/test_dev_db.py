"""``outbox dev-db``: a development PostgreSQL that outlives the commands using it, as the
README's first example runs it."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from tests.support import run_cli


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}


def _dev_db(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "outbox", "dev-db", "--data-dir", str(data_dir), *args]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.e2e
def test_dev_db_runs_until_sigterm_and_prints_a_url_both_drivers_take(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    with subprocess.Popen(
        _dev_db(data_dir), env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, text=True
    ) as server:
        postmaster = _use_then_stop(server, data_dir)
    deadline = time.monotonic() + 10
    while _running(postmaster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _running(postmaster), "the server outlived outbox dev-db"
    gone = subprocess.run(
        _dev_db(data_dir, "--print-url"),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert gone.returncode == 1
    assert gone.stdout == ""
    assert "no development server runs" in gone.stderr


def _use_then_stop(server: subprocess.Popen[str], data_dir: Path) -> int:
    """Connect as the README's reader does, then SIGTERM it; the postmaster's pid."""
    postmaster = 0
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once the server accepts connections
        words = shlex.split(line)
        assert words[0] == "export", line
        name, _, url = words[1].partition("=")
        assert name == "OUTBOX_DATABASE_URL"
        assert url.startswith("postgresql://")

        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 2")).scalar() == 2
        engine.dispose()

        again = subprocess.run(
            _dev_db(data_dir, "--print-url"),
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (again.returncode, again.stdout.strip()) == (0, url), again.stderr
        postmaster = int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        assert _running(postmaster)

        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return postmaster


def test_dev_db_without_the_extra_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pgserver", None)  # import pgserver raises ImportError
    code, out, err = run_cli(capsys, "dev-db", "--data-dir", str(tmp_path))
    assert code == 3
    assert out == ""
    assert err.strip() == (
        "outbox: outbox dev-db needs the 'embedded' extra: pip install 'outbox-telegram[embedded]'"
    )
