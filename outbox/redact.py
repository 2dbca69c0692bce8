"""Keeps the bot token and the database password out of every log line, error text and
database row; formats log lines as text for people or as JSON for a log system."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

__all__ = [
    "LOG_FORMATS",
    "MESSAGE_FIELDS",
    "JsonFormatter",
    "RedactingFormatter",
    "configure_logging",
    "redact",
    "redact_url",
    "register_password",
    "register_secret",
]

# Anything shaped like a bot token, with or without the "bot" prefix of Bot API URLs, its colon
# as typed or percent-encoded (a token inside a URL's path or query).
_TOKEN_PATTERN = re.compile(r"\d{3,}(?::|%3[Aa])[A-Za-z0-9_-]{10,}")
# A password where it stands, which is the only place it is looked for: a short password
# ("postgres") replaced as a bare substring would also eat every word that contains it.
# In a URL's user part: from the first ":" after "scheme://user" to the last "@" of the URL
# (a password with an unencoded "/", "?", "#" or "@" misleads a URL parser, not this).
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:)\S*@")
# The same, anchored, for a text that is one URL: there the password may even hold a space.
_WHOLE_URL_PASSWORD = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*:).*@")
# password=... in a URL's query or a key=value (libpq conninfo) string, quoted or not.
_PASSWORD_PARAM = re.compile(r"(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)")
PASSWORD_LABEL = "***"  # noqa: S105 - what stands in for a password
_secrets: dict[str, str] = {}
_passwords: set[str] = set()

LOG_FORMATS = ("text", "json")
# What a line about one message carries (``log.info(..., extra={"outbox_id": ...})``); the JSON
# lines give them as fields of their own, so a log system can find every line about a row.
MESSAGE_FIELDS = ("outbox_id", "key", "chat_id")


def register_secret(secret: str, label: str = "[token]") -> None:
    """Remember a secret (a token: long and unlike any word) so that ``redact`` replaces it by
    ``label`` wherever it appears, as typed or percent-encoded."""
    if secret:
        found = {**_secrets, secret: label, quote(secret, safe=""): label}
        # Longest first: a secret that contains another is replaced whole.
        _secrets.clear()
        _secrets.update(sorted(found.items(), key=lambda item: -len(item[0])))


def register_password(password: str) -> None:
    """Remember a database password, so that ``redact`` finds it in a URL's user part or after
    ``password=`` even where the general patterns would not (a space in it, say)."""
    if password:
        _passwords.update({password, quote(password, safe="")})


def redact_url(url: str) -> str:
    """One URL (or conninfo string) with its password replaced, fit for a log.

    Works on the text, not on a parsed URL: a URL that does not parse must not leak either.
    """
    text = _WHOLE_URL_PASSWORD.sub(rf"\g<head>{PASSWORD_LABEL}@", url.strip(), count=1)
    return _redact_passwords(text)


# Where a password can stand at all: most log lines have neither, and are passed by one search.
_PASSWORD_PLACES = re.compile(r"://|(?i:password)\s*=")


def _redact_passwords(text: str) -> str:
    if not _PASSWORD_PLACES.search(text):
        return text
    for password in sorted(_passwords, key=len, reverse=True):
        if password not in text:
            continue
        escaped = re.escape(password)
        text = re.sub(rf"(://[^:/?#@\s]*:){escaped}@", rf"\g<1>{PASSWORD_LABEL}@", text)
        text = re.sub(rf"(?i)(\bpassword\s*=\s*){escaped}", rf"\g<1>{PASSWORD_LABEL}", text)
    text = _URL_PASSWORD.sub(rf"\g<head>{PASSWORD_LABEL}@", text)
    return _PASSWORD_PARAM.sub(rf"\g<1>{PASSWORD_LABEL}", text)


def redact(text: str) -> str:
    """The text without registered secrets, token-shaped strings, and passwords where they
    stand in a URL or a ``password=`` setting."""
    for secret, label in _secrets.items():
        text = text.replace(secret, label)
    return _TOKEN_PATTERN.sub("[token]", _redact_passwords(text))


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
    # Library chatter (server start-up, migration steps) only when debugging; httpx logs every
    # request URL (which holds the token) at INFO; telegram logs URLs and message texts at DEBUG.
    for name in ("pgserver", "alembic", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    logging.getLogger("telegram").setLevel(max(level, logging.INFO))
