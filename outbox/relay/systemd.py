"""systemd's notify protocol, for a relay run as a ``Type=notify`` service with ``WatchdogSec=``
(docs/operations.md, health probes). Outside systemd (no ``NOTIFY_SOCKET``) every call does
nothing.
"""

from __future__ import annotations

import contextlib
import os
import socket

__all__ = ["SystemdNotifier"]


class SystemdNotifier:
    def __init__(self) -> None:
        address = os.environ.get("NOTIFY_SOCKET", "")
        # "@name" is a socket in the abstract namespace: a leading NUL byte.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._ready = False

    def ready(self) -> None:
        """Tell systemd the relay has started (the first time only)."""
        if not self._ready:
            self._ready = True
            self._send("READY=1\nSTATUS=relaying")

    def alive(self) -> None:
        """A watchdog ping: the relay's loop runs (after READY=1 only: until then systemd's
        start timeout watches the start)."""
        if self._ready:
            self._send("WATCHDOG=1")

    def stopping(self) -> None:
        self._send("STOPPING=1")

    def _send(self, message: str) -> None:
        if not self._address:
            return
        # A lost notification costs at most a restart by the watchdog: never the relay itself.
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(self._address)
            s.sendall(message.encode())
