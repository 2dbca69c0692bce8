"""One exception family for everything a person can cause or fix.

Driver and library errors are translated into these at one boundary (``outbox.db`` for the
database, ``outbox.classify`` for Telegram) so that the command line can print one clear line
and pick an exit code without knowing where the error came from.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigError",
    "DatabaseUnavailable",
    "InvalidInput",
    "InvalidPayload",
    "NotFound",
    "OutboxError",
    "Refused",
    "SchemaMismatch",
    "SchemaMissing",
    "TelegramUnauthorized",
    "TelegramUnavailable",
    "Unhealthy",
]


class OutboxError(Exception):
    """Base class; ``str(err)`` is a complete sentence fit for a terminal. A subclass names
    its exit code in its header (``exit_code=2``) or keeps its parent's."""

    exit_code = 1

    def __init_subclass__(cls, *, exit_code: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code


class InvalidInput(OutboxError, exit_code=2):
    """Something typed on the command line or passed to the API does not parse."""


class InvalidPayload(InvalidInput):
    """A message payload that the relay would refuse; the text names the field."""


class NotFound(OutboxError, exit_code=2):
    """An id that names no row."""


class ConfigError(OutboxError, exit_code=3):
    """Configuration is missing or malformed (URL, token, flags)."""


class DatabaseUnavailable(OutboxError, exit_code=4):
    """The database does not answer."""


class SchemaMissing(OutboxError, exit_code=5):
    """The database answers but the tables are not there: ``outbox migrate`` was not run."""


class SchemaMismatch(OutboxError, exit_code=5):
    """The tables are not the ones this version expects: another program's ``outbox`` table,
    or a schema migrated by a newer version."""


class TelegramUnavailable(ConfigError):
    """The Bot API does not answer (or answers with something that is not the Bot API)."""


class TelegramUnauthorized(OutboxError, exit_code=6):
    """The Bot API rejected the token (401/404); the relay cannot go on with it."""


class Refused(OutboxError, exit_code=7):
    """An operator command declined to act on a row, and said why (e.g. replay of a sent row)."""


class Unhealthy(OutboxError, exit_code=8):
    """``outbox status`` found a problem an alert should catch (lag, stuck claims, failures)."""
