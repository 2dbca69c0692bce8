"""Logs a log system can read (``--log-format json``) and progress lines on a terminal.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_logs_progress.py``.
"""

from __future__ import annotations

import json
import logging
import sys

from outbox.redact import JsonFormatter
from tests.support import (
    TEST_TOKEN,
)


def test_a_json_line_has_the_fields_a_log_system_wants_and_no_token() -> None:
    try:
        raise RuntimeError(f"POST https://api.telegram.org/bot{TEST_TOKEN}/sendMessage failed")
    except RuntimeError:
        record = logging.LogRecord(
            "outbox.relay", logging.WARNING, __file__, 1, "outbox %s failed: token %s",
            (7, TEST_TOKEN), sys.exc_info(),
        )  # fmt: skip
    record.outbox_id, record.key, record.chat_id = 7, "vazifa:7", 42
    line = JsonFormatter().format(record)
    assert "\n" not in line and TEST_TOKEN not in line
    fields = json.loads(line)
    assert fields["level"] == "WARNING" and fields["logger"] == "outbox.relay"
    assert fields["message"] == "outbox 7 failed: token [token]"
    assert (fields["outbox_id"], fields["key"], fields["chat_id"]) == (7, "vazifa:7", 42)
    assert fields["time"].endswith("+00:00") and "T" in fields["time"]
    assert "RuntimeError" in fields["exception"] and "[token]" in fields["exception"]
