"""The relay's spans: one for each send of a row, a child of the trace context kept with the
row (docs/operations.md, tracing). Without a tracer provider (given, or the process's own) the
send pool holds no tracer and pays one ``is None`` test a row.
"""

from __future__ import annotations

import sys
from contextvars import Token
from typing import TYPE_CHECKING, Any

from outbox.states import State
from outbox.version import package_version

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from outbox.queries import ClaimedRow, Outcome

__all__ = ["SendSpan", "SendTracer", "send_tracer"]

SPAN_NAME = "outbox send"


def send_tracer(provider: object | None, bot: str) -> SendTracer | None:
    """The tracer of one bot's sends, from ``provider`` (an OpenTelemetry ``TracerProvider``)
    or, without one, from the process's own if one is set; None when nothing would record."""
    if provider is None and "opentelemetry.trace" not in sys.modules:
        return None  # nobody set a provider without importing the API: not even imported here
    try:
        from opentelemetry import trace  # noqa: PLC0415 - the otel extra, if installed
    except ImportError:
        return None
    if provider is None:
        provider = trace.get_tracer_provider()
        # The API's stand-ins until someone sets a provider: their spans record nothing.
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
    if not isinstance(provider, trace.TracerProvider):
        raise TypeError(f"tracer_provider must be an OpenTelemetry TracerProvider: {provider!r}")
    return SendTracer(provider.get_tracer("outbox.relay", package_version()), bot)


class SendTracer:
    """Starts the span of each send of one bot's rows."""

    def __init__(self, tracer: Tracer, bot: str) -> None:
        from opentelemetry.trace import SpanKind  # noqa: PLC0415
        from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
            TraceContextTextMapPropagator,
        )

        self._tracer = tracer
        self._bot = bot
        self._kind = SpanKind.CONSUMER  # it handles a message others put in a queue
        self._propagator = TraceContextTextMapPropagator()

    def start(self, row: ClaimedRow) -> SendSpan:
        """The row's span, started and made current (so that spans of the HTTP call, if the
        host instruments it, are its children); end it with :meth:`SendSpan.end`."""
        from opentelemetry import context, trace  # noqa: PLC0415 - loaded by now

        span = self._tracer.start_span(
            SPAN_NAME,
            context=self._parent(row),
            kind=self._kind,
            attributes={
                "outbox.id": row.id,
                "outbox.key": row.key,
                "outbox.method": _method(row.payload),
                "outbox.bot": self._bot,
                "outbox.queue": row.queue,
                "outbox.attempt": row.attempts,
            },
        )
        return SendSpan(span, context.attach(trace.set_span_in_context(span)))

    def _parent(self, row: ClaimedRow) -> Context | None:
        if row.traceparent is None:
            return None  # a trace of its own
        carrier = {"traceparent": row.traceparent}
        if row.tracestate:
            carrier["tracestate"] = row.tracestate
        # A malformed value (written by hand) gives an empty context: a trace of its own.
        return self._propagator.extract(carrier)


class SendSpan:
    """One send's span, current in its worker's task until it ends."""

    __slots__ = ("_span", "_token", "outcome")

    def __init__(self, span: Span, token: Token[Context]) -> None:
        self._span = span
        self._token = token
        self.outcome: Outcome | None = None  # None at the end: the app withdrew the row

    def end(self) -> None:
        """End it with the row's outcome."""
        from opentelemetry import context  # noqa: PLC0415
        from opentelemetry.trace import StatusCode  # noqa: PLC0415

        span, outcome = self._span, self.outcome
        word = outcome_word(outcome)
        span.set_attribute("outbox.outcome", word)
        if outcome is not None and outcome.error_code:
            span.set_attribute("outbox.error_code", str(outcome.error_code))
        if word in ("retry", "failed"):
            span.set_status(StatusCode.ERROR, outcome.error if outcome else None)
        span.end()
        context.detach(self._token)


def outcome_word(outcome: Outcome | None) -> str:
    """What happened to the row, in one word: sent, already_sent (its marker existed), retry,
    failed (xato), handed_back (unsent, no attempt spent) or cancelled."""
    if outcome is None:
        return "cancelled"
    if outcome.state == State.DONE:
        return "sent" if outcome.key is not None else "already_sent"
    if outcome.state == State.FAILED:
        return "failed"
    return "retry" if outcome.error else "handed_back"


def _method(payload: Any) -> str:
    method = payload.get("method") if isinstance(payload, dict) else None
    return method if isinstance(method, str) else "sendMessage"
