"""Messages as people see them, labelled as the database spells them (``outbox.vocabulary``):
what an operator reads is what they type into ``psql``."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outbox.ops.views._text import clip, iso, json_text, span, table, when
from outbox.payload import UnreadablePayload
from outbox.queries import Hold, Message, ReplayResult, SentMarker
from outbox.quiet import read_hours, zone
from outbox.schema import DEFAULT_QUEUE
from outbox.states import State
from outbox.vocabulary import entry_key, label, marker_label, payload_label

__all__ = [
    "STATE_NAMES",
    "chat_of",
    "extra_payload",
    "history",
    "hold_line",
    "holds_json",
    "message_json",
    "message_lines",
    "messages_table",
    "queue_worth_showing",
    "replay_refusal",
    "replayed_line",
    "text_of",
    "window_of",
]

RAW_PAYLOAD_WIDTH = 2000  # an unreadable payload is shown as its JSON text, clipped
ERROR_WIDTH = 60  # the table's oxirgi_xato column; `outbox show` and --json give it in full
KEY_WIDTH = 40

# The database's names first, as the CLI prints them, with the English word beside them.
STATE_NAMES = {
    State.PENDING.value: "pending",
    State.IN_PROGRESS.value: "in progress",
    State.DONE.value: "done",
    State.FAILED.value: "failed",
}

# Why a row in another state is not replayed: what that state means for it.
_NOT_FAILED: dict[str, str] = {
    State.PENDING: "it is already waiting to be sent",
    State.IN_PROGRESS: "a relay is sending it right now",
    State.DONE: "it was delivered",
}

# The sent marker's field in a message's JSON and `outbox show`: the marker table's name.
MARKER_LABEL = "yuborilgan"

# The fields of a message that `outbox show` and its JSON give, in order, by Python name (the
# payload, tarix and sent marker follow, shown in a form of their own).
SHOWN_FIELDS = (
    "id",
    "kind",
    "queue",
    "bot",
    "key",
    "state",
    "attempts",
    "next_attempt_at",
    "priority",
    "earliest",
    "expires_at",
    "claimed_at",
    "last_error",
    "error_code",
    "failed_at",
    "batch",
    "created_at",
    "updated_at",
    "traceparent",
)

# What a tarix entry leads with: the failure, or what an operator did.
HEADLINE = (entry_key("error"), entry_key("event"))

# The list's window column: eng_erta and eskirish as offsets from keyingi_urinish (shown
# beside it), "-1m10s..+1h": may go 70 s early, never sent more than an hour late.
WINDOW_HEADER = f"{label('earliest')}..{label('expires_at')}"


def queue_worth_showing(messages: Sequence[Message]) -> bool:
    """Whether a list needs the navbat column: when a named queue is among its rows, even alone."""
    return any(m.queue != DEFAULT_QUEUE for m in messages)


def window_of(m: Message) -> str:
    """A row's window and expiry, relative to its keyingi_urinish (times when that is infinite)."""
    if m.earliest is None and m.expires_at is None:
        return "-"
    due = m.next_attempt_at

    def offset(moment: datetime | None, sign: str) -> str:
        if moment is None:
            return ""
        if due is None:
            return when(moment)
        return sign + span(abs((moment - due).total_seconds()))

    return f"{offset(m.earliest, '-')}..{offset(m.expires_at, '+')}"


def _kind_of(m: Message, with_method: bool) -> str:
    if not with_method:
        return m.kind
    original = f" -> {clip(m.original, KEY_WIDTH)}" if m.original else ""
    return f"{m.kind} {m.method}{original}"


def messages_table(messages: Sequence[Message]) -> list[str]:
    """The list; the optional columns (queue, method, priority, window) when a row needs one."""
    with_method = any(m.method != "sendMessage" for m in messages)
    windowed = any(m.earliest is not None or m.expires_at is not None for m in messages)
    # Each column: its header, its cell, whether it is right-aligned, whether it is shown.
    columns: list[tuple[str, Callable[[Message], str], bool, bool]] = [
        (label("id"), lambda m: str(m.id), True, True),
        # Beside the id: with several bots, which one sends a row is the first question.
        (label("queue"), lambda m: m.queue, False, queue_worth_showing(messages)),
        (label("kind"), lambda m: _kind_of(m, with_method), False, True),
        (label("key"), lambda m: clip(m.key, KEY_WIDTH), False, True),
        (label("state"), lambda m: m.state, False, True),
        (label("attempts"), lambda m: str(m.attempts), True, True),
        (label("priority"), lambda m: str(m.priority), True, any(m.priority for m in messages)),
        (label("next_attempt_at"), lambda m: when(m.next_attempt_at), False, True),
        (WINDOW_HEADER, window_of, False, windowed),
        (label("last_error"), lambda m: clip(m.last_error, ERROR_WIDTH), False, True),
    ]
    shown = [(header, cell, right) for header, cell, right, wanted in columns if wanted]
    rows = [[cell(m) for _, cell, _ in shown] for m in messages]
    numeric = {i for i, (_, _, right) in enumerate(shown) if right}
    return table([header for header, _, _ in shown], rows, numeric)


def _hold_original(h: Hold, at: str) -> str:
    state, _, key = (h.detail or "").partition(" ")
    return f"its original {key!r}: row {h.row_id} ({state})"


def _hold_quiet(h: Hold, at: str) -> str:
    # The end as the chat's clock shows it too: what the person set.
    hours = read_hours(f"00:00 01:00 {h.detail}")
    if h.at is None or hours is None:
        return f"quiet hours until {at} ({h.detail})"
    local = h.at.astimezone(zone(hours.tz)).strftime("%H:%M")
    return f"quiet hours until {at} ({local} {hours.tz})"


# Each reason of message_holds in words; ``at`` is the hold's moment as shown.
_HOLD_TEXT: dict[str, Callable[[Hold, str], str]] = {
    "earlier": lambda h, at: (
        f"an earlier message of its chat: row {h.row_id} ({h.detail}, "
        f"{label('next_attempt_at')} {at})"
    ),
    "original": _hold_original,
    "pause": lambda h, at: f"a pause of its {h.detail} (outbox resume)",
    "flood": lambda h, at: f"its bot's flood pause (Telegram's 429, bot {h.detail}) until {at}",
    "chat": lambda h, at: f"its chat's next free moment ({h.detail}): {at}",
    "window": lambda h, at: (
        f"its window: due {at}, may go from {when(h.opens)} if the bot's plan needs it"
    ),
    "quiet": _hold_quiet,
    "due": lambda h, at: f"its time: due {at}",
}


def hold_line(hold: Hold) -> str:
    """What holds a pending row, in words (``outbox show``, the page)."""
    shown = _HOLD_TEXT.get(hold.reason)
    return shown(hold, when(hold.at)) if shown else f"{hold.reason}: {hold.detail or '-'}"


def holds_json(holds: Sequence[Hold]) -> list[dict[str, Any]]:
    return [
        {
            "reason": h.reason,
            "id": h.row_id,
            "detail": h.detail,
            "until": iso(h.at),
            "opens": iso(h.opens),
            "text": hold_line(h),
        }
        for h in holds
    ]


def _marker_json(marker: SentMarker | None) -> dict[str, Any] | None:
    if marker is None:
        return None
    shown: dict[str, Any] = {
        marker_label("chat_id"): marker.chat_id,
        marker_label("message_id"): marker.message_id,
        marker_label("sent_at"): marker.sent_at.isoformat(),
    }
    if marker.message_ids:
        shown[marker_label("message_ids")] = list(marker.message_ids)
    return shown


def message_json(m: Message) -> dict[str, Any]:
    fields = {
        label(name): iso(value) if isinstance(value, datetime) else value
        for name in SHOWN_FIELDS
        for value in (getattr(m, name),)
    }
    return {
        **fields,
        payload_label("method"): m.method,
        payload_label("original"): m.original,
        # An unreadable payload (nested too deeply for Python) as its JSON text, in a string.
        label("payload"): m.payload.text if isinstance(m.payload, UnreadablePayload) else m.payload,
        label("history"): m.history,
        MARKER_LABEL: _marker_json(m.marker),
        # What holds a pending row back: the claim's reasons, each with its row or moment.
        "waits_for": holds_json(m.holds) if m.state == State.PENDING else None,
    }


def _marker_text(marker: SentMarker) -> str:
    ids = marker.message_ids
    what = f"messages {', '.join(map(str, ids))}" if ids else f"message {marker.message_id}"
    return f"sent at {when(marker.sent_at)} as Telegram {what} in chat {marker.chat_id}"


def _split_entry(entry: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """A tarix entry as its moment (shown), its attempt and what else it holds."""
    rest = dict(entry)
    raw_time, attempt = rest.pop(entry_key("moment"), None), rest.pop(entry_key("attempt"), None)
    try:
        moment = when(datetime.fromisoformat(raw_time)) if raw_time else "-"
    except (TypeError, ValueError):
        moment = str(raw_time)
    return moment, attempt, rest


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json_text(value)


def _history_line(entry: Any) -> str:
    """One tarix entry: when, which attempt, then what happened (the error first)."""
    if not isinstance(entry, dict):
        return "  " + _plain(entry)  # written by hand
    moment, attempt, rest = _split_entry(entry)
    first = [key for key in HEADLINE if key in rest]
    order = first + [key for key in rest if key not in first]
    parts = [f"{key}: {_plain(rest[key])}" for key in order]
    return f"  {moment}  urinish {attempt if attempt is not None else '-'}  " + "; ".join(parts)


def _shown(value: Any) -> str:
    if isinstance(value, datetime):
        return when(value)
    return "-" if value is None or value == "" else str(value)


def message_lines(m: Message) -> list[str]:
    fields = [(label(name), _shown(getattr(m, name))) for name in SHOWN_FIELDS]
    fields.append((payload_label("method"), m.method))
    if m.original is not None:
        fields.append((payload_label("original"), m.original))
    fields.append((MARKER_LABEL, "-" if m.marker is None else _marker_text(m.marker)))
    lines = [f"{name:<16} {value}" for name, value in fields]
    if m.state == State.PENDING:
        lines.append(f"waits for ({len(m.holds)})" if m.holds else "waits for        nothing")
        lines.extend("  " + hold_line(h) for h in m.holds)
    if isinstance(m.payload, UnreadablePayload):
        lines.append(f"payload          unreadable: {m.payload.reason}")
        lines.append("  " + clip(m.payload.text, RAW_PAYLOAD_WIDTH))
    else:
        lines.append("payload")
        lines.extend("  " + line for line in json_text(m.payload, indent=2).splitlines())
    lines.append(f"tarix ({len(m.history)})")
    lines.extend(_history_line(entry) for entry in m.history)
    return lines


def chat_of(message: Message) -> str:
    payload = message.payload
    chat = payload.get("chat_id") if isinstance(payload, dict) else None
    if chat is None and message.original is not None:
        return f"(the chat of {message.original})"  # a follow-up: its original's chat
    return "-" if chat is None else str(chat)


def text_of(message: Message) -> str:
    """The text a person reads: a message's text, or a photo's (an album's first) caption."""
    payload = message.payload
    if not isinstance(payload, dict):
        return ""
    text = payload.get("text", payload.get("caption"))
    media = payload.get("media")
    if text is None and isinstance(media, list) and media and isinstance(media[0], dict):
        text = media[0].get("caption")
    return "" if text is None else str(text)


def extra_payload(message: Message) -> str:
    """The payload's other fields (parse_mode, buttons...) as JSON, or '' if none."""
    payload = message.payload
    if not isinstance(payload, dict):
        return json.dumps(payload, ensure_ascii=False)
    rest = {k: v for k, v in payload.items() if k not in {"chat_id", "text"}}
    return json.dumps(rest, ensure_ascii=False, indent=2, sort_keys=True) if rest else ""


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    moment: str
    attempt: str
    what: str  # the error or the event (replay, cancel)
    details: str  # anything else the entry holds, as JSON


def history(message: Message) -> list[HistoryEntry]:
    """The tarix entries, oldest first, in the CLI's order: error or event, then the rest."""
    entries = []
    for raw in message.history:
        shown, attempt, rest = _split_entry(raw if isinstance(raw, dict) else {"entry": raw})
        what = " / ".join(str(rest.pop(key)) for key in HEADLINE if key in rest)
        details = json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else ""
        entries.append(
            HistoryEntry(shown, "-" if attempt is None else str(attempt), what or "-", details)
        )
    return entries


def replayed_line(result: ReplayResult, *, forced: bool) -> str:
    line = f"replayed message {result.id}: {State.FAILED} -> {State.PENDING}"
    if forced and result.marker is not None:
        line += f"; it was {_marker_text(result.marker)}, and will be sent again"
    return line


def blocked_refusal(result: ReplayResult) -> str:
    assert result.blocked_chat is not None
    bot = "its bot" if result.bot is None else f"bot {result.bot}"
    bot_option = "" if result.bot is None else f" --bot {result.bot}"
    return (
        f"chat {result.blocked_chat} blocked {bot} or removed it (Telegram said so); "
        f"unblock it first: outbox chats --unblock {result.blocked_chat}{bot_option}"
    )


def replay_refusal(result: ReplayResult, *, force_hint: bool = True) -> str:
    """Why a row was not replayed; ``force_hint`` names the CLI's --force (the page: a button)."""
    if result.state is None:
        return f"no outbox message with id {result.id}"
    if result.state != State.FAILED:
        reason = _NOT_FAILED.get(result.state, "only failed messages are replayed")
        if result.superseded:
            reason = "it was superseded by a newer edit or a delete, and never sent"
        if result.marker is not None:
            reason += f", {_marker_text(result.marker)}"
        return (
            f"message {result.id} not replayed: it is {result.state}, not {State.FAILED} ({reason})"
        )
    if result.blocked_chat is not None:
        return f"message {result.id} not replayed: {blocked_refusal(result)}"
    if result.original is not None:
        was = result.original_state or "no message has that key"
        return (
            f"message {result.id} not replayed: it acts on {result.original!r}, which was "
            f"never sent ({was}); replay that one first (or both at once)"
        )
    marker = result.marker
    assert marker is not None  # a failed row is refused only for its sent marker
    said = f"message {result.id} not replayed: it was already {_marker_text(marker)}"
    return f"{said}; --force sends it again" if force_hint else said


def replay_json(results: Sequence[ReplayResult]) -> dict[str, Any]:
    return {
        "replayed": [r.id for r in results if r.replayed],
        "refused": [
            {"id": r.id, "holat": r.state, "reason": replay_refusal(r)}
            for r in results
            if not r.replayed and r.state is not None
        ],
        "unknown": [r.id for r in results if r.state is None],
    }
