"""`reminders demo` (what `make demo` runs) tells the whole story, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_runs_end_to_end_and_again(tmp_path: Path) -> None:
    env = {**os.environ, "OUTBOX_DATA_DIR": str(tmp_path / "data")}
    env.pop("OUTBOX_DATABASE_URL", None)
    for _ in range(2):  # the second run starts from a clean slate in the same data folder
        ran = subprocess.run(
            [sys.executable, "-m", "reminders", "demo"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        out = ran.stdout
        assert "to Aziza (1001)" in out and "to Bobur (1002)" in out
        assert "flood control (429)" in out and "bot was blocked by the user" in out
        assert "replayed message 3: xato -> kutmoqda" in out
        assert "to Dilnoza (1003)" in out
        assert "Non olish" not in out.split("What Telegram received:")[1].split("The outbox")[0]
        final = out.split("The outbox at the end:")[1]
        assert final.count("bajarildi") == 3 and "xato " not in final
        assert "Traceback" not in ran.stderr
