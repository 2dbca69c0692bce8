"""Prometheus metrics and health probes (``/healthz``, ``/readyz``: docs/operations.md) of a
running relay (``outbox relay --metrics-port``).

The figures are read from the relay when Prometheus scrapes, so the relay's hot path does no
extra work for them. The queue's own figures belong to the database: ``outbox status --json``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields
from socketserver import ThreadingMixIn
from threading import Thread
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from outbox.errors import ConfigError
from outbox.redact import redact

if TYPE_CHECKING:
    from outbox.relay import Relay

__all__ = ["MetricsServer", "RelayCollector", "probe_answer", "relay_app"]

# What each RunSummary field counts, as the "outcome" label of outbox_relay_messages_total.
_OUTCOMES = {
    "claimed": "rows claimed",
    "sent": "delivered to Telegram",
    "already_sent": "completed without sending: the key had a sent marker",
    "retried": "failed and rescheduled",
    "failed": "moved to xato",
    "deferred": "handed back unsent: late for its reserved moment, held by a flood pause, or "
    "Telegram could not be reached",
    "released": "handed back unsent (shutdown, rejected token)",
    "cancelled": "withdrawn by the app after the claim",
    "fenced_out": "outcome discarded: the claim had been reaped",
}


class RelayCollector(Collector):
    """Reads one relay's counters and gauges at each scrape."""

    def __init__(self, relay: Relay) -> None:
        self._relay = relay

    def collect(self) -> Iterator[Metric]:
        snapshot = self._relay.snapshot()
        messages = CounterMetricFamily(
            "outbox_relay_messages",
            "Messages by what this relay did with them: "
            + "; ".join(f"{name}: {meaning}" for name, meaning in _OUTCOMES.items()),
            labels=["outcome"],
        )
        for f in fields(snapshot.summary):
            messages.add_metric([f.name], getattr(snapshot.summary, f.name))
        yield messages
        yield GaugeMetricFamily(
            "outbox_relay_in_flight",
            "Claimed rows this relay holds: sending, waiting for a slot or for their write",
            value=snapshot.in_flight,
        )
        yield GaugeMetricFamily(
            "outbox_relay_unwritten_outcomes",
            "Outcomes decided but not yet written to the database",
            value=snapshot.unwritten,
        )
        yield GaugeMetricFamily(
            "outbox_relay_flood_control_seconds",
            "Seconds this relay still waits because Telegram answered 429",
            value=snapshot.paused_seconds,
        )
        yield GaugeMetricFamily(
            "outbox_relay_unreachable_bots",
            "Bots of this relay whose sends are paused because Telegram cannot be reached",
            value=snapshot.unreachable_bots,
        )


StartResponse = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def probe_answer(problem: str | None) -> tuple[str, bytes]:
    """The HTTP status and body of a probe: 200 "ok", or 503 and the reason in one line."""
    if problem is None:
        return "200 OK", b"ok\n"
    return "503 Service Unavailable", (redact(problem) + "\n").encode()


def relay_app(relay: Relay) -> WsgiApp:
    """``/healthz``, ``/readyz``, and the metrics on every other path (as before)."""
    registry = CollectorRegistry()
    registry.register(RelayCollector(relay))
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            status, body = probe_answer(relay.health.stuck())
        elif path == "/readyz":
            paused = relay.flood.paused_for(time.monotonic())
            status, body = probe_answer(relay.health.not_ready(paused))
        else:
            answer: Iterable[bytes] = metrics(environ, start_response)
            return answer
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]

    return app


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A probe every few seconds is no news for the log."""


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in progress does not keep the relay from exiting


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """The scrape and probe endpoint, in a thread of its own; ``close`` stops it."""

    def __init__(self, relay: Relay, *, host: str, port: int) -> None:
        server_class = _Server6 if ":" in host else _Server  # an IPv6 address such as ::
        try:
            self._server: _Server = make_server(
                host, port, relay_app(relay), server_class, handler_class=_Quiet
            )
        except OSError as err:
            raise ConfigError(
                f"cannot serve metrics on {host}:{port}: {err.strerror or err}"
            ) from None
        self._thread = Thread(target=self._server.serve_forever, name="outbox-metrics", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
