"""Keeps the bot token out of every log line, error text and database row; formats log lines
as text for people or as JSON for a log system."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "LOG_FORMATS",
    "MESSAGE_FIELDS",
    "JsonFormatter",
    "RedactingFormatter",
    "configure_logging",
    "redact",
    "register_secret",
]

# Anything shaped like a bot token, with or without the "bot" prefix of Bot API URLs.
_TOKEN_PATTERN = re.compile(r"\d{3,}:[A-Za-z0-9_-]{10,}")
_secrets: dict[str, str] = {}

LOG_FORMATS = ("text", "json")
# What a line about one message carries (``log.info(..., extra={"outbox_id": ...})``); the JSON
# lines give them as fields of their own, so a log system can find every line about a row.
MESSAGE_FIELDS = ("outbox_id", "key", "chat_id")


def register_secret(secret: str, label: str = "[token]") -> None:
    """Remember a secret so that ``redact`` replaces it by ``label`` whatever its shape."""
    if secret:
        _secrets[secret] = label
        # Longest first: a secret that contains another is replaced whole.
        ordered = sorted(_secrets.items(), key=lambda item: -len(item[0]))
        _secrets.clear()
        _secrets.update(ordered)


def redact(text: str) -> str:
    for secret, label in _secrets.items():
        text = text.replace(secret, label)
    return _TOKEN_PATTERN.sub("[token]", text)


class RedactingFormatter(logging.Formatter):
    """Redacts the whole formatted record, traceback included."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, the message
    fields where the line is about one message, and the traceback if any; redacted whole."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in MESSAGE_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        # Redacting the serialized line also covers the values of the message fields.
        return redact(json.dumps(line, ensure_ascii=False, default=str))


def configure_logging(level: int = logging.INFO, log_format: str = "text") -> None:
    """Log to stderr through a redacting formatter; quiet the libraries that log URLs."""
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # httpx logs every request URL (which holds the token) at INFO; telegram logs URLs and
    # message texts at DEBUG.
    # Library chatter (server start-up, migration steps) only when debugging.
    for name in ("pgserver", "alembic"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    logging.getLogger("telegram").setLevel(max(level, logging.INFO))
