"""``outbox web``: the operator's page (an extra: aiohttp and jinja2, loaded only here)."""

from __future__ import annotations

import argparse

from outbox.commands.common import database_url
from outbox.commands.options import Commands, add_lease, duration, port
from outbox.errors import ConfigError
from outbox.schema import current_schema

__all__ = ["register"]

MAX_REFRESH = 3600.0


def register(commands: Commands) -> None:
    web = commands.add("web", _cmd_web, "the operator's web page: queue, failures, replay")
    web.add(
        "--host",
        env="OUTBOX_WEB_HOST",
        default="127.0.0.1",
        help="address to listen on; anything but loopback needs a password",
    )
    web.add("--port", env="OUTBOX_WEB_PORT", default=8080, convert=port, help="port")
    web.add(
        "--password-file",
        env="OUTBOX_WEB_PASSWORD_FILE",
        default=None,
        help="file holding the page's password (or set OUTBOX_WEB_PASSWORD; never on argv)",
    )
    web.add(
        "--trusted-proxy",
        env="OUTBOX_WEB_TRUSTED_PROXY",
        default="",
        help="addresses or networks of the proxy in front of the page (comma-separated): its "
        "X-Forwarded-For names the client, X-Forwarded-Proto https makes the cookie Secure",
    )
    add_lease(web, "claims older than this are shown as stuck")
    web.add(
        "--refresh",
        env="OUTBOX_WEB_REFRESH",
        default=5.0,
        convert=duration(MAX_REFRESH),
        help="how often the page updates its figures (at least 1s, at most 1h)",
    )


def _cmd_web(args: argparse.Namespace) -> int:
    try:
        from outbox.web import WebConfig, read_password, serve  # noqa: PLC0415 - an extra
    except ImportError as err:
        if err.name not in {"aiohttp", "jinja2", "markupsafe"}:
            raise
        raise ConfigError(
            f"the web page needs the 'web' extra ({err.name} is missing): "
            "pip install 'outbox-telegram[web]'"
        ) from None

    config = WebConfig(
        database_url=database_url(args),
        schema=current_schema(),
        host=args.host,
        port=args.port,
        password=read_password(args.password_file),
        lease_seconds=args.lease,
        refresh_seconds=max(args.refresh, 1.0),
        trusted_proxies=args.trusted_proxy,
    )
    serve(config)
    return 0
