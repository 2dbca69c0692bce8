"""The fenced code blocks of the README and of docs/: what each one is, and where it is."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tests.support import ROOT

__all__ = [
    "NOT_COMMANDS",
    "NO_RUN",
    "PAGES",
    "PROVIDED",
    "RUNNABLE",
    "Block",
    "blocks_of",
    "page_blocks",
]


PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])


RUNNABLE = frozenset({"python", "sh"})


NOT_COMMANDS = frozenset({"text", "ini", "yaml", "json"})


NO_RUN = "no-run"


# What the README's set-up block exports, and what the test gives every block instead.
PROVIDED = ("OUTBOX_TELEGRAM_API_URL", "TELEGRAM_BOT_TOKEN", "OUTBOX_DATABASE_URL")


FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    flags: tuple[str, ...]
    body: str

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and NO_RUN not in self.flags

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(text: str, page: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        words = match["info"].split()
        indent = match["indent"]
        body = "\n".join(line.removeprefix(indent) for line in match["body"].splitlines()).rstrip(
            "\n"
        )
        found.append(
            Block(
                page,
                text.count("\n", 0, match.start()) + 1,
                words[0] if words else "",
                tuple(words[1:]),
                body + "\n",
            )
        )
    return found


def page_blocks(page: Path) -> list[Block]:
    return blocks_of(page.read_text(encoding="utf-8"), str(page.relative_to(ROOT)))
