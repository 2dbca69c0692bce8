"""The README's and docs/'s code blocks: every block that claims to run is run, as written.

A fenced block's info string says what it is. ``python`` and ``sh`` blocks claim to run: the
test runs them, in the order of their page, against one fresh database and one fake Bot API
per page (the three variables the README's set-up block exports), a Python block with this
interpreter and a shell block with ``bash -euo pipefail`` and this venv's commands first on
PATH. A ``python no-run`` or ``sh no-run`` block is one that cannot run here (a root install,
systemd, a fragment of someone's env.py); ``text``, ``ini``, ``yaml`` and ``json`` blocks are
drawings and configuration, not commands. Any other block, one without an info string
included, fails the test: a page cannot hold a command that nobody checks.

Here the unit tier's tests (no database); the others are in ``tests/e2e/test_docs.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support import ROOT
from tests.support.docs import (
    FENCE,
    NO_RUN,
    NOT_COMMANDS,
    PAGES,
    PROVIDED,
    RUNNABLE,
    Block,
    blocks_of,
    page_blocks,
)


def unaccounted(blocks: list[Block]) -> list[str]:
    """The blocks that neither run nor say why not."""
    bad = []
    for block in blocks:
        if block.language in RUNNABLE or block.language in NOT_COMMANDS:
            unknown = set(block.flags) - {NO_RUN}
            if unknown:
                bad.append(f"{block.where}: unknown flags {sorted(unknown)}")
        else:
            bad.append(f"{block.where}: info string {block.language!r} is neither run nor marked")
    return bad


def test_every_block_is_run_or_marked() -> None:
    problems = [p for page in PAGES for p in unaccounted(page_blocks(page))]
    assert not problems, "\n".join(problems)


def test_an_unmarked_block_is_caught() -> None:
    text = "a\n\n```\noutbox relay\n```\n\n```bash\nls\n```\n\n```sh no-rn\nls\n```\n"
    assert len(unaccounted(blocks_of(text, "X.md"))) == 3
    marked = "```sh no-run\nsudo systemctl start outbox-relay\n```\n\n  ```yaml\n  a: 1\n  ```\n"
    blocks = blocks_of(marked, "X.md")
    assert [b.language for b in blocks] == ["sh", "yaml"]
    assert unaccounted(blocks) == []
    assert not any(b.runs for b in blocks)


def test_the_readme_sets_up_what_the_test_provides() -> None:
    # The set-up block cannot run here (it starts a server in the background and names the
    # reader's database): the test gives the same variables, so they must be these.
    readme = page_blocks(ROOT / "README.md")
    setup = [b for b in readme if b.language == "sh" and "outbox fake-telegram" in b.body]
    assert len(setup) == 1, "the README's set-up block is gone"
    exported = set(re.findall(r"\b([A-Z][A-Z_]+)=", setup[0].body))
    assert exported == set(PROVIDED)
    assert any(b.runs and b.language == "python" for b in readme)


_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)|src=\"(?P<src>[^\"]+)\"")


def _slug(heading: str) -> str:
    # GitHub's anchors: lower case, punctuation dropped, spaces to hyphens.
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m[1]) for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    bad = []
    for match in _LINK.finditer(text):
        target = match["target"] or match["src"]
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists():
            bad.append(f"{page.relative_to(ROOT)}: {target}: no such file")
        elif anchor and goal.suffix == ".md" and anchor not in _anchors(goal):
            bad.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    return bad


def test_every_link_between_the_pages_holds() -> None:
    problems = [p for page in PAGES for p in broken_links(page)]
    assert not problems, "\n".join(problems)


def _glossary() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("## Glossary")
    return text[start : text.index("\n## ", start + 1)]


def test_the_glossary_has_every_word_of_the_tables() -> None:
    # A new column (outbox/vocabulary.py) or table (a migration) is a new word for a newcomer.
    from outbox.states import State
    from outbox.vocabulary import HISTORY, OUTBOX

    glossary = _glossary()
    tables = set()
    for migration in (ROOT / "migrations" / "versions").glob("outbox_*.py"):
        tables |= set(re.findall(r"CREATE (?:UNLOGGED )?TABLE \{s\}\.(\w+)", migration.read_text()))
    words = {n.column for n in OUTBOX + HISTORY} | {str(s) for s in State} | tables
    missing = sorted(w for w in words - {"id", "payload"} if f"`{w}`" not in glossary)
    assert not missing, f"not in the README's glossary: {missing}"


# A repository path a page names in backticks: `outbox/relay/claimer.py`, `deploy/secrets/`,
# `docs/cli.md`. Only paths under these top-level entries are checked (a path such as
# `/etc/outbox` or `.outbox/dev-db` is the reader's machine, not the repository).
_TOP_LEVEL = (
    "outbox/",
    "outbox_testing/",
    "reminders/",
    "migrations/",
    "deploy/",
    "docs/",
    "tests/",
    "bench/",
    "examples/",
    ".ci/",
)
_TOP_FILES = frozenset(
    {"README.md", "CHANGELOG.md", "Makefile", "pyproject.toml", ".gitignore", ".dockerignore"}
)
# Named on purpose though not in a checkout: written by a command, or the claim's statement,
# whose file comes with the claim's rebuild.
NOT_IN_THE_TREE = frozenset(
    {
        "bench/results/",  # python -m bench writes its JSON there (gitignored)
        "outbox/sql/claim.sql",
    }
)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_BRACES = re.compile(r"\{([^{}]*)\}")


def _expand(path: str) -> list[str]:
    """``a.{service,timer}`` -> ``a.service``, ``a.timer``."""
    found = _BRACES.search(path)
    if found is None:
        return [path]
    head, tail = path[: found.start()], path[found.end() :]
    return [p for part in found[1].split(",") for p in _expand(head + part + tail)]


def named_paths(text: str) -> list[str]:
    """The repository paths named in a page's inline code (code blocks are commands)."""
    paths = []
    for span in _CODE_SPAN.findall(FENCE.sub("", text)):
        candidate = span.strip().split("#", 1)[0].rstrip(".,;:")
        if " " in candidate or "*" in candidate or "..." in candidate:  # a pattern, not a path
            continue
        if candidate in _TOP_FILES or candidate.startswith(_TOP_LEVEL):
            paths += _expand(candidate)
    return paths


def missing_paths(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [
        f"{page.relative_to(ROOT)}: `{path}` does not exist"
        for path in named_paths(text)
        if path not in NOT_IN_THE_TREE and not (ROOT / path).exists()
    ]


def test_every_path_a_page_names_exists() -> None:
    problems = [p for page in PAGES for p in missing_paths(page)]
    assert not problems, "\n".join(problems)


def test_a_missing_path_is_caught() -> None:
    text = (
        "See `outbox/relay/claimer.py`, `deploy/systemd/outbox-relay-health.{service,timer}`,"
        " `outbox/nowhere.py`, `docs/gone.md#a-heading`, `outbox relay` and `/etc/outbox`.\n"
        "```text\noutbox/in_a_block.py\n```\n"
    )
    assert named_paths(text) == [
        "outbox/relay/claimer.py",
        "deploy/systemd/outbox-relay-health.service",
        "deploy/systemd/outbox-relay-health.timer",
        "outbox/nowhere.py",
        "docs/gone.md",
    ]
    assert [p for p in named_paths(text) if not (ROOT / p).exists()] == [
        "outbox/nowhere.py",
        "docs/gone.md",
    ]


def test_the_paths_not_in_the_tree_are_still_named() -> None:
    # An entry here that no page names any more is one to drop.
    named = {path for page in PAGES for path in named_paths(page.read_text(encoding="utf-8"))}
    assert named >= NOT_IN_THE_TREE, sorted(NOT_IN_THE_TREE - named)
