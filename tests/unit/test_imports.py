"""What importing outbox costs: a host app that only enqueues, and a command that sends
nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A host app imports outbox to enqueue inside its own transactions; the Telegram client (and
# its HTTP stack) belongs to the relay and would add a fifth to the import for nothing. Nor is
# OpenTelemetry imported: enqueue reads a trace context only once the app has imported it.
_HOST_APP = (
    "from outbox import *  # every public name, each from its module",
    ("telegram", "httpx", "aiohttp", "opentelemetry"),
)
# The operator's commands speak psycopg; SQLAlchemy is the host's session's, the HTTP clients
# the relay's. Loading them would add about two thirds to every command's start.
_COMMAND_LINE = ("from outbox.cli import main", ("sqlalchemy", "telegram", "httpx", "aiohttp"))


@pytest.mark.parametrize(("statement", "not_loaded"), [_HOST_APP, _COMMAND_LINE])
def test_importing_outbox_loads_only_what_its_user_needs(
    statement: str, not_loaded: tuple[str, ...]
) -> None:
    program = (
        f"import sys\n{statement}\n"
        f"loaded = sorted(m for m in {not_loaded!r} if m in sys.modules)\n"
        "assert not loaded, f'loaded {loaded}'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
