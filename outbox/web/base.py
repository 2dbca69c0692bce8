"""What every part of the page shares: its settings, the application's keys, the database and
rendering (a token-shaped string in a row never reaches the page)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import jinja2
from aiohttp import web
from markupsafe import Markup

from outbox import ops, vocabulary
from outbox.ops.views import bots, message, status
from outbox.ops.views._text import span, when
from outbox.queries import Operation
from outbox.redact import redact
from outbox.web.auth import Guard, Proxies
from outbox.web.throttle import SignInThrottle

__all__ = [
    "CONFIG",
    "GUARD",
    "PROXIES",
    "SESSION_COOKIE",
    "TEMPLATES",
    "THROTTLE",
    "WebConfig",
    "error_page",
    "install",
    "render",
    "run",
    "templates",
]

log = logging.getLogger("outbox.web")
P = ParamSpec("P")
T = TypeVar("T")

SESSION_COOKIE = "outbox_session"
# Filters offered for "failed within"; any duration typed into the URL works too.
SINCE_CHOICES = ("15m", "1h", "6h", "24h", "7d")


@dataclass(frozen=True, slots=True)
class WebConfig:
    database_url: str
    schema: str
    host: str = "127.0.0.1"
    port: int = 8080
    password: str | None = None
    lease_seconds: float = 300.0  # a claim older than this is counted as stuck
    refresh_seconds: float = 5.0  # how often the page updates its figures
    # Peers (addresses, networks) whose X-Forwarded-For and -Proto are believed: a TLS proxy.
    trusted_proxies: str = ""
    # The answer to a wrong password waits: it slows one connection; the throttle, everyone.
    wrong_password_pause: float = 1.0


GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
CONFIG: web.AppKey[WebConfig] = web.AppKey("config", WebConfig)
TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)
THROTTLE: web.AppKey[SignInThrottle] = web.AppKey("throttle", SignInThrottle)
PROXIES: web.AppKey[Proxies] = web.AppKey("proxies", Proxies)


def install(app: web.Application, config: WebConfig) -> None:
    app[CONFIG] = config
    app[GUARD] = Guard(config.password, config.host)
    app[THROTTLE] = SignInThrottle()
    app[PROXIES] = Proxies.parse(config.trusted_proxies)
    app[TEMPLATES] = templates()


async def run(request: web.Request, op: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """One operation on a connection of its own, in one transaction (committed if it returns)."""
    async with ops.connect_async(request.app[CONFIG].database_url) as conn:
        return await op.run_async(conn, *args, **kwargs)


def _redacted(value: Any) -> Any:
    # Markup comes from macros, built of values that already passed through here.
    if isinstance(value, str) and not isinstance(value, Markup):
        return redact(value)
    return value


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("outbox.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_redacted,
    )
    env.globals.update(
        state_names=message.STATE_NAMES,
        label=vocabulary.label,
        when=when,
        span=span,
        bot_state=bots.bot_state,
        chat_of=message.chat_of,
        text_of=message.text_of,
        extra_payload=message.extra_payload,
        history=message.history,
        hold_line=message.hold_line,
        queue_worth_showing=message.queue_worth_showing,
        lanes_lines=status.lanes_lines,
        chart_width=status.CHART_WIDTH,
        chart_height=status.CHART_HEIGHT,
        since_choices=SINCE_CHOICES,
    )
    return env


def render(
    request: web.Request, template: str, http_status: int = 200, **context: Any
) -> web.Response:
    guard = request.app[GUARD]
    session = request.cookies.get(SESSION_COOKIE)
    page = request.app[TEMPLATES].get_template(template)
    html = page.render(
        csrf=guard.form_token(session),
        signed_in=guard.required and guard.session_valid(session),
        refresh=request.app[CONFIG].refresh_seconds,
        **context,
    )
    return web.Response(text=html, status=http_status, content_type="text/html", charset="utf-8")


def error_page(request: web.Request, status: int, title: str, error: str) -> web.Response:
    try:
        return render(request, "error.html", http_status=status, title=title, error=error)
    except Exception:  # the template itself failed: still an answer, in plain text
        log.exception("web: cannot render the error page")
        return web.Response(text=f"{title}: {error}\n", status=status)
