"""One word per filter: ``kind``, ``state`` and ``queue`` on the command line, on the web page
and in Python, with the old Uzbek spellings (``--tur``, ``--holat``, ``tur=``, ``navbat=``) still
working for scripts and saved addresses."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from tests.support.admin import add_failed, run
from tests.support.webapp import local_page


@pytest.fixture(autouse=True)
def _database(monkeypatch: pytest.MonkeyPatch, db_url: str) -> None:
    monkeypatch.setenv("OUTBOX_DATABASE_URL", db_url)


def _keys(out: str) -> list[str]:
    return sorted(message["kalit"] for message in json.loads(out))


def test_the_cli_takes_kind_and_state_as_python_spells_them(
    engine: sa.Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    add_failed(engine, "r1", kind="eslatma")
    add_failed(engine, "b1", kind="bulk")
    code, new, _ = run(capsys, "list", "--state", "xato", "--kind", "bulk", "--json")
    assert code == 0
    assert _keys(new) == ["b1"]
    code, old, _ = run(capsys, "list", "--holat", "xato", "--tur", "bulk", "--json")
    assert (code, _keys(old)) == (0, ["b1"])


def test_the_web_page_filters_by_kind_and_queue_in_either_spelling(
    db_url: str, engine: sa.Engine
) -> None:
    add_failed(engine, "r1", kind="eslatma")
    add_failed(engine, "b1", kind="bulk", queue="news")
    with local_page(db_url) as page:
        for address in ("/?kind=bulk", "/?tur=bulk", "/?queue=news", "/?navbat=news"):
            body = page.get(address).body
            assert "b1" in body, address
            assert "r1" not in body, address
