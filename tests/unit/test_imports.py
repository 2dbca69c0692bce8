"""What ``import outbox`` costs a host app that only enqueues."""

from __future__ import annotations

import subprocess
import sys

# A host app imports outbox to enqueue inside its own transactions; the Telegram client (and
# its HTTP stack) belongs to the relay and would add a fifth to the import for nothing. Nor is
# OpenTelemetry imported: enqueue reads a trace context only once the app has imported it.
_CHECK = """
import sys
import outbox
loaded = sorted(m for m in ("telegram", "httpx", "aiohttp", "opentelemetry") if m in sys.modules)
assert not loaded, f"import outbox loaded {loaded}"
"""


def test_import_outbox_loads_no_telegram_client() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


# The fake Bot API is a testing tool outside the runtime package; without the 'fake' extra
# (aiohttp) the command says what to install, in one line.
_WITHOUT_AIOHTTP = """
import sys

class NoAiohttp:
    def find_spec(self, name, path=None, target=None):
        if name == "aiohttp" or name.startswith("aiohttp."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoAiohttp())
from outbox.cli import main
sys.exit(main(["fake-telegram", "--port", "9"]))
"""


def test_fake_telegram_without_the_fake_extra_says_what_to_install() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_AIOHTTP],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "'fake' extra" in lines[0]
    assert "aiohttp" in lines[0]
