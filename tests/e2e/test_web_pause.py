"""The page's pauses and batches: pause and resume with the form token, a batch's progress,
and its cancel, which asks first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from outbox.broadcast import enqueue_many, pauses
from tests.support import text
from tests.support.webpage import WebPage, running_web


@pytest.fixture
def page(db_url: str, tmp_path: Path) -> Iterator[WebPage]:
    with running_web(db_url, tmp_path) as web:
        yield web


def paused(engine: sa.Engine) -> list[tuple[str, str]]:
    with engine.begin() as conn:
        return [(p.scope.option, p.value) for p in pauses(conn)]


def holat(engine: sa.Engine) -> dict[str, int]:
    with engine.begin() as conn:
        rows = conn.exec_driver_sql("SELECT holat, count(*) FROM outbox GROUP BY 1").all()
    return {str(state): int(n) for state, n in rows}


def test_pause_and_resume_from_the_page_need_its_form_token(
    page: WebPage, engine: sa.Engine
) -> None:
    form = {"scope": "queue", "value": "promo"}
    assert page.post("/pause", form).status == 403  # no form token
    assert paused(engine) == []
    token = page.csrf()
    answer = page.post("/pause", {**form, "csrf": token}, headers={"Origin": "http://evil.example"})
    assert answer.status == 403 and paused(engine) == []
    answer = page.post("/pause", {**form, "csrf": token}, headers={"Origin": page.url})
    assert answer.status == 303 and answer.headers["Location"] == "/?did=paused"
    assert paused(engine) == [("queue", "promo")]
    body = page.get("/?did=paused").body
    assert 'data-pause="queue:promo"' in body and "Paused: no relay claims" in body
    answer = page.post("/resume", {**form, "csrf": token}, headers={"Origin": page.url})
    assert answer.status == 303 and paused(engine) == []
    assert "Nothing is paused." in page.get("/").body
    bad = page.post("/pause", {"scope": "planet", "value": "x", "csrf": token})
    assert bad.status == 400 and "unknown pause scope" in bad.body
    bad = page.post("/pause", {"scope": "queue", "value": "no spaces", "csrf": token})
    assert bad.status == 400 and "is not usable" in bad.body


def test_a_batch_page_pauses_and_cancels_only_after_confirmation(
    page: WebPage, engine: sa.Engine
) -> None:
    with engine.begin() as conn:
        enqueue_many(conn, [(f"k{n}", text(100 + n)) for n in range(4)], batch="camp 7/a")
    address = "/batches/camp%207%2Fa"
    body = page.get(address).body
    assert "rows of batch camp 7/a" in body and "waiting" in body
    assert page.get("/batches/none").status == 404
    token = page.csrf(address)
    form = {"scope": "batch", "value": "camp 7/a", "csrf": token}
    answer = page.post("/pause", form)
    assert answer.status == 303 and answer.headers["Location"] == f"{address}?did=paused"
    assert paused(engine) == [("batch", "camp 7/a")]
    assert "Paused batch camp 7/a." in page.get(f"{address}?did=paused").body
    asked = page.post(f"{address}/cancel", {"csrf": token})
    assert asked.status == 200 and "4 waiting messages move to xato" in asked.body
    assert holat(engine) == {"kutmoqda": 4}  # asking cancels nothing
    done = page.post(f"{address}/cancel", {"csrf": token, "confirmed": "1"})
    assert done.status == 303 and holat(engine) == {"xato": 4}
    assert "Cancelled 4 waiting messages" in page.get(done.headers["Location"]).body
    assert page.post(f"{address}/cancel", {"confirmed": "1"}).status == 403
