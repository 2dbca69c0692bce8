"""Keeps the bot token out of every log line, error text and database row."""

from __future__ import annotations

import logging
import re

__all__ = ["RedactingFormatter", "configure_logging", "redact", "register_secret"]

# Anything shaped like a bot token, with or without the "bot" prefix of Bot API URLs.
_TOKEN_PATTERN = re.compile(r"\d{3,}:[A-Za-z0-9_-]{10,}")
_secrets: dict[str, str] = {}


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


def configure_logging(level: int = logging.INFO) -> None:
    """Log to stderr through the redacting formatter; quiet the libraries that log URLs."""
    handler = logging.StreamHandler()
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
