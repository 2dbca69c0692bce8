"""A folder of bot tokens (``outbox relay --tokens-dir``, docs/many-bots.md): one token per
file. Each look lists the folder and reads only the files whose modification time or size
changed since the last; the token itself is never logged, only the bot's public id.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from outbox.redact import register_secret

__all__ = ["BotToken", "TokenFolder"]

log = logging.getLogger("outbox.relay")

# <bot id>:<secret>: the bot id is the bot's public number, the rest Telegram's secret.
_TOKEN = re.compile(r"([0-9]{1,20}):[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class BotToken:
    token: str = field(repr=False)
    file: str  # the file's name in the folder, for the log


@dataclass(frozen=True, slots=True)
class _Seen:
    stamp: tuple[int, int]  # modification time (ns) and size at the last read
    token: str | None  # None: the file holds no usable token


class TokenFolder:
    """The tokens in a folder, by bot id, as of the last ``look()``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: dict[str, _Seen] = {}  # file name: what it held at its last read
        self._said_missing = False
        self._said_twice: set[str] = set()  # files named in the log as holding a bot again

    def look(self) -> dict[str, BotToken]:
        """The folder's tokens now, by bot id. A bot found in two files is served once
        (the first file by name) and the other file is named in the log."""
        try:
            entries = sorted(
                (entry for entry in os.scandir(self.path) if _is_token_file(entry)),
                key=lambda entry: entry.name,
            )
        except OSError as err:
            # The folder itself is gone or unreadable (a remount): keep the bots known so far.
            if not self._said_missing:
                log.warning("cannot read the tokens folder %s: %s", self.path, err.strerror)
                self._said_missing = True
            return self._tokens()
        self._said_missing = False
        seen: dict[str, _Seen] = {}
        for entry in entries:
            try:
                stat = entry.stat()
            except OSError:
                continue  # removed between the listing and the stat: gone
            stamp = (stat.st_mtime_ns, stat.st_size)
            before = self._seen.get(entry.name)
            seen[entry.name] = before if before and before.stamp == stamp else self._read(entry)
        self._seen = seen
        return self._tokens()

    def _tokens(self) -> dict[str, BotToken]:
        tokens: dict[str, BotToken] = {}
        for name, found in self._seen.items():
            if found.token is None:
                continue
            bot = found.token.partition(":")[0]
            if bot in tokens:
                if name not in self._said_twice:
                    self._said_twice.add(name)
                    log.warning(
                        "tokens file %s holds bot %s again (also %s): ignored",
                        name,
                        bot,
                        tokens[bot].file,
                    )
                continue
            tokens[bot] = BotToken(found.token, name)
        self._said_twice &= set(self._seen)
        return tokens

    def _read(self, entry: os.DirEntry[str]) -> _Seen:
        stat = entry.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
        try:
            text = Path(entry.path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            reason = err.strerror if isinstance(err, OSError) else "not text"
            log.warning("tokens file %s cannot be read (%s): no bot for it", entry.name, reason)
            return _Seen(stamp, None)
        if not _TOKEN.fullmatch(text):
            log.warning(
                "tokens file %s does not hold a Telegram bot token (<digits>:<secret>, one per "
                "file): no bot for it",
                entry.name,
            )
            return _Seen(stamp, None)
        register_secret(text)
        return _Seen(stamp, text)


def _is_token_file(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith(".") or entry.name.endswith("~"):
        return False
    try:
        return entry.is_file()
    except OSError:
        return False
