"""The README's and docs/'s code blocks: every block that claims to run is run, as written.

A fenced block's info string says what it is. ``python`` and ``sh`` blocks claim to run: the
test runs them, in the order of their page, against one fresh database and one fake Bot API
per page (the three variables the README's set-up block exports), a Python block with this
interpreter and a shell block with ``bash -euo pipefail`` and this venv's commands first on
PATH. A ``python no-run`` or ``sh no-run`` block is one that cannot run here (a root install,
systemd, a fragment of someone's env.py); ``text``, ``ini``, ``yaml`` and ``json`` blocks are
drawings and configuration, not commands. Any other block, one without an info string
included, fails the test: a page cannot hold a command that nobody checks.

Here the e2e tier's tests (processes); the others are in ``tests/unit/test_docs.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from outbox_testing.fake_telegram import FakeTelegram
from tests.support import TEST_TOKEN
from tests.support.docs import PAGES, PROVIDED, Block, page_blocks

BLOCK_TIMEOUT = 240.0


def _env(db_url: str, fake: FakeTelegram) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OUTBOX_", "TELEGRAM_"))}
    values = dict(zip(PROVIDED, (fake.api_url, TEST_TOKEN, db_url), strict=True))
    bin_dir = str(Path(sys.executable).parent)
    return {**env, **values, "PATH": bin_dir + os.pathsep + env.get("PATH", "")}


def _run(block: Block, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    if block.language == "python":
        argv = [sys.executable, "-c", block.body]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", block.body]
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=BLOCK_TIMEOUT, check=False
    )


RUN_PAGES = [page for page in PAGES if any(b.runs for b in page_blocks(page))]


@pytest.mark.parametrize("page", RUN_PAGES, ids=[p.name for p in RUN_PAGES])
def test_the_blocks_run_as_written(page: Path, db_url: str, tmp_path: Path) -> None:
    fake = FakeTelegram(token=TEST_TOKEN).start_in_thread()
    try:
        env = _env(db_url, fake)
        for block in page_blocks(page):
            if not block.runs:
                continue
            done = _run(block, env, tmp_path)
            assert done.returncode == 0, (
                f"{block.where} exited {done.returncode}:\n{block.body}\n"
                f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
            )
        if page.name == "README.md":
            # The first message went all the way: the relay sent it to the fake.
            texts = [d.text for d in fake.delivered_to(123456789)]
            assert texts == ["To'lov qabul qilindi"]
    finally:
        fake.stop_thread()
