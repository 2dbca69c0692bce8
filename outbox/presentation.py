"""How the outbox is shown to people, by the CLI and the web page alike: aligned tables, one
message in full, JSON documents, the lines of the maintenance commands.

Fields are labelled from the one table of names (``outbox.vocabulary``) and states are the
database's, so that what an operator reads here is what they type into ``psql``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from outbox.durations import format_duration
from outbox.payload import UnreadablePayload
from outbox.queries import (
    EXPIRING_WITHIN,
    BotFigures,
    LaneFigures,
    Message,
    Pruned,
    QueueFigures,
    QueueStatus,
    Reaped,
    RelayRecord,
    ReplayResult,
    SentMarker,
    TokenState,
)
from outbox.schema import DEFAULT_QUEUE
from outbox.states import FailureCode, State
from outbox.vocabulary import RELAY, entry_key, label, marker_label, payload_label

span = format_duration  # how every duration is shown to operators

__all__ = [
    "HEADLINE",
    "MARKER_LABEL",
    "SHOWN_FIELDS",
    "lanes_json",
    "lanes_lines",
    "message_json",
    "message_lines",
    "messages_table",
    "pruned_json",
    "pruned_text",
    "queue_worth_showing",
    "queues_json",
    "queues_table",
    "reaped_json",
    "reaped_text",
    "relay_json",
    "relays_table",
    "replay_refusal",
    "replayed_line",
    "span",
    "split_history_entry",
    "status_lines",
    "unserved_line",
    "when",
]

# An unreadable payload is shown as its JSON text, clipped to this many characters.
RAW_PAYLOAD_WIDTH = 2000
ERROR_WIDTH = 60  # the table's oxirgi_xato column; `outbox show` and --json give it in full
KEY_WIDTH = 40

# Why a row in another state is not replayed: what that state means for it.
_NOT_FAILED: dict[str, str] = {
    State.PENDING: "it is already waiting to be sent",
    State.IN_PROGRESS: "a relay is sending it right now",
    State.DONE: "it was delivered",
}


def when(moment: datetime | None) -> str:
    """A time in UTC, to the second: the same answer on every operator's machine."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _clip(text: str | None, width: int) -> str:
    if not text:
        return "-"
    line = " ".join(text.split())  # one line per row, whatever the error contained
    return line if len(line) <= width else line[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> list[str]:
    """Columns padded to their widest cell; numbers right-aligned; no trailing spaces."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = []
    for row in (headers, *rows):
        cells = [
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def queue_worth_showing(messages: Sequence[Message]) -> bool:
    """Whether a list needs the navbat column: not when every row is in the default queue (an
    outbox with one bot), always when a named queue is among them, even alone (the rows of one
    bot out of several)."""
    return any(m.queue != DEFAULT_QUEUE for m in messages)


def methods_worth_showing(messages: Sequence[Message]) -> bool:
    """Whether a list needs a method column: only when a row sends more than a text."""
    return any(m.method != "sendMessage" for m in messages)


def _kind_of(m: Message, with_method: bool) -> str:
    if not with_method:
        return m.kind
    original = f" -> {_clip(m.original, KEY_WIDTH)}" if m.original else ""
    return f"{m.kind} {m.method}{original}"


def priorities_worth_showing(messages: Sequence[Message]) -> bool:
    """Whether a list needs the ustuvorlik column: only when a row has a priority."""
    return any(m.priority != 0 for m in messages)


def windows_worth_showing(messages: Sequence[Message]) -> bool:
    """Whether a list needs the window column: only when a row has a window or an expiry."""
    return any(m.earliest is not None or m.expires_at is not None for m in messages)


# The list's window column: eng_erta and eskirish as offsets from keyingi_urinish (shown
# beside it), "-1m10s..+1h": may go 70 s early, never sent more than an hour late.
WINDOW_HEADER = f"{label('earliest')}..{label('expires_at')}"


def window_of(m: Message) -> str:
    """A row's window and expiry in a few characters, relative to its keyingi_urinish (or as
    times, when that is infinite); '-' for a row with neither."""
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


def messages_table(messages: Sequence[Message]) -> list[str]:
    with_method = methods_worth_showing(messages)
    # (header, cells, right-aligned), in order; the optional columns only when a row needs one.
    columns: list[tuple[str, list[str], bool]] = [
        (label("id"), [str(m.id) for m in messages], True)
    ]
    if queue_worth_showing(messages):
        # Beside the id: with several bots, which one sends a row is the first question.
        columns.append((label("queue"), [m.queue for m in messages], False))
    columns += [
        (label("kind"), [_kind_of(m, with_method) for m in messages], False),
        (label("key"), [_clip(m.key, KEY_WIDTH) for m in messages], False),
        (label("state"), [m.state for m in messages], False),
        (label("attempts"), [str(m.attempts) for m in messages], True),
    ]
    if priorities_worth_showing(messages):
        columns.append((label("priority"), [str(m.priority) for m in messages], True))
    columns.append((label("next_attempt_at"), [when(m.next_attempt_at) for m in messages], False))
    if windows_worth_showing(messages):
        columns.append((WINDOW_HEADER, [window_of(m) for m in messages], False))
    columns.append(
        (label("last_error"), [_clip(m.last_error, ERROR_WIDTH) for m in messages], False)
    )
    headers = [header for header, _, _ in columns]
    rows = list(zip(*(cells for _, cells, _ in columns), strict=True))
    return table(headers, rows, numeric={i for i, (_, _, right) in enumerate(columns) if right})


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


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


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
)


def message_json(m: Message) -> dict[str, Any]:
    fields = {
        label(name): _iso(value) if isinstance(value, datetime) else value
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
    }


def _marker_text(marker: SentMarker) -> str:
    ids = marker.message_ids
    what = f"messages {', '.join(map(str, ids))}" if ids else f"message {marker.message_id}"
    return f"sent at {when(marker.sent_at)} as Telegram {what} in chat {marker.chat_id}"


# What a tarix entry leads with: the failure, or what an operator did.
HEADLINE = (entry_key("error"), entry_key("event"))


def split_history_entry(entry: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """A tarix entry as its moment (shown), its attempt and what else it holds."""
    rest = dict(entry)
    raw_time, attempt = rest.pop(entry_key("moment"), None), rest.pop(entry_key("attempt"), None)
    try:
        moment = when(datetime.fromisoformat(raw_time)) if raw_time else "-"
    except (TypeError, ValueError):
        moment = str(raw_time)
    return moment, attempt, rest


def _history_line(entry: Any) -> str:
    """One tarix entry: when, which attempt, then what happened (the error first)."""
    if not isinstance(entry, dict):
        return "  " + _plain(entry)  # written by hand
    moment, attempt, rest = split_history_entry(entry)
    first = [key for key in HEADLINE if key in rest]
    order = first + [key for key in rest if key not in first]
    parts = [f"{key}: {_plain(rest[key])}" for key in order]
    return f"  {moment}  urinish {attempt if attempt is not None else '-'}  " + "; ".join(parts)


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


def _json_text(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, indent=indent, ensure_ascii=False, sort_keys=True)
    except RecursionError:
        return "(nested too deeply to print)"


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
    if isinstance(m.payload, UnreadablePayload):
        lines.append(f"payload          unreadable: {m.payload.reason}")
        lines.append("  " + _clip(m.payload.text, RAW_PAYLOAD_WIDTH))
    else:
        lines.append("payload")
        lines.extend("  " + line for line in _json_text(m.payload, indent=2).splitlines())
    lines.append(f"tarix ({len(m.history)})")
    lines.extend(_history_line(entry) for entry in m.history)
    return lines


def replayed_line(result: ReplayResult, *, forced: bool) -> str:
    line = f"replayed message {result.id}: {State.FAILED} -> {State.PENDING}"
    if forced and result.marker is not None:
        line += f"; it was {_marker_text(result.marker)}, and will be sent again"
    return line


def replay_refusal(result: ReplayResult, *, force_hint: bool = True) -> str:
    """Why a row was not replayed, in one line; ``force_hint``: name the CLI's --force."""
    if result.state is None:
        return f"no outbox message with id {result.id}"
    if result.state != State.FAILED:
        reason = _NOT_FAILED.get(result.state, "only failed messages are replayed")
        if result.marker is not None:
            reason += f", {_marker_text(result.marker)}"
        return (
            f"message {result.id} not replayed: it is {result.state}, not {State.FAILED} ({reason})"
        )
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


def status_lines(status: QueueStatus, *, lease: float, max_lag: float) -> list[str]:
    def figure(name: str, n: int) -> str:
        return f"~{n}" if name in status.estimated else str(n)

    about = "about: from table statistics"
    rows = [
        (state, figure(state, n), about if state in status.estimated else "")
        for state, n in status.counts.items()
    ]
    rows += [
        (
            "lag",
            span(status.lag_seconds),
            f"oldest due pending row (max {span(max_lag)})",
        ),
        (
            "stuck",
            str(status.stuck),
            f"claims older than the {span(lease)} lease or without a claim time; "
            "pending rows never due",
        ),
        (
            "markers",
            figure("markers", status.markers),
            "sent markers (yuborilgan)" + (f"; {about}" if "markers" in status.estimated else ""),
        ),
    ]
    rows += lanes_lines(status.lanes)
    width = max(len(value) for _, value, _ in rows)
    lines = [f"{name:<13} {value:>{width}}  {note}".rstrip() for name, value, note in rows]
    if len(status.queues) > 1:
        lines += ["", *queues_table(status.queues)]
    return lines


def lanes_lines(lanes: LaneFigures) -> list[tuple[str, str, str]]:
    """The status's lines for priorities, windows and expiry (name, figure, note): only the
    ones that say something, so that an outbox without lanes shows none."""
    lines = []
    if lanes.prioritised:
        per = ", ".join(f"{priority}: {n}" for priority, n in lanes.due_per_priority.items())
        lines.append(
            (
                "priorities",
                str(sum(lanes.due_per_priority.values())),
                f"due pending rows per {label('priority')}: {per}",
            )
        )
    if lanes.windowed:
        lines.append(
            (
                "windowed",
                str(lanes.windowed),
                f"pending rows with a delivery window ({label('earliest')}: may go early)",
            )
        )
    if lanes.expiring:
        lines.append(
            (
                "expiring",
                str(lanes.expiring),
                f"pending rows whose {label('expires_at')} is within {span(EXPIRING_WITHIN)}",
            )
        )
    if lanes.expired:
        lines.append(
            (
                "expired",
                str(lanes.expired),
                f"{State.FAILED} rows that expired unsent ({label('error_code')} "
                f"{FailureCode.EXPIRED})",
            )
        )
    return lines


def lanes_json(lanes: LaneFigures) -> dict[str, Any]:
    """The same figures, always all of them (JSON object keys are strings: "10", "-5")."""
    return {
        "due_per_priority": {str(p): n for p, n in lanes.due_per_priority.items()},
        "windowed": lanes.windowed,
        "expiring_within_hour": lanes.expiring,
        "expired": lanes.expired,
    }


def queues_table(queues: Mapping[str, QueueFigures]) -> list[str]:
    """One line per queue: its rows per state, lag and stuck rows (done rows as ``-`` when the
    outbox is too large to count them per queue)."""
    states = tuple(State)

    def count(n: int | None) -> str:
        return "-" if n is None else str(n)

    rows = [
        (
            name,
            *(count(figures.counts[state]) for state in states),
            span(figures.lag_seconds),
            str(figures.stuck),
        )
        for name, figures in queues.items()
    ]
    return table((label("queue"), *states, "lag", "stuck"), rows, numeric={1, 2, 3, 4, 5, 6})


def queues_json(queues: Mapping[str, QueueFigures]) -> dict[str, Any]:
    return {
        name: {
            label("state"): figures.counts,
            "lag_seconds": figures.lag_seconds,
            "stuck": figures.stuck,
            "stuck_claims": figures.stuck_claims,
            "never_due": figures.never_due,
        }
        for name, figures in queues.items()
    }


# --- maintenance ---------------------------------------------------------------------------------


def reaped_text(reaped: Reaped) -> str:
    """``outbox reap``'s line and the relay's log line for one reaper round."""
    return f"{reaped.pending} back to {State.PENDING}, {reaped.failed} to {State.FAILED}"


def reaped_json(reaped: Reaped) -> dict[str, int]:
    return {State.PENDING: reaped.pending, State.FAILED: reaped.failed}


def pruned_text(pruned: Pruned) -> str:
    """The relay's log line for a retention run that deleted something."""
    return f"{pruned.done_rows} {State.DONE} rows and {pruned.markers} sent markers"


def pruned_json(pruned: Pruned) -> dict[str, int]:
    return {State.DONE: pruned.done_rows, MARKER_LABEL: pruned.markers}


# --- the fleet -----------------------------------------------------------------------------------


def relay_json(relay: RelayRecord) -> dict[str, Any]:
    """One relay of the register; times in ISO 8601, ``silent_seconds`` since its heartbeat."""
    document: dict[str, Any] = {}
    for name in RELAY:
        value = getattr(relay, name.python)
        if isinstance(value, datetime):
            value = _iso(value)
        elif isinstance(value, tuple):
            value = list(value)
        document[name.label] = value
    document["alive"] = relay.alive
    document["silent_seconds"] = round(relay.silent_seconds, 3)
    return document


def relays_table(relays: Sequence[RelayRecord]) -> list[str]:
    """One line per relay: where it runs, what it serves, whether it is alive."""
    rows = [
        (
            r.host,
            str(r.pid),
            ",".join(r.queues),
            _bots_cell(r),
            "alive" if r.alive else "gone",
            f"{span(round(r.silent_seconds))} ago",
            when(r.started_at),
            str(r.in_flight),
            str(r.totals.get("sent", 0)),
            r.version,
        )
        for r in relays
    ]
    headers = ("host", "pid", "queues", "bots", "state", "last seen", "started", "in flight")
    return table((*headers, "sent", "version"), rows, numeric={1, 7, 8})


def _bots_cell(relay: RelayRecord) -> str:
    """The bots a relay sends for: their ids, or how many once there are more than a few."""
    if not relay.bots:
        return "-"
    shown = ",".join(relay.bots) if len(relay.bots) <= 3 else f"{len(relay.bots)} bots"
    return shown + (f" ({len(relay.rejected_bots)} rejected)" if relay.rejected_bots else "")


def unserved_line(unserved: Mapping[str, int]) -> str:
    """The warning of ``outbox status`` and the page: due rows that no live relay will send."""
    parts = [f"{due} in {name}" for name, due in unserved.items()]
    return (
        f"due rows wait and no live relay serves their queue: {', '.join(parts)} "
        "(start a relay with --queue for it; `outbox relays` lists the fleet)"
    )


# --- bots (relays with a folder of tokens) ---------------------------------------------------


def bot_state(bot: BotFigures) -> str:
    """One word for where a bot stands: why its rows wait, if they do."""
    if bot.token is not TokenState.SERVED:
        return f"token {bot.token}"
    if bot.operator_paused:
        return "paused"
    if bot.flood_paused:
        return "flood pause"
    return "serving"


def bots_lines(bots: Sequence[BotFigures]) -> list[str]:
    """Each bot's rows, lag and state (``outbox status``, after the totals)."""
    rows = [
        (
            bot.bot,
            str(bot.pending),
            str(bot.in_progress),
            str(bot.failed),
            span(bot.lag_seconds),
            str(bot.relays),
            bot_state(bot),
        )
        for bot in bots
    ]
    headers = ("bot", State.PENDING, State.IN_PROGRESS, State.FAILED, "lag", "relays", "state")
    return ["", *table(headers, rows, numeric={1, 2, 3, 4, 5})]


def bot_json(bot: BotFigures) -> dict[str, Any]:
    return {
        "bot": bot.bot,
        "holat": {
            State.PENDING: bot.pending,
            State.IN_PROGRESS: bot.in_progress,
            State.FAILED: bot.failed,
        },
        "lag_seconds": bot.lag_seconds,
        "relays": bot.relays,
        "token": str(bot.token),
        "flood_paused": bot.flood_paused,
        "paused": bot.operator_paused,
        "state": bot_state(bot),
    }


def unserved_bots_line(bots: Sequence[BotFigures]) -> str:
    """The warning for bots whose rows wait because no live relay can send for them."""
    parts = [f"{bot.bot} ({bot.pending} pending, token {bot.token})" for bot in bots]
    return (
        f"rows wait for bots no live relay can send for: {', '.join(parts)} "
        "(put a valid token for each in a relay's --tokens-dir)"
    )
