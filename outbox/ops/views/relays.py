"""The fleet's register as people see it (``outbox relays``, the page)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from outbox.ops.views._text import iso, span, table, when
from outbox.queries import RelayRecord
from outbox.vocabulary import RELAY

__all__ = ["relay_json", "relays_table"]


def relay_json(relay: RelayRecord) -> dict[str, Any]:
    """One relay of the register; times in ISO 8601, ``silent_seconds`` since its heartbeat."""
    document: dict[str, Any] = {}
    for name in RELAY:
        value = getattr(relay, name.python)
        if isinstance(value, datetime):
            value = iso(value)
        elif isinstance(value, tuple):
            value = list(value)
        document[name.label] = value
    document["alive"] = relay.alive
    document["silent_seconds"] = round(relay.silent_seconds, 3)
    return document


def relays_table(relays: Sequence[RelayRecord]) -> list[str]:
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
