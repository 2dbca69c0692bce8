"""One trace from the app's enqueue to Telegram, with an in-process relay and the SDK's
in-memory exporter."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.ext.asyncio import create_async_engine

from outbox import enqueue, enqueue_async, enqueue_many, enqueue_many_async, get_message
from outbox.retry import RetryPolicy
from outbox_testing.fake_telegram import FakeTelegram, Fault
from tests.support import make_relay


def _spans(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    by_key: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        by_key.setdefault(str((span.attributes or {})["outbox.key"]), []).append(span)
    return by_key


def test_each_send_is_a_child_of_the_span_that_enqueued_it(
    engine: sa.Engine, db_url: str, fake_telegram: FakeTelegram
) -> None:
    app = TracerProvider().get_tracer("app")
    exporter = InMemorySpanExporter()
    relay_provider = TracerProvider()
    relay_provider.add_span_processor(SimpleSpanProcessor(exporter))
    with app.start_as_current_span("request") as request, engine.begin() as conn:
        one = enqueue(conn, key="one", payload={"chat_id": 5, "text": "salom"})
        enqueue_many(conn, [("many", {"chat_id": 6, "text": "hi"})])
    with engine.begin() as conn:  # no span: a trace of the relay's own
        enqueue(conn, key="untraced", payload={"chat_id": 7, "text": "hey"})
    fake_telegram.script(5, Fault.server_error())  # the first try fails: a retry

    async def drain() -> None:
        retry = RetryPolicy(base_seconds=0)
        async with make_relay(
            db_url, fake_telegram, retry=retry, tracer_provider=relay_provider
        ) as relay:
            await relay.run(drain=True)

    asyncio.run(drain())
    spans = _spans(exporter)
    ctx = request.get_span_context()
    # Each attempt is a child of the enqueuing span, with its number.
    first, second = sorted(spans["one"], key=lambda s: str((s.attributes or {})["outbox.attempt"]))
    (many,), (untraced,) = spans["many"], spans["untraced"]
    for span in (first, second, many):
        assert span.context.trace_id == ctx.trace_id
        assert span.parent is not None and span.parent.span_id == ctx.span_id
    assert dict(first.attributes or {}) | {"outbox.id": 0} == {
        "outbox.id": 0,
        "outbox.key": "one",
        "outbox.method": "sendMessage",
        "outbox.bot": "123456",
        "outbox.queue": "default",
        "outbox.attempt": 1,
        "outbox.outcome": "retry",
        "outbox.error_code": "transient",
    }
    assert (second.attributes or {})["outbox.attempt"] == 2
    assert (second.attributes or {})["outbox.outcome"] == "sent"
    assert untraced.parent is None and untraced.context.trace_id != ctx.trace_id
    with engine.connect() as conn:  # outbox show gives the trace context too
        shown = get_message(conn, one.id)
    assert shown is not None
    assert (
        shown.traceparent == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
    )


def test_the_async_twins_record_the_callers_span_too(db_url: str, engine: sa.Engine) -> None:
    app = TracerProvider().get_tracer("app")

    async def work() -> int:
        async_engine = create_async_engine("postgresql+asyncpg://" + db_url.split("://", 1)[1])
        try:
            with app.start_as_current_span("request") as request:
                async with async_engine.begin() as conn:
                    await enqueue_async(conn, key="a1", payload={"chat_id": 1, "text": "a"})
                    await enqueue_many_async(conn, [("a2", {"chat_id": 2, "text": "b"})])
            return request.get_span_context().trace_id
        finally:
            await async_engine.dispose()

    trace_id = asyncio.run(work())
    with engine.connect() as conn:
        found = conn.execute(sa.text("SELECT traceparent FROM outbox ORDER BY kalit")).scalars()
        assert [str(t).split("-")[1] for t in found] == [f"{trace_id:032x}"] * 2
