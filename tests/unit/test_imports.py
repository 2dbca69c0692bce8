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
