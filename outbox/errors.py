"""One exception family for everything a person can cause or fix.

Driver and library errors are translated into these at one boundary (``outbox.db`` for the
database, ``outbox.classify`` for Telegram) so that the command line can print one clear line
and pick an exit code without knowing where the error came from.
"""

from __future__ import annotations

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
    """Base class; ``str(err)`` is a complete sentence fit for a terminal."""

    exit_code = 1


class InvalidInput(OutboxError):
    """Something typed on the command line or passed to the API does not parse."""

    exit_code = 2


class InvalidPayload(InvalidInput):
    """A message payload that the relay would refuse; the text names the field."""


class NotFound(OutboxError):
    """An id that names no row."""

    exit_code = 2


class ConfigError(OutboxError):
    """Configuration is missing or malformed (URL, token, flags)."""

    exit_code = 3


class DatabaseUnavailable(OutboxError):
    """The database does not answer."""

    exit_code = 4


class SchemaMissing(OutboxError):
    """The database answers but the tables are not there: ``outbox migrate`` was not run."""

    exit_code = 5


class SchemaMismatch(OutboxError):
    """The tables are not the ones this version expects: another program's ``outbox`` table,
    or a schema migrated by a newer version."""

    exit_code = 5


class TelegramUnavailable(ConfigError):
    """The Bot API does not answer (or answers with something that is not the Bot API)."""


class TelegramUnauthorized(OutboxError):
    """The Bot API rejected the token (401/404); the relay cannot go on with it."""

    exit_code = 6


class Refused(OutboxError):
    """An operator command declined to act on a row, and said why (e.g. replay of a sent row)."""

    exit_code = 7


class Unhealthy(OutboxError):
    """``outbox status`` found a problem an alert should catch (lag, stuck claims, failures)."""

    exit_code = 8
