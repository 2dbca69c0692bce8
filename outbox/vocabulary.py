"""One table of names: each outbox column's Python name, its column, and the label people read.

The database speaks the lesson's language (Uzbek), Python English; they meet only here. Select
lists alias each column to its Python name (``o.urinish AS attempts``) and rows are read by
name, so a column added to a select list, or moved in it, cannot shift a record's fields.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "HISTORY",
    "MARKER",
    "OUTBOX",
    "PAYLOAD",
    "RELAY",
    "Name",
    "column",
    "entry_key",
    "label",
    "marker_label",
    "payload_label",
    "select",
]


@dataclass(frozen=True, slots=True)
class Name:
    python: str  # the attribute of the record (``Message.attempts``)
    column: str  # the column in the table (``urinish``)
    label: str  # what people read (CLI headers, JSON keys, the web page, logs)
    meaning: str


def _name(python: str, column: str, meaning: str) -> Name:
    # Labelled as the database spells it (in the CLI, JSON, the web page and the logs): what an
    # operator reads is what they type into psql.
    return Name(python, column, column, meaning)


# Every column of the outbox table, in the table's order (a test checks this against the
# database's own catalogue, so a new column cannot be left out).
OUTBOX: tuple[Name, ...] = (
    _name("id", "id", "the row's id"),
    _name("kind", "tur", "kind of message ('eslatma' = reminder)"),
    _name("key", "kalit", "idempotency key, unique per logical message"),
    _name("payload", "payload", "what to send (JSON)"),
    _name("state", "holat", "one of the four states"),
    _name("attempts", "urinish", "how many times the row was claimed"),
    _name("next_attempt_at", "keyingi_urinish", "the row is due from this time on"),
    _name("claimed_at", "band_vaqti", "when a relay claimed it"),
    _name("last_error", "oxirgi_xato", "the last error, in words"),
    _name("history", "tarix", "what happened to the row, oldest first"),
    _name("created_at", "yaratilgan", "when the row was enqueued"),
    _name("updated_at", "yangilangan", "when the row last changed"),
    _name("holder", "egasi", "the process that claimed it"),
    _name("alone", "yakka", "a suspect: claimed alone next time"),
    _name("queue", "navbat", "the queue: a lane of work that relays are told to serve"),
    _name("error_code", "xato_turi", "why the last attempt failed, as a word (FailureCode)"),
    _name("failed_at", "xato_vaqti", "when the row went to xato"),
    _name("batch", "partiya", "the batch (broadcast) the row belongs to, if any"),
    _name("priority", "ustuvorlik", "higher goes first within the bot's budget (-10..10)"),
    _name("earliest", "eng_erta", "may go from this time on, to keep a peak on time"),
    _name("expires_at", "eskirish", "never sent after this time"),
    _name("bot", "bot", "the public id of the bot that sends it (NULL: the relay's one token)"),
    _name("traceparent", "traceparent", "the W3C trace context of the span that enqueued it"),
    _name("tracestate", "tracestate", "that span's W3C tracestate, if it had one"),
    _name("place", "tartib", "its place in its chat's order: when first due (NULL: unordered)"),
    _name("chat", "suhbat", "the chat it goes to, a follow-up's from its original"),
    _name("quiet_hours", "tinch", "waits while its chat's quiet hours (tinch_soatlar) last"),
    _name("held_from", "tinch_oldin", "held by quiet hours: when it was due before that"),
)

# The sent marker (table yuborilgan) as a message shows it.
MARKER: tuple[Name, ...] = (
    _name("key", "kalit", "the key of the message that was sent"),
    _name("chat_id", "chat_id", "the chat it went to"),
    _name("message_id", "message_id", "Telegram's id of the delivered message"),
    _name("sent_at", "yuborilgan_vaqt", "when Telegram accepted it"),
    _name("message_ids", "message_ids", "an album's messages, in order (NULL for one message)"),
)

# Fields of a payload that a message shows beside its columns: the Bot API method (absent:
# sendMessage) and, for a follow-up, its original's key. Labelled as the payload spells them.
PAYLOAD: tuple[Name, ...] = (
    _name("method", "method", "the Bot API method it sends"),
    _name("original", "message_key", "a follow-up's original: the key of the message it acts on"),
)

# A relay of the fleet (table relaylar, outbox_0008) as ``outbox relays`` and the page show it.
# Labelled in English, unlike the message's fields: nobody types these into SQL, and the JSON
# keys are the ones monitoring scripts of other relays' registers expect (pid, host, queues).
RELAY: tuple[Name, ...] = tuple(
    Name(python, column, python, meaning)
    for python, column, meaning in (
        ("id", "id", "the id the relay picked at start"),
        ("host", "host", "the host it runs on"),
        ("pid", "pid", "its process id on that host"),
        ("version", "versiya", "the outbox-telegram version it runs"),
        ("queues", "navbatlar", "the queues it serves"),
        ("bots", "botlar", "the public ids of its bots"),
        ("rejected_bots", "rad_botlar", "those of its bots whose token Telegram rejected"),
        ("started_at", "boshlangan", "when it started"),
        ("last_seen", "oxirgi_signal", "its last heartbeat"),
        ("interval", "signal_oraligi", "seconds between its heartbeats"),
        ("in_flight", "jarayonda", "sends it had in flight at its last heartbeat"),
        ("totals", "jami", "what it did so far, by outcome"),
    )
)

# The fields of a tarix entry, a JSON object each (the statements that append one spell them
# in SQL; a test holds them to this table).
HISTORY: tuple[Name, ...] = (
    _name("moment", "vaqt", "when it happened"),
    _name("attempt", "urinish", "the row's attempt count then"),
    _name("error", "xato", "a failure, in words"),
    _name("error_code", "xato_turi", "a failure as a FailureCode"),
    _name("event", "hodisa", "what an operator did: replay, replay --force, cancel"),
    _name("last_error", "oxirgi_xato", "the error a replay cleared"),
    _name("marker", "yuborilgan", "the sent marker a forced replay removed"),
)

_BY_PYTHON = {name.python: name for name in OUTBOX}
_MARKER_BY_PYTHON = {name.python: name for name in MARKER}
_HISTORY_BY_PYTHON = {name.python: name for name in HISTORY}
_PAYLOAD_BY_PYTHON = {name.python: name for name in PAYLOAD}


def column(python: str) -> str:
    """The outbox column of a Python name (``column("attempts") == "urinish"``)."""
    return _BY_PYTHON[python].column


def label(python: str) -> str:
    """What people read for the field ``python`` of a message."""
    return _BY_PYTHON[python].label


def marker_label(python: str) -> str:
    return _MARKER_BY_PYTHON[python].label


def payload_label(python: str) -> str:
    """What people read for a field a message takes from its payload (``method``)."""
    return _PAYLOAD_BY_PYTHON[python].label


def entry_key(python: str) -> str:
    """The key of a tarix entry's field (``entry_key("moment") == "vaqt"``)."""
    return _HISTORY_BY_PYTHON[python].column


def select(alias: str, *names: str, **expressions: str) -> str:
    """A select list that names each value by its Python name: ``o.urinish AS attempts``;
    ``expressions`` give the SQL of a value that is not the bare column, ``{}`` the column."""
    items = [f"{alias}.{column(name)} AS {name}" for name in names]
    for name, expression in expressions.items():
        qualified = f"{alias}.{column(name)}" if name in _BY_PYTHON else ""
        items.append(f"{expression.format(qualified)} AS {name}")
    return ",\n    ".join(items)
