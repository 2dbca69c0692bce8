"""Prometheus metrics of a running relay (``outbox relay --metrics-port``).

The figures are read from the relay when Prometheus scrapes, so the relay's hot path does no
extra work for them. The queue's own figures (pending rows, lag, failures) belong to the
database, not to one relay: ``outbox status --json`` reports them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from threading import Thread
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from outbox.errors import ConfigError

if TYPE_CHECKING:
    from outbox.relay import Relay

__all__ = ["MetricsServer", "RelayCollector"]

# What each RunSummary field counts, as the "outcome" label of outbox_relay_messages_total.
_OUTCOMES = {
    "claimed": "rows claimed",
    "sent": "delivered to Telegram",
    "already_sent": "completed without sending: the key had a sent marker",
    "retried": "failed and rescheduled",
    "failed": "moved to xato",
    "deferred": "handed back to respect a chat's rate limit",
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


class MetricsServer:
    """The scrape endpoint, in a thread of its own; ``close`` stops it."""

    def __init__(self, relay: Relay, *, host: str, port: int) -> None:
        registry = CollectorRegistry()
        registry.register(RelayCollector(relay))
        try:
            served: tuple[WSGIServer, Thread] = start_http_server(port, host, registry)
        except OSError as err:
            raise ConfigError(
                f"cannot serve metrics on {host}:{port}: {err.strerror or err}"
            ) from None
        self._server, self._thread = served

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
