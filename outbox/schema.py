"""Where the outbox lives: one PostgreSQL schema, chosen once for the app and every command
(default ``public``, where the lesson's plain SQL runs unchanged; ``OUTBOX_SCHEMA``,
``--schema`` or :func:`configure` pick another). Notification channels and the maintenance lock
are named after the schema, so two outboxes in one database never wake or block each other.
"""

from __future__ import annotations

import os
import re
import zlib

from outbox.errors import ConfigError, InvalidInput, OutboxError, SchemaMismatch, SchemaMissing

__all__ = [
    "DEFAULT_BOT",
    "DEFAULT_QUEUE",
    "DEFAULT_SCHEMA",
    "KNOWN_REVISIONS",
    "SCHEMA_REVISION",
    "checked_queue",
    "configure",
    "current_schema",
    "maintenance_lock_key",
    "notify_channel",
    "pause_channel",
    "resolve_schema",
    "schema_problem",
    "validate_queue",
    "validate_schema",
]

DEFAULT_SCHEMA = "public"
# The revision of the outbox's own migrations this code expects; every revision writes its id
# into the outbox table's comment, which the relay and the commands check at start.
SCHEMA_REVISION = "outbox_0019"
KNOWN_REVISIONS = (  # oldest first
    "outbox_0001",
    "outbox_0002",
    "outbox_0003",
    "outbox_0004",
    "outbox_0006",
    "outbox_0007",
    "outbox_0008",
    "outbox_0009",
    "outbox_0011",
    "outbox_0012",
    "outbox_0013",
    "outbox_0014",
    "outbox_0015",
    "outbox_0016",
    "outbox_0017",
    "outbox_0018",
    "outbox_0019",
)

# Lower-case identifiers only: they need no quoting rules of their own in SQL or channel names,
# and "outbox_" + the name still fits PostgreSQL's 63-byte identifier limit.
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,49}")
_configured: str | None = None


def validate_schema(name: str) -> str:
    """The schema name, or one clear error saying what a name may look like."""
    if not _NAME.fullmatch(name) or name.startswith("pg_"):
        raise ConfigError(
            f"schema name {name!r} is not usable: use lower-case letters, digits and _, "
            "starting with a letter or _, at most 50 characters, not pg_..."
        )
    return name


# A row's queue (navbat): one bot's messages. The table's constraint (outbox_0003) says the same.
DEFAULT_QUEUE = "default"
# The key of the limits and flood pause shared by a bot's relays when the sender names no bot
# (a Telegram sender names its bot by the token's public numeric part).
DEFAULT_BOT = "default"
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def validate_queue(name: str) -> str:
    """The queue name, or one clear error saying what a name may look like."""
    if not _QUEUE_NAME.fullmatch(name):
        raise ConfigError(
            f"queue name {name!r} is not usable: use letters, digits, '_', '.' and '-', "
            "1 to 64 characters"
        )
    return name


def checked_queue(name: str) -> str:
    """``validate_queue`` for a name given as input (the API, a command, the page): a refusal
    is ``InvalidInput``, in the same words."""
    try:
        return validate_queue(name)
    except ConfigError as err:
        raise InvalidInput(str(err)) from None


def configure(*, schema: str) -> None:
    """Set the app's outbox schema once, at start-up (before the first enqueue): what every
    function and ``Relay`` given no schema uses. Environment: ``OUTBOX_SCHEMA``."""
    global _configured  # noqa: PLW0603 - one process-wide setting, like logging's
    _configured = validate_schema(schema)


def current_schema() -> str:
    """The configured schema: :func:`configure`, else ``OUTBOX_SCHEMA``, else ``public``."""
    if _configured is not None:
        return _configured
    return validate_schema(os.environ.get("OUTBOX_SCHEMA", "").strip() or DEFAULT_SCHEMA)


def resolve_schema(schema: str | None) -> str:
    return current_schema() if schema is None else validate_schema(schema)


def notify_channel(schema: str) -> str:
    """The channel that new rows NOTIFY (the migration's trigger uses the same rule)."""
    return "outbox" if schema == DEFAULT_SCHEMA else f"outbox_{schema}"


def pause_channel(schema: str) -> str:
    return "outbox_pause" if schema == DEFAULT_SCHEMA else f"outbox_pause_{schema}"


def maintenance_lock_key(schema: str) -> int:
    """A 63-bit advisory lock key: "outbox" in the high bits, the schema's CRC in the low."""
    return (0x6F7574626F78 << 16) ^ zlib.crc32(schema.encode())


# The columns that make an ``outbox`` table this package's (a database migrated before the
# revision comment existed has them, and no comment).
OWN_COLUMNS = frozenset({"tur", "kalit", "payload", "holat", "urinish", "keyingi_urinish"})
COMMENT_PREFIX = "outbox-telegram "


def schema_problem(schema: str, facts: tuple[str, frozenset[str]] | None) -> OutboxError | None:
    """What is wrong with the outbox table found in ``schema`` (its comment and columns), for
    this version of the package; None if nothing is."""
    where = f"schema {schema} of this database"
    migrate = "run `outbox migrate`"
    if facts is None:
        return SchemaMissing(f"the outbox tables are missing in {where}: {migrate} first")
    comment, columns = facts
    if not comment.startswith(COMMENT_PREFIX):
        if columns >= OWN_COLUMNS:
            return SchemaMissing(
                f"the outbox tables in {where} are from an older version: {migrate}"
            )
        return SchemaMismatch(
            f"{where} already has a table named outbox that outbox-telegram did not create; "
            "put the outbox in a schema of its own with --schema or OUTBOX_SCHEMA"
        )
    revision = comment.removeprefix(COMMENT_PREFIX).strip()
    if revision == SCHEMA_REVISION:
        return None
    if revision in KNOWN_REVISIONS:
        return SchemaMissing(
            f"the outbox tables in {where} are at revision {revision}, this version needs "
            f"{SCHEMA_REVISION}: {migrate}"
        )
    return SchemaMismatch(
        f"the outbox tables in {where} are at revision {revision!r}, which this version of "
        f"outbox-telegram does not know (it needs {SCHEMA_REVISION}): a newer version migrated "
        "this database; upgrade the package"
    )
