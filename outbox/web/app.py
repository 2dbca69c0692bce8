"""The operator's page: an aiohttp application rendering Jinja2 templates.

Reading and writing go through ``outbox.api`` and ``outbox.queries`` on a small SQLAlchemy
pool, in worker threads so that a slow query never stalls the event loop. Every action is a
POST checked by ``Guard`` (origin and form token) and leaves its trace in the row's tarix.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, TypeVar

import jinja2
from aiohttp import web
from markupsafe import Markup
from sqlalchemy import Connection
from sqlalchemy.engine import Engine

from outbox import api, queries, vocabulary
from outbox.db import check_schema_sync, connect_errors, create_engine, redact_url
from outbox.durations import parse_duration
from outbox.errors import ConfigError, InvalidInput, NotFound, OutboxError
from outbox.queries import Message
from outbox.redact import redact
from outbox.schema import DEFAULT_QUEUE, validate_queue
from outbox.states import State
from outbox.web import views
from outbox.web.auth import Guard, check_bind

__all__ = ["WebConfig", "build_app", "serve"]

log = logging.getLogger("outbox.web")
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

FAILED_LIMIT = 100  # failed messages listed on the front page
SELECTION_LIMIT = 1000  # messages one bulk replay may take; the confirmation lists them
SEARCH_LIMIT = 100
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


_DB: web.AppKey[Engine] = web.AppKey("db", Engine)
_GUARD: web.AppKey[Guard] = web.AppKey("guard", Guard)
_CONFIG: web.AppKey[WebConfig] = web.AppKey("config", WebConfig)
_TEMPLATES: web.AppKey[jinja2.Environment] = web.AppKey("templates", jinja2.Environment)


# --- templates and static files -----------------------------------------------------------------


def _redacted(value: Any) -> Any:
    """Whatever the database holds, a token-shaped string never reaches the page (markup
    from macros was built from values already passed through here)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return redact(value)
    return value


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("outbox.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        finalize=_redacted,
    )
    env.globals.update(
        state_names=views.STATE_NAMES,
        label=vocabulary.label,
        when=views.when,
        span=views.span,
        chat_of=views.chat_of,
        text_of=views.text_of,
        extra_payload=views.extra_payload,
        history=views.history,
        queue_worth_showing=views.queue_worth_showing,
        chart_width=views.CHART_WIDTH,
        chart_height=views.CHART_HEIGHT,
        since_choices=SINCE_CHOICES,
    )
    return env


def _static_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("outbox.web") / "static"
    types = {".css": "text/css", ".js": "text/javascript"}
    files = {}
    for item in folder.iterdir():
        suffix = "." + item.name.rsplit(".", 1)[-1]
        if suffix in types:
            files[item.name] = (item.read_bytes(), types[suffix])
    return files


def _render(
    request: web.Request, template: str, http_status: int = 200, **context: Any
) -> web.Response:
    guard = request.app[_GUARD]
    session = request.cookies.get(SESSION_COOKIE)
    html = (
        request.app[_TEMPLATES]
        .get_template(template)
        .render(
            csrf=guard.form_token(session),
            signed_in=guard.required and guard.session_valid(session),
            refresh=request.app[_CONFIG].refresh_seconds,
            **context,
        )
    )
    return web.Response(text=html, status=http_status, content_type="text/html", charset="utf-8")


# --- the database, off the event loop ------------------------------------------------------------


async def _in_db(request: web.Request, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction in a worker thread; commit if it returns."""
    engine = request.app[_DB]
    config = request.app[_CONFIG]

    def run() -> T:
        with connect_errors(config.database_url), engine.begin() as conn:
            return work(conn)

    return await asyncio.to_thread(run)


# --- guards: security headers, sign-in, cross-site requests ------------------------------------

# Scripts and styles only from the page's own files; nothing may frame it.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Not no-referrer: under it the browser sends "Origin: null" with the page's own forms.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_OPEN_PATHS = {"/login"}


@web.middleware
async def _security(request: web.Request, handler: Handler) -> web.StreamResponse:
    guard = request.app[_GUARD]
    try:
        response = await _checked(request, handler, guard)
    except web.HTTPException as err:
        err.headers.update(_SECURITY_HEADERS)
        raise
    except (InvalidInput, NotFound) as err:
        status = 404 if isinstance(err, NotFound) else 400
        response = _render(
            request,
            "error.html",
            http_status=status,
            title="Not found" if status == 404 else "Not understood",
            error=str(err),
        )
    except OutboxError as err:
        # The database went away or refused: one line on the page, the details in the log.
        log.warning("web: %s", err)
        response = _render(
            request, "error.html", http_status=503, title="Unavailable", error=str(err)
        )
    response.headers.update(_SECURITY_HEADERS)
    return response


async def _checked(request: web.Request, handler: Handler, guard: Guard) -> web.StreamResponse:
    if not guard.host_allowed(request.headers.get("Host")):
        return _refuse(request, 421, "This page answers only to localhost and 127.0.0.1.")
    # A script's bearer header is never added by a browser on its own: no cross-site risk.
    bearer = guard.bearer_valid(request.headers.get("Authorization"))
    if request.method not in {"GET", "HEAD"} and not bearer:
        if not guard.origin_matches(request.headers.get("Origin"), request.headers.get("Host")):
            log.warning(
                "web: refused a %s to %s from %s",
                request.method,
                request.path,
                request.headers.get("Origin"),
            )
            return _refuse(request, 403, "Refused: the form was sent from another site.")
        form = await request.post()
        session = request.cookies.get(SESSION_COOKIE)
        if not guard.form_token_valid(session, str(form.get("csrf", ""))):
            log.warning(
                "web: refused a %s to %s without a valid form token", request.method, request.path
            )
            return _refuse(
                request,
                403,
                "Refused: the form is stale or was not sent by this "
                "page. Reload the page and try again.",
            )
    if request.path.startswith("/static/") or request.path in _OPEN_PATHS:
        return await handler(request)
    if guard.required and not (bearer or guard.session_valid(request.cookies.get(SESSION_COOKIE))):
        if request.method == "GET" and not request.path.startswith("/part/"):
            raise web.HTTPSeeOther("/login")
        return _refuse(request, 401, "Sign in first.")
    return await handler(request)


def _refuse(request: web.Request, status: int, reason: str) -> web.Response:
    return _render(request, "error.html", http_status=status, title="Refused", error=reason)


async def login_page(request: web.Request) -> web.StreamResponse:
    guard = request.app[_GUARD]
    if not guard.required:
        raise web.HTTPSeeOther("/")
    if request.method == "GET":
        return _render(request, "login.html", failed=False)
    form = await request.post()
    if not guard.password_matches(str(form.get("password", ""))):
        log.warning("web: a sign-in with a wrong password from %s", request.remote)
        await asyncio.sleep(1.0)  # slows down guessing
        return _render(request, "login.html", http_status=401, failed=True)
    response = web.HTTPSeeOther("/")
    response.set_cookie(
        SESSION_COOKIE,
        guard.sign_in(),
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    request.app[_GUARD].sign_out(request.cookies.get(SESSION_COOKIE))
    response = web.HTTPSeeOther("/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


# --- pages ----------------------------------------------------------------------------------------


def _overview(conn: Connection, config: WebConfig) -> dict[str, Any]:
    status = api.queue_status(conn, lease_seconds=config.lease_seconds, schema=config.schema)
    activity = queries.finished_per_minute(conn, schema=config.schema)
    now = datetime.now(UTC)
    return {
        "status": status,
        "bars": views.chart_bars(activity),
        "delivered_hour": sum(activity.delivered),
        "failed_hour": sum(activity.failed),
        "updated": now.strftime("%H:%M:%S UTC"),
        "lease": config.lease_seconds,
    }


@dataclass(frozen=True, slots=True)
class _FailedFilter:
    """The failed list's filters, from the address or from the bulk replay's form."""

    kind: str | None
    queue: str | None
    since_text: str  # the duration as typed
    since: float | None  # the same in seconds

    @classmethod
    def read(cls, values: Mapping[str, Any]) -> _FailedFilter:
        def text(name: str) -> str:
            return str(values.get(name, "")).strip()

        # "navbat" is the page's old spelling: addresses saved with it keep working.
        queue = text("queue") or text("navbat") or None
        if queue is not None:
            try:
                validate_queue(queue)
            except ConfigError as err:
                raise InvalidInput(str(err)) from None
        since_text = text("since")
        since = parse_duration(since_text).total_seconds() if since_text else None
        return cls(text("tur") or None, queue, since_text, since)

    def messages(self, conn: Connection, *, schema: str, limit: int) -> list[Message]:
        return api.failed_messages(
            conn,
            kind=self.kind,
            queue=self.queue,
            failed_within_seconds=self.since,
            limit=limit,
            schema=schema,
        )

    def fields(self) -> dict[str, Any]:
        """The filter as the templates show it and put it back into forms ('' for any)."""
        return {"kind": self.kind or "", "queue": self.queue or "", "since": self.since_text}


async def index(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]
    chosen = _FailedFilter.read(request.query)

    def read(conn: Connection) -> dict[str, Any]:
        overview = _overview(conn, config)
        failed = chosen.messages(conn, schema=config.schema, limit=FAILED_LIMIT + 1)
        # The status counts every queue's failed rows already: the filter's choices come from it.
        per_queue = overview["status"].queues
        return {
            **overview,
            "failed": failed[:FAILED_LIMIT],
            "more_failed": len(failed) > FAILED_LIMIT,
            "kinds": queries.failed_kinds(conn, schema=config.schema),
            "queues": [name for name, figures in per_queue.items() if figures.counts[State.FAILED]],
            # Each card names its queue unless the outbox has only the default one (one bot).
            "with_queue": any(queue != DEFAULT_QUEUE for queue in per_queue),
        }

    return _render(request, "index.html", **chosen.fields(), **await _in_db(request, read))


async def overview_part(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]
    data = await _in_db(request, lambda conn: _overview(conn, config))
    return _render(request, "_overview.html", **data)


async def _message_or_404(request: web.Request) -> tuple[int, Message]:
    message_id = _message_id(request)
    config = request.app[_CONFIG]
    message = await _in_db(
        request, lambda conn: api.get_message(conn, message_id, schema=config.schema)
    )
    if message is None:
        raise NotFound(f"no outbox message with id {message_id}")
    return message_id, message


async def _act_on_message(
    request: web.Request, message_id: int, action: Callable[[Connection], T]
) -> tuple[T, Message]:
    """Run ``action`` and read the message as it left it, in one transaction."""
    config = request.app[_CONFIG]

    def act(conn: Connection) -> tuple[T, Message | None]:
        return action(conn), api.get_message(conn, message_id, schema=config.schema)

    outcome, message = await _in_db(request, act)
    if message is None:
        raise NotFound(f"no outbox message with id {message_id}")
    return outcome, message


def _message_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    if not raw.isdigit() or int(raw) < 1:
        raise NotFound(f"{raw!r} is not a message id")
    return int(raw)


_NOTICES = {
    "replayed": "Replayed: the message is waiting to be sent again (kutmoqda).",
    "cancelled": "Cancelled: the message moved to xato and will not be sent.",
}


async def message_page(request: web.Request) -> web.StreamResponse:
    _, message = await _message_or_404(request)
    notice = _NOTICES.get(request.query.get("did", ""))
    return _render(request, "message.html", m=message, notice=notice, refused=None)


async def message_part(request: web.Request) -> web.StreamResponse:
    _, message = await _message_or_404(request)
    return _render(request, "_message.html", m=message)


async def search(request: web.Request) -> web.StreamResponse:
    config = request.app[_CONFIG]
    text = request.query.get("q", "").strip()
    found: list[Message] = []
    if text:
        found = await _in_db(
            request,
            lambda conn: queries.search_messages(
                conn, text, schema=config.schema, limit=SEARCH_LIMIT
            ),
        )
    return _render(request, "search.html", q=text, found=found, limit=SEARCH_LIMIT)


# --- actions --------------------------------------------------------------------------------------


def _about(message: Message) -> dict[str, Any]:
    """The fields of a log line about one message."""
    payload = message.payload
    chat = payload.get("chat_id") if isinstance(payload, dict) else None
    return {"outbox_id": message.id, "key": message.key, "chat_id": chat}


async def replay_one(request: web.Request) -> web.StreamResponse:
    message_id = _message_id(request)
    config = request.app[_CONFIG]
    form = await request.post()
    force = form.get("force") == "1"
    if force and form.get("confirmed") != "1":
        _, message = await _message_or_404(request)
        return _render(request, "confirm_force.html", m=message)
    result, message = await _act_on_message(
        request,
        message_id,
        lambda conn: api.replay(conn, [message_id], force=force, schema=config.schema)[0],
    )
    if result.replayed:
        log.info(
            "web: replayed outbox %s%s",
            message_id,
            " (forced)" if force else "",
            extra=_about(message),
        )
        raise web.HTTPSeeOther(f"/messages/{message_id}?did=replayed")
    return _render(
        request,
        "message.html",
        http_status=409,
        m=message,
        notice=None,
        refused=views.refusal(result),
        can_force=result.state == State.FAILED,
    )


async def cancel_one(request: web.Request) -> web.StreamResponse:
    message_id = _message_id(request)
    config = request.app[_CONFIG]
    cancelled, message = await _act_on_message(
        request,
        message_id,
        lambda conn: queries.cancel_by_operator(conn, message_id, schema=config.schema),
    )
    if cancelled:
        log.info("web: cancelled outbox %s", message_id, extra=_about(message))
        raise web.HTTPSeeOther(f"/messages/{message_id}?did=cancelled")
    reason = (
        f"Not cancelled: the message is {message.state} "
        f"({views.STATE_NAMES.get(message.state, '?')}); only a waiting message (kutmoqda) "
        "can be cancelled."
    )
    return _render(
        request,
        "message.html",
        http_status=409,
        m=message,
        notice=None,
        refused=reason,
        can_force=False,
    )


async def replay_selection(request: web.Request) -> web.StreamResponse:
    """Two steps: the filter gives the list to confirm; the confirmation replays those ids."""
    config = request.app[_CONFIG]
    form = await request.post()
    force = form.get("force") == "1"
    if form.get("confirmed") == "1":
        ids = _ids(str(form.get("ids", "")))
        results = await _in_db(
            request, lambda conn: api.replay(conn, ids, force=force, schema=config.schema)
        )
        replayed = [r for r in results if r.replayed]
        log.info(
            "web: replayed %d of %d selected failed messages%s",
            len(replayed),
            len(results),
            " (forced)" if force else "",
        )
        return _render(
            request,
            "replayed.html",
            replayed=replayed,
            refused=[views.refusal(r) for r in results if not r.replayed],
            forced=force,
        )
    chosen = _FailedFilter.read(form)
    selected = await _in_db(
        request,
        lambda conn: chosen.messages(conn, schema=config.schema, limit=SELECTION_LIMIT + 1),
    )
    taken = selected[:SELECTION_LIMIT]
    return _render(
        request,
        "confirm_selection.html",
        selected=taken,
        more=len(selected) > SELECTION_LIMIT,
        with_marker=[m for m in taken if m.marker],
        ids=",".join(str(m.id) for m in taken),
        **chosen.fields(),
    )


def _ids(raw: str) -> list[int]:
    try:
        ids = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise InvalidInput("the selection is not a list of message ids") from None
    if not ids or len(ids) > SELECTION_LIMIT:
        raise InvalidInput(f"the selection is empty or longer than {SELECTION_LIMIT}")
    return ids


async def static_file(request: web.Request) -> web.StreamResponse:
    found = _STATIC.get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    body, content_type = found
    return web.Response(body=body, content_type=content_type)


_STATIC = _static_files()


# --- the application and the server -----------------------------------------------------------


def build_app(config: WebConfig, engine: Engine) -> web.Application:
    app = web.Application(middlewares=[_security], client_max_size=256 * 1024)
    app[_DB] = engine
    app[_CONFIG] = config
    app[_GUARD] = Guard(config.password, config.host)
    app[_TEMPLATES] = _templates()
    app.router.add_get("/", index)
    app.router.add_get("/part/overview", overview_part)
    app.router.add_get("/part/messages/{id}", message_part)
    app.router.add_get("/messages/{id}", message_page)
    app.router.add_post("/messages/{id}/replay", replay_one)
    app.router.add_post("/messages/{id}/cancel", cancel_one)
    app.router.add_post("/replay", replay_selection)
    app.router.add_get("/search", search)
    app.router.add_route("*", "/login", login_page)
    app.router.add_post("/logout", logout)
    app.router.add_get("/static/{name}", static_file)
    return app


def serve(config: WebConfig) -> None:
    """Check the settings and the database, then serve until SIGTERM or SIGINT."""
    check_bind(config.host, config.password)
    engine = create_engine(
        config.database_url,
        pool_size=4,
        max_overflow=4,
        pool_pre_ping=True,
        connect_args={"connect_timeout": 10},
    )
    try:
        with connect_errors(config.database_url), engine.connect() as conn:
            check_schema_sync(conn, schema=config.schema)
        asyncio.run(_serve(build_app(config, engine), config))
    finally:
        engine.dispose()


async def _serve(app: web.Application, config: WebConfig) -> None:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.host, config.port)
        try:
            await site.start()
        except OSError as err:
            raise OutboxError(
                f"cannot listen on {config.host}:{config.port}: {err.strerror}"
            ) from None
        for host, port, *_ in runner.addresses:
            log.info(
                "serving the outbox page on http://%s:%s/ (database %s, schema %s%s)",
                f"[{host}]" if ":" in host else host,
                port,
                redact_url(config.database_url),
                config.schema,
                ", password required" if config.password else "",
            )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        log.info("web: stopping")
    finally:
        await runner.cleanup()
