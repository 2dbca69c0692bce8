"""The operator's web page (``outbox web``): the queue at a glance, failed messages, replay.

Needs the ``web`` extra (aiohttp, Jinja2); nothing in the rest of the package imports it.
"""

from __future__ import annotations

from outbox.web.app import WebConfig, build_app, serve
from outbox.web.auth import read_password

__all__ = ["WebConfig", "build_app", "read_password", "serve"]
