"""Many bots, one fleet: relays started with ``--tokens-dir`` serve every bot of the folder,
each row by its own bot, each bot within its own limits and flood pause. Relays are real
processes; Telegram is the fake Bot API, which keeps its limits per bot.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_many_bots.py``.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from outbox import enqueue, enqueue_many
from outbox.errors import InvalidInput
from tests.support import (
    states,
)


def _say(chat: int, label: str) -> dict[str, Any]:
    """A message to ``chat`` whose text names what sent it (``label``: the bot, a tag)."""
    return {"chat_id": chat, "text": f"eslatma {chat}/{label}"}


def _enqueue_for(engine: sa.Engine, bot: int, count: int, *, chat0: int, tag: str = "") -> None:
    with engine.begin() as conn:
        enqueue_many(
            conn,
            [(f"{tag}b{bot}-{n}", _say(chat0 + n, f"{tag}{bot}")) for n in range(count)],
            bot=bot,
        )


def test_enqueue_refuses_a_token_for_a_bot(engine: sa.Engine) -> None:
    with engine.begin() as conn, pytest.raises(InvalidInput, match="never the token") as err:
        enqueue(conn, key="k", payload=_say(1, "x"), bot="1001:secret-part")  # type: ignore[arg-type]
    assert "secret-part" not in str(err.value)
    with engine.begin() as conn, pytest.raises(InvalidInput, match="public id"):
        enqueue(conn, key="k", payload=_say(1, "x"), bot=-5)
    with engine.begin() as conn:
        enqueue(conn, key="k", payload=_say(1, "x"), bot=1001)
        found = conn.execute(sa.text("SELECT bot FROM outbox WHERE kalit = 'k'")).scalar_one()
    assert found == "1001"


def _counts(engine: sa.Engine) -> dict[str, int]:
    return {str(state): n for state, n in states(engine).items() if n}
