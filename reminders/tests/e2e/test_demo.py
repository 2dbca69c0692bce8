"""`reminders demo` (what `make demo` runs) tells the whole story, in a process of its own, and
ends with a conversation with the bot: sign-up, a task, both buttons."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import run_module


def _runs_twice(tmp_path: Path) -> list[subprocess.CompletedProcess[str]]:
    """Two runs in one data folder (the second starts from a clean slate)."""
    env = {**os.environ, "OUTBOX_DATA_DIR": str(tmp_path / "data")}
    env.pop("OUTBOX_DATABASE_URL", None)
    return [run_module("reminders", "demo", env=env, timeout=120) for _ in range(2)]


# One test for both runs: the demo takes about 18 s a run, and pytest-xdist 3.8 under pytest
# 9.2 no longer keeps tests that share a module fixture on one worker (its loadgroup lost the
# groups), so two tests would run the demo on two workers, four times.
@pytest.mark.slow
def test_demo_runs_end_to_end_again_and_ends_with_a_conversation(tmp_path: Path) -> None:
    demo_runs = _runs_twice(tmp_path)
    for ran in demo_runs:
        assert ran.returncode == 0, ran.stderr
        out = ran.stdout
        assert "to Aziza (1001)" in out and "to Bobur (1002)" in out
        assert "flood control (429)" in out and "bot was blocked by the user" in out
        assert "Non olish" not in out.split("What Telegram received:")[1].split("The outbox")[0]
        # Dilnoza blocked the bot: the news batch skips her chat without a request, a replay
        # of her copy is refused until she unblocks the bot with /start.
        story = out.split("the outbox remembers her chat:")[1].split("The outbox at the end:")[0]
        blocked, unblocked = story.split("Dilnoza unblocks the bot")
        assert "-    1003" in blocked and "to Dilnoza" not in blocked
        assert "no request was made" in blocked
        assert "not replayed: chat 1003 blocked its bot" in blocked
        assert "replayed message 7: xato -> kutmoqda" in unblocked
        assert unblocked.count("to Dilnoza (1003)") == 3  # welcome, reminder, news
        final = out.split("The outbox at the end:")[1].split("A conversation")[0]
        assert final.count("bajarildi") == 7 and "xato " not in final
        assert "Traceback" not in ran.stderr

    # The first run ends with the conversation.
    ran = demo_runs[0]
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
