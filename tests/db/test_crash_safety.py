"""Crash safety with real processes: kill -9, a Postgres restart, many relays, a hung relay.

Here the db tier's tests (PostgreSQL, in the test's process); the others are in
``tests/e2e/test_crash_safety.py``.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from outbox import queries
from outbox.db import async_connect


def test_a_maintenance_lock_holder_that_hangs_loses_the_lock(db_url: str) -> None:
    """The server ends a hung holder's session, so another relay's reaper can take over."""

    async def scenario() -> None:
        hung, other = await async_connect(db_url), await async_connect(db_url)
        try:
            await hung.execute("BEGIN")
            assert await queries.try_maintenance_lock(hung, schema="public", idle_seconds=0.5)
            async with other.transaction():
                assert not await queries.try_maintenance_lock(other, schema="public")
            await asyncio.sleep(1.5)  # hangs in the middle of its round
            async with other.transaction():
                assert await queries.try_maintenance_lock(other, schema="public")
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                await hung.execute("SELECT 1")
        finally:
            await hung.close()
            await other.close()

    asyncio.run(scenario())
