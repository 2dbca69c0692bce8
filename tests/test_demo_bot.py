"""`reminders demo` ends with a conversation with the bot: sign-up, a task, both buttons."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_shows_a_conversation_with_the_bot(tmp_path: Path) -> None:
    env = {**os.environ, "OUTBOX_DATA_DIR": str(tmp_path / "data")}
    env.pop("OUTBOX_DATABASE_URL", None)
    ran = subprocess.run(
        [sys.executable, "-m", "reminders", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    talk = ran.stdout.split("A conversation with the vazifalar bot")[1]
    steps = [
        "Jasur: /start",
        "bot: Assalomu alaykum, Jasur!",
        "Jasur: /add Non olish 2s",
        "bot: ✅ Qo'shildi: #5 Non olish",
        "bot: ⏰ Eslatma: Non olish",
        "[✅ Bajarildi]  [⏰ Keyinroq (2 soniya)]  [⏰ Keyinroq (1 soat)]",
        "Jasur: presses ⏰ Keyinroq (2 soniya)",
        "bot: (notice) 2 soniyadan keyin yana eslataman",
        "bot: ⏰ Eslatma: Non olish",
        "Jasur: presses ✅ Bajarildi",
        "bot: (notice) Bajarildi ✅",
        "(reminder now reads) ✅ Bajarildi: Non olish",
        "bot: Ochiq vazifalar yo'q.",
    ]
    at = 0
    for step in steps:
        found = talk.find(step, at)
        assert found >= 0, f"{step!r} missing after position {at}:\n{talk}"
        at = found + len(step)
    assert "Traceback" not in ran.stderr
