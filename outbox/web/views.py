"""What the page shows, computed in Python: plain values for the templates, no HTML.

Escaping is the templates' job (Jinja2 autoescaping); nothing here builds markup.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from outbox.presentation import (
    HEADLINE,
    bot_state,
    lanes_lines,
    queue_worth_showing,
    replay_refusal,
    span,
    split_history_entry,
    when,
)
from outbox.queries import Activity, Message, ReplayResult
from outbox.states import State

__all__ = [
    "STATE_NAMES",
    "Bar",
    "HistoryEntry",
    "bot_state",
    "chart_bars",
    "chat_of",
    "extra_payload",
    "history",
    "lanes_lines",
    "queue_worth_showing",
    "refusal",
    "span",
    "text_of",
    "when",
]

# The database's names first, as the CLI prints them, with the English word beside them.
STATE_NAMES = {
    State.PENDING.value: "pending",
    State.IN_PROGRESS.value: "in progress",
    State.DONE.value: "done",
    State.FAILED.value: "failed",
}

CHART_WIDTH = 600  # the SVG's own units; CSS scales it to the page
CHART_HEIGHT = 100


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    delivered_y: float
    delivered_height: float
    failed_y: float
    failed_height: float
    label: str  # the bar's tooltip


def chart_bars(activity: Activity) -> list[Bar]:
    """One stacked bar per minute, oldest first: delivered at the bottom, failed on top."""
    minutes = len(activity.delivered)
    tallest = max(
        (d + f for d, f in zip(activity.delivered, activity.failed, strict=True)), default=0
    )
    scale = CHART_HEIGHT / max(tallest, 1)
    slot = CHART_WIDTH / max(minutes, 1)
    bars = []
    for i, (delivered, failed) in enumerate(zip(activity.delivered, activity.failed, strict=True)):
        ago = minutes - 1 - i
        d_height, f_height = delivered * scale, failed * scale
        label = (
            f"{ago} min ago: {delivered} delivered, {failed} failed"
            if ago
            else (f"this minute: {delivered} delivered, {failed} failed")
        )
        bars.append(
            Bar(
                x=i * slot + slot * 0.1,
                width=slot * 0.8,
                delivered_y=CHART_HEIGHT - d_height,
                delivered_height=d_height,
                failed_y=CHART_HEIGHT - d_height - f_height,
                failed_height=f_height,
                label=label,
            )
        )
    return bars


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
        shown, attempt, rest = split_history_entry(raw if isinstance(raw, dict) else {"entry": raw})
        what = " / ".join(str(rest.pop(key)) for key in HEADLINE if key in rest)
        details = json.dumps(rest, ensure_ascii=False, sort_keys=True) if rest else ""
        entries.append(
            HistoryEntry(shown, "-" if attempt is None else str(attempt), what or "-", details)
        )
    return entries


def refusal(result: ReplayResult) -> str:
    """Why a replay was refused, in the CLI's words; the page offers its own force button."""
    return replay_refusal(result, force_hint=False)
