"""What importing outbox costs: a host app that only enqueues, and a command that sends
nothing."""

from __future__ import annotations

import subprocess
import sys

# A host app imports outbox to enqueue inside its own transactions; the Telegram client (and
# its HTTP stack) belongs to the relay and would add a fifth to the import for nothing. Nor is
# OpenTelemetry imported: enqueue reads a trace context only once the app has imported it.
_CHECK = """
import sys
from outbox import *  # every public name, each from its module
loaded = sorted(m for m in ("telegram", "httpx", "aiohttp", "opentelemetry") if m in sys.modules)
assert not loaded, f"import outbox loaded {loaded}"
"""


def test_import_outbox_loads_no_telegram_client() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


# The operator's commands speak psycopg; SQLAlchemy is the host's session's, the HTTP clients
# the relay's. Loading them would add about two thirds to every command's start.
_COMMAND = """
import sys
from outbox.cli import main
loaded = sorted(m for m in ("sqlalchemy", "telegram", "httpx", "aiohttp") if m in sys.modules)
assert not loaded, f"the outbox command loaded {loaded} before running any command"
"""


def test_the_command_line_starts_without_sqlalchemy_or_an_http_client() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COMMAND], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
