"""The relay: claim due rows in batches, send them, record the outcomes in batches; its
services, each a module wired by ``Relay``, are in docs/how-it-works.md."""

from outbox.relay._relay import Relay
from outbox.relay.summary import RelaySnapshot, RunSummary

__all__ = ["Relay", "RelaySnapshot", "RunSummary"]
