"""The relay's log lines for a maintenance round, until ``outbox.relay.maintenance`` writes
its own: every view lives in ``outbox.ops.views``."""

from outbox.ops.views.maintenance import pruned_text, reaped_text

__all__ = ["pruned_text", "reaped_text"]
