"""A real ``outbox relay`` process traces when OTEL_* variables ask: its spans, printed by the
console exporter, are in the trace of the request that enqueued each message; none without."""

from __future__ import annotations

import sqlalchemy as sa
from opentelemetry.sdk.trace import TracerProvider

from outbox import enqueue
from outbox_testing.fake_telegram import FakeTelegram
from tests.support import printed_spans, relay_env, run_module, text


def test_the_relays_spans_join_the_apps_trace_through_the_console_exporter(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    app = TracerProvider().get_tracer("app")
    with app.start_as_current_span("request") as request, engine.begin() as conn:
        enqueue(conn, key="traced", payload=text(41))
    env = relay_env(db_url, fake_telegram.api_url, OTEL_TRACES_EXPORTER="console")
    done = run_module("outbox.cli", "relay", "--drain", env=env)
    assert done.returncode == 0, done.stderr
    (span,) = printed_spans(done.stdout)
    ctx = request.get_span_context()
    assert span["name"] == "outbox send"
    assert span["context"]["trace_id"] == f"0x{ctx.trace_id:032x}"
    assert span["parent_id"] == f"0x{ctx.span_id:016x}"
    assert span["attributes"]["outbox.key"] == "traced"
    assert span["attributes"]["outbox.outcome"] == "sent"
    assert span["resource"]["attributes"]["service.name"] == "outbox-relay"


def test_without_the_variables_the_relay_prints_no_span(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    app = TracerProvider().get_tracer("app")
    with app.start_as_current_span("request"), engine.begin() as conn:
        enqueue(conn, key="traced", payload=text(42))
    done = run_module(
        "outbox.cli", "relay", "--drain", env=relay_env(db_url, fake_telegram.api_url)
    )
    assert done.returncode == 0, done.stderr
    assert fake_telegram.delivered
    assert "{" not in done.stdout and "trace" not in done.stderr
