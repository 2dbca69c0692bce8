"""Adopting the outbox in a host app: examples/hostapp, driven as its developer would drive it.

Real ``alembic`` commands in processes of their own, run from the host's folder (which has a
``migrations/`` folder of its own), the host's own code enqueueing in its transactions, and
relay processes sending through the fake Bot API.

Here the unit tier's tests (no database); the others are in ``tests/db/test_adoption.py``,
``tests/e2e/test_adoption.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# outbox.configure (and an in-process CLI's --schema) set a process-wide value.
pytestmark = pytest.mark.usefixtures("schema_setting_restored")


# --- the runtime import graph ---------------------------------------------------------------


def test_the_runtime_import_graph_reaches_no_extra_no_demo_and_no_domain() -> None:
    program = (
        "import json, sys\n"
        "import outbox.cli, outbox.relay, outbox.migrate\n"
        "from outbox import *  # the public names load their modules on first use\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    modules = json.loads(done.stdout)
    assert "outbox.relay" in modules  # the probe imports what it claims to
    # aiohttp is the core's (the relay's HTTP client); the page's templates are the web extra's.
    forbidden = (
        "pgserver",
        "jinja2",
        "outbox.web",
        "reminders",
        "outbox_testing",
        "outbox.embedded",
    )
    reached = [m for m in modules if m.split(".")[0] in forbidden or m in forbidden]
    assert reached == []
