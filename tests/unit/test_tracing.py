"""The trace context enqueue records, when the relay traces, and the core without the extra."""

from __future__ import annotations

import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from outbox.errors import ConfigError
from outbox.queries import ClaimedRow, Outcome
from outbox.relay.tracing import outcome_word, send_tracer
from outbox.tracing import NO_TRACE, configure_from_env, trace_context, traces_requested


def test_the_current_span_is_recorded_as_a_w3c_traceparent() -> None:
    tracer = TracerProvider().get_tracer("app")
    with tracer.start_as_current_span("request") as span:
        found = trace_context()
    ctx = span.get_span_context()
    flags = int(ctx.trace_flags)
    assert found.traceparent == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"
    assert found.tracestate is None


def test_tracestate_comes_along_when_the_span_has_one() -> None:
    ctx = SpanContext(
        trace_id=0xABC,
        span_id=0xDEF,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "v1")]),
    )
    with trace.use_span(NonRecordingSpan(ctx)):
        found = trace_context()
    assert found.traceparent == f"00-{0xABC:032x}-{0xDEF:016x}-01"
    assert found.tracestate == "vendor=v1"


def test_nothing_is_recorded_without_a_current_span() -> None:
    assert trace_context() == NO_TRACE


def test_nothing_is_recorded_when_the_app_never_imported_opentelemetry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tracer = TracerProvider().get_tracer("app")
    with tracer.start_as_current_span("request"):
        monkeypatch.delitem(sys.modules, "opentelemetry.trace")
        assert trace_context() == NO_TRACE


@pytest.mark.parametrize(
    ("env", "asked"),
    [
        ({}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_SERVICE_NAME": "relay"}, False),
    ],
)
def test_traces_are_asked_for_by_an_exporter_or_an_otlp_endpoint(
    env: dict[str, str], asked: bool
) -> None:
    assert traces_requested(env) is asked


def test_the_relay_makes_no_spans_without_a_provider_of_its_own_or_the_process() -> None:
    # The test process sets no global provider: the API's stand-in records nothing.
    assert send_tracer(None, "1") is None
    assert send_tracer(TracerProvider(), "1") is not None


def test_a_malformed_traceparent_starts_a_trace_of_its_own() -> None:
    tracer = send_tracer(TracerProvider(), "1")
    assert tracer is not None
    row = ClaimedRow(1, "t", "k", {}, 1, False, None, traceparent="00-zz")  # type: ignore[arg-type]
    span = tracer.start(row)
    parent = trace.get_current_span().parent  # type: ignore[attr-defined]
    span.end()
    assert parent is None


@pytest.mark.parametrize(
    ("outcome", "word"),
    [
        (None, "cancelled"),
        (Outcome(1, 1, "bajarildi", key="k", chat_id=1, message_id=2), "sent"),
        (Outcome(1, 1, "bajarildi"), "already_sent"),
        (Outcome(1, 1, "kutmoqda", delay_seconds=2.0, error="HTTP 500"), "retry"),
        (Outcome(1, 1, "kutmoqda", new_attempts=0), "handed_back"),
        (Outcome(1, 3, "xato", error="blocked", error_code="blocked"), "failed"),
    ],
)
def test_each_outcome_has_its_word(outcome: Outcome | None, word: str) -> None:
    assert outcome_word(outcome) == word


# The core without the otel extra: enqueue records nothing, the relay makes no spans, and a
# relay asked for traces says what to install in one line.
_WITHOUT_OTEL = """
import sys

class NoOtel:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOtel())
from outbox.tracing import NO_TRACE, trace_context
from outbox.relay.tracing import send_tracer
assert trace_context() == NO_TRACE
assert send_tracer(None, "1") is None
from outbox.cli import main
sys.exit(main(["relay", "--once"]))
"""


def test_without_the_otel_extra_nothing_is_traced_and_a_request_for_traces_says_so() -> None:
    env = {"OTEL_TRACES_EXPORTER": "console", "TELEGRAM_BOT_TOKEN": "1:x", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_OTEL],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "'outbox-telegram[otel]'" in lines[0]


def test_otlp_over_grpc_which_the_extra_leaves_out_is_refused_in_one_line_that_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"):
        configure_from_env("outbox-relay")
