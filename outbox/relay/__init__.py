"""The relay: claim due rows in batches, send them, record the outcomes in batches.

A few small services, each in its own module, wired by ``Relay``::

    Claimer --rows--> Lanes (a SendPool per bot) --outcome--> Completer --written--> Claimer
    FloodControl (per bot)   Listener (wake-ups)   Maintenance: Reaper, Retention

Each has ``run()`` until ``stop()`` (``outbox.relay.service``); ``Relay`` stops them in order.
"""

from outbox.relay._relay import Relay
from outbox.relay.summary import RelaySnapshot, RunSummary

__all__ = ["Relay", "RelaySnapshot", "RunSummary"]
