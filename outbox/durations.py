"""Durations as people type them: ``90``, ``30s``, ``5m``, ``1h30m``, ``7d``, ``100ms``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

from outbox.errors import InvalidInput

__all__ = ["format_duration", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")
# Beyond what a timedelta holds (about 2.7 million years) a duration is a typing mistake; each
# command also has its own, much lower, maximum (outbox.commands.options).
_LONGEST = timedelta.max.total_seconds()


def parse_duration(text: str) -> timedelta:
    """Parse a duration; a bare number is seconds. Raises ``InvalidInput`` with the reason."""
    raw = text.strip().lower().replace(" ", "")
    if not raw:
        raise InvalidInput("empty duration")
    if not raw.isascii():  # float() and \d also take other scripts' digits: '٣' is 3
        raise InvalidInput(f"cannot read duration {text!r}: use e.g. 30s, 5m, 1h30m, 7d")
    try:
        seconds = float(raw)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(raw):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(raw) or pos == 0:
            raise InvalidInput(
                f"cannot read duration {text!r}: use e.g. 30s, 5m, 1h30m, 7d"
            ) from None
    if math.isnan(seconds):
        raise InvalidInput(f"cannot read duration {text!r}: use e.g. 30s, 5m, 1h30m, 7d")
    if seconds < 0:
        raise InvalidInput(f"duration {text!r} is negative")
    if seconds >= _LONGEST:
        raise InvalidInput(f"duration {text!r} is too long")
    return timedelta(seconds=seconds)


def format_duration(seconds: float) -> str:
    """A duration as a person would type it back: 7d, 1h30m, 5m, 45s (whole seconds)."""
    left = round(seconds)
    if left == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
