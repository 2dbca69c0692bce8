"""The app's side: async enqueue with both drivers, payloads refused at enqueue, the operator
functions from Python, and the commands' answers to a missing or secret-bearing database URL.

Here the e2e tier's tests (processes); the others are in ``tests/db/test_app_api.py``,
``tests/unit/test_app_api.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import TEST_TOKEN, wait_until

# outbox.configure (and an in-process CLI's --schema) set a process-wide value.
pytestmark = pytest.mark.usefixtures("schema_setting_restored")


# --- the commands: no URL, and a URL with a password in it -------------------------------------


SECRET = "Qs-s3cret-77"
SECRET_URLS = {
    # Unreachable (port 1): the error line names the server, not the password.
    "query": (f"postgresql://outbox@127.0.0.1:1/outbox?sslmode=disable&password={SECRET}", 4),
    "user-part": (f"postgresql://outbox:{SECRET}@127.0.0.1:1/outbox", 4),
    # Does not parse as a URL: an unencoded "/" in the password made urllib read a port.
    "malformed": (f"postgresql://outbox:{SECRET[:3]}/{SECRET[3:]}@127.0.0.1/outbox", 3),
    "conninfo": (f"host=127.0.0.1 port=1 password={SECRET}", 3),
}


@pytest.mark.parametrize("which", list(SECRET_URLS))
@pytest.mark.parametrize(
    "argv",
    [
        ["outbox", "migrate"],
        ["outbox", "relay", "--drain"],
        ["outbox", "status"],
        ["outbox", "replay", "1"],
        ["reminders", "migrate"],
        ["reminders", "list"],
    ],
    ids=" ".join,
)
def test_a_database_password_is_never_printed(which: str, argv: list[str]) -> None:
    url, exit_code = SECRET_URLS[which]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTBOX_")}
    env.update(OUTBOX_DATABASE_URL=url, TELEGRAM_BOT_TOKEN=TEST_TOKEN, OUTBOX_LOG_LEVEL="DEBUG")
    program, *rest = argv
    if rest[0] == "relay" and exit_code == 4:
        # A relay waits for an unreachable database (it may be starting too), saying so.
        code, output = _until_it_waits(env, [f"{program}.cli", *rest])
        assert code == 0, output  # stopped by SIGTERM while waiting
    else:
        done = subprocess.run(
            [sys.executable, "-m", f"{program}.cli", *rest],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        output = done.stdout + done.stderr
        assert done.returncode == exit_code, output
    assert "Traceback" not in output
    for piece in (SECRET, SECRET[:3] + "/", SECRET[3:]):
        assert piece not in output, output
    assert "***" in output  # the URL is shown, redacted, so the operator knows which one


def _until_it_waits(env: dict[str, str], argv: list[str]) -> tuple[int, str]:
    """Run a command until it logs that it waits for the database, then SIGTERM it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "output"
        with path.open("w") as out:
            proc = subprocess.Popen([sys.executable, "-m", *argv], env=env, stdout=out, stderr=out)
        try:
            wait_until(lambda: "waiting for" in path.read_text(), 30, "a line saying it waits")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
        return code, path.read_text()
