"""Tracing with OpenTelemetry, an optional extra (docs/operations.md, Tracing): the trace
context ``enqueue`` keeps with the row, and the tracer provider of this package's own processes
(never a host app's). Both are free when OpenTelemetry is absent or unused.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from outbox.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.propagators.textmap import TextMapPropagator
    from opentelemetry.sdk.trace import TracerProvider

__all__ = ["TraceContext", "configure_from_env", "trace_context", "traces_requested"]

log = logging.getLogger("outbox")


class TraceContext(NamedTuple):
    """The W3C Trace Context headers of one span, as the row's columns keep them."""

    traceparent: str | None = None
    tracestate: str | None = None


NO_TRACE = TraceContext()


def trace_context() -> TraceContext:
    """The current span's trace context; empty without a valid current span.

    OpenTelemetry is never imported here: a span can be current only in a process that has
    already imported its trace API, so until then there is nothing to record and nothing
    to pay (importing the API would cost the first enqueue about 70 ms).
    """
    if "opentelemetry.trace" not in sys.modules:
        return NO_TRACE
    from opentelemetry import trace  # noqa: PLC0415 - already imported by the app

    if not trace.get_current_span().get_span_context().is_valid:
        return NO_TRACE
    carrier: dict[str, str] = {}
    _w3c().inject(carrier)
    return TraceContext(carrier.get("traceparent"), carrier.get("tracestate") or None)


@functools.cache
def _w3c() -> TextMapPropagator:
    """The W3C propagator itself, not the app's global one (which may speak B3 or another
    format): the columns always hold W3C headers, which the relay reads back the same way."""
    from opentelemetry.trace.propagation.tracecontext import (  # noqa: PLC0415
        TraceContextTextMapPropagator,
    )

    return TraceContextTextMapPropagator()


# The variables by which OpenTelemetry's specification asks a process for traces: an exporter
# named (anything but "none"), or an OTLP endpoint (whose exporter is then OTLP).
_EXPORTER = "OTEL_TRACES_EXPORTER"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def traces_requested(env: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks this process for traces."""
    exporter = env.get(_EXPORTER, "").strip().lower()
    if exporter:
        return exporter != "none"
    return any(env.get(name, "").strip() for name in _ENDPOINTS)


def configure_from_env(service_name: str) -> TracerProvider | None:
    """Set this process's tracer provider from the ``OTEL_*`` variables, if they ask for
    traces; the provider, or None. For a process of this package only, never a host app. The
    SDK's own configurator reads the variables; the two defaults added here (OTLP over HTTP,
    ``service_name``) are in docs/operations.md."""
    if not traces_requested():
        return None
    try:
        from opentelemetry import trace  # noqa: PLC0415 - the otel extra, only when asked for
        from opentelemetry.sdk import trace as sdk_trace  # noqa: PLC0415

        # The SDK distro's own configurator: the one place that reads every OTEL_* variable.
        from opentelemetry.sdk._configuration import (  # noqa: PLC0415
            _OTelSDKConfigurator,
        )
    except ImportError:
        raise ConfigError(
            "OTEL_* variables ask for traces, but OpenTelemetry is not installed: "
            "pip install 'outbox-telegram[otel]' (or unset them)"
        ) from None
    names: list[str] = []
    if not os.environ.get(_EXPORTER, "").strip():
        protocol = any(os.environ.get(name, "").strip() for name in _PROTOCOLS)
        names = ["otlp" if protocol else "otlp_proto_http"]
    resource = {}
    if not os.environ.get("OTEL_SERVICE_NAME", "").strip() and "service.name=" not in (
        os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    ):
        resource["service.name"] = service_name
    try:
        configurator = _OTelSDKConfigurator()  # type: ignore[no-untyped-call] # SDK: untyped
        configurator.configure(  # type: ignore[no-untyped-call]
            trace_exporter_names=names, resource_attributes=resource
        )
    except Exception as err:  # noqa: BLE001 - an unknown exporter, a missing package: one line
        why = f"OpenTelemetry could not be set up from the OTEL_* variables: {err}"
        if "otlp_proto_grpc" in str(err):  # the SDK's "otlp" without a protocol
            why += (
                " (OTLP over gRPC: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf for the "
                "exporter the otel extra installs)"
            )
        raise ConfigError(why) from None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, sdk_trace.TracerProvider):
        # A provider set before (OTEL_PYTHON_TRACER_PROVIDER, say) stays: the SDK's own only.
        raise ConfigError(f"OpenTelemetry's tracer provider is not the SDK's: {provider!r}")
    log.info("tracing: spans exported as the OTEL_* variables say")
    return provider
