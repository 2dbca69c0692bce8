"""``outbox relays``: the fleet's register, the relays alive and the ones gone silent.

A relay is listed from its start to its clean stop; one killed without a word is shown as gone
after a few missed heartbeats (about 20 s with the default 5 s), and maintenance deletes it an
hour later.
"""

from __future__ import annotations

import argparse

from outbox import ops
from outbox.commands.common import answer, run_operation
from outbox.commands.options import Commands
from outbox.ops.views.relays import relay_json, relays_table

__all__ = ["register"]


def cmd_relays(args: argparse.Namespace) -> int:
    relays = run_operation(args, ops.list_relays)
    return answer(
        args,
        [relay_json(relay) for relay in relays],
        relays_table(relays)
        if relays
        else "no relay is registered (none is running, or none has started since the upgrade)",
    )


def register(commands: Commands) -> None:
    commands.add("relays", cmd_relays, "the relays of the fleet: alive, or gone silent", json=True)
