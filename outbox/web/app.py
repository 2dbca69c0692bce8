"""The operator's page: an aiohttp application rendering Jinja2 templates.

Reading and writing go through ``outbox.api`` and ``outbox.queries`` on a small SQLAlchemy
pool, in worker threads so that a slow query never stalls the event loop. Every request passes
``gate`` (sign-in, origin and form token, the security headers and error pages); every action
is a POST and leaves its trace in the row's tarix.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, TypeVar

from aiohttp import web
from sqlalchemy import Connection
from sqlalchemy.engine import Engine

from outbox import api, queries
from outbox.db import check_schema_sync, connect_errors, create_engine, redact_url
from outbox.errors import ConfigError, InvalidInput, NotFound, OutboxError
from outbox.queries import Message
from outbox.schema import DEFAULT_QUEUE, validate_queue
from outbox.states import State
from outbox.web import inputs, views
from outbox.web.auth import Guard, Proxies, check_bind
from outbox.web.base import (
    CONFIG,
    DB,
    GUARD,
    PROXIES,
    TEMPLATES,
    THROTTLE,
    WebConfig,
    render,
    templates,
)
from outbox.web.gate import MalformedRequests, answers, form_text, login_page, logout, read_form
from outbox.web.throttle import SignInThrottle

__all__ = ["WebConfig", "build_app", "serve"]

log = logging.getLogger("outbox.web")
T = TypeVar("T")

FAILED_LIMIT = 100  # failed messages listed on the front page
SELECTION_LIMIT = 1000  # messages one bulk replay may take; the confirmation lists them
SEARCH_LIMIT = 100


# --- static files -----------------------------------------------------------------


def _static_files() -> dict[str, tuple[bytes, str]]:
    folder = resources.files("outbox.web") / "static"
    types = {".css": "text/css", ".js": "text/javascript"}
    files = {}
    for item in folder.iterdir():
        suffix = "." + item.name.rsplit(".", 1)[-1]
        if suffix in types:
            files[item.name] = (item.read_bytes(), types[suffix])
    return files


# --- the database, off the event loop ------------------------------------------------------------


async def _in_db(request: web.Request, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction in a worker thread; commit if it returns."""
    engine = request.app[DB]
    config = request.app[CONFIG]

    def run() -> T:
        with connect_errors(config.database_url), engine.begin() as conn:
            return work(conn)

    return await asyncio.to_thread(run)


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
        "relays": api.relays(conn, schema=config.schema),
        "unserved": api.unserved_queues(conn, schema=config.schema),
        "bots": api.bot_status(conn, schema=config.schema),
    }


@dataclass(frozen=True, slots=True)
class _FailedFilter:
    """The failed list's filters, from the address or from the bulk replay's form."""

    kind: str | None
    queue: str | None
    since_text: str  # the duration as typed
    since: float | None  # the same in seconds
    priority: int | None = None  # ustuvorlik

    @classmethod
    def read(cls, values: Mapping[str, Any]) -> _FailedFilter:
        # "navbat" is the page's old spelling: addresses saved with it keep working.
        queue = (
            inputs.field(values, "queue", "queue")
            or inputs.field(values, "navbat", "queue")
            or None
        )
        if queue is not None:
            try:
                validate_queue(queue)
            except ConfigError as err:
                raise InvalidInput(str(err)) from None
        since_text = inputs.field(values, "since", "time filter")
        since = inputs.duration_seconds(since_text, "time filter") if since_text else None
        # "tur" likewise: the page's old spelling of the kind filter.
        kind = inputs.field(values, "kind", "kind") or inputs.field(values, "tur", "kind") or None
        priority_text = inputs.field(values, "priority", "priority")
        priority = inputs.priority(priority_text) if priority_text else None
        return cls(kind, queue, since_text, since, priority)

    def messages(self, conn: Connection, *, schema: str, limit: int) -> list[Message]:
        return api.failed_messages(
            conn,
            kind=self.kind,
            queue=self.queue,
            failed_within_seconds=self.since,
            limit=limit,
            schema=schema,
            priority=self.priority,
        )

    def fields(self) -> dict[str, Any]:
        """The filter as the templates show it and put it back into forms ('' for any)."""
        return {
            "kind": self.kind or "",
            "queue": self.queue or "",
            "since": self.since_text,
            "priority": "" if self.priority is None else str(self.priority),
        }


async def index(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
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
            # Offered once a failed row has a priority (an outbox without lanes: no filter).
            "priorities": [str(p) for p in queries.failed_priorities(conn, schema=config.schema)],
            "queues": [name for name, figures in per_queue.items() if figures.counts[State.FAILED]],
            # Each card names its queue unless the outbox has only the default one (one bot).
            "with_queue": any(queue != DEFAULT_QUEUE for queue in per_queue),
            "pauses": queries.list_pauses(conn, schema=config.schema),
        }

    did = _PAUSE_NOTICES.get(request.query.get("did", ""))
    return render(
        request, "index.html", notice=did, **chosen.fields(), **await _in_db(request, read)
    )


_PAUSE_NOTICES = {
    "paused": "Paused: no relay claims its waiting messages until it is resumed.",
    "resumed": "Resumed: its waiting messages are sent again.",
}


async def overview_part(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
    data = await _in_db(request, lambda conn: _overview(conn, config))
    return render(request, "_overview.html", **data)


async def _message_or_404(request: web.Request) -> tuple[int, Message]:
    message_id = _message_id(request)
    config = request.app[CONFIG]
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
    config = request.app[CONFIG]

    def act(conn: Connection) -> tuple[T, Message | None]:
        return action(conn), api.get_message(conn, message_id, schema=config.schema)

    outcome, message = await _in_db(request, act)
    if message is None:
        raise NotFound(f"no outbox message with id {message_id}")
    return outcome, message


def _message_id(request: web.Request) -> int:
    return inputs.message_id(request.match_info["id"])


_NOTICES = {
    "replayed": "Replayed: the message is waiting to be sent again (kutmoqda).",
    "cancelled": "Cancelled: the message moved to xato and will not be sent.",
}


async def message_page(request: web.Request) -> web.StreamResponse:
    _, message = await _message_or_404(request)
    notice = _NOTICES.get(request.query.get("did", ""))
    return render(request, "message.html", m=message, notice=notice, refused=None)


async def message_part(request: web.Request) -> web.StreamResponse:
    _, message = await _message_or_404(request)
    return render(request, "_message.html", m=message)


async def search(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
    text = inputs.field(request.query, "q", "search")
    found: list[Message] = []
    if text:
        found = await _in_db(
            request,
            lambda conn: queries.search_messages(
                conn, text, schema=config.schema, limit=SEARCH_LIMIT
            ),
        )
    return render(request, "search.html", q=text, found=found, limit=SEARCH_LIMIT)


# --- actions --------------------------------------------------------------------------------------


def _about(message: Message) -> dict[str, Any]:
    """The fields of a log line about one message."""
    payload = message.payload
    chat = payload.get("chat_id") if isinstance(payload, dict) else None
    return {"outbox_id": message.id, "key": message.key, "chat_id": chat}


async def replay_one(request: web.Request) -> web.StreamResponse:
    message_id = _message_id(request)
    config = request.app[CONFIG]
    form = await read_form(request)
    force = form.get("force") == "1"
    if force and form.get("confirmed") != "1":
        _, message = await _message_or_404(request)
        return render(request, "confirm_force.html", m=message)
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
    return render(
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
    config = request.app[CONFIG]
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
    return render(
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
    config = request.app[CONFIG]
    form = await read_form(request)
    force = form.get("force") == "1"
    if form.get("confirmed") == "1":
        ids = inputs.message_ids(form_text(form, "ids"), SELECTION_LIMIT)
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
        return render(
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
    return render(
        request,
        "confirm_selection.html",
        selected=taken,
        more=len(selected) > SELECTION_LIMIT,
        with_marker=[m for m in taken if m.marker],
        ids=",".join(str(m.id) for m in taken),
        **chosen.fields(),
    )


async def static_file(request: web.Request) -> web.StreamResponse:
    found = _STATIC.get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    body, content_type = found
    return web.Response(body=body, content_type=content_type)


_STATIC = _static_files()


# --- the application and the server -----------------------------------------------------------


def build_app(config: WebConfig, engine: Engine) -> web.Application:
    app = web.Application(middlewares=[answers], client_max_size=256 * 1024)
    app[DB] = engine
    app[CONFIG] = config
    app[GUARD] = Guard(config.password, config.host)
    app[THROTTLE] = SignInThrottle()
    app[PROXIES] = Proxies.parse(config.trusted_proxies)
    app[TEMPLATES] = templates()
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
    from outbox.web import pauses  # noqa: PLC0415 - it builds on this module's helpers

    pauses.add_routes(app)
    return app


def serve(config: WebConfig) -> None:
    """Check the settings and the database, then serve until SIGTERM or SIGINT."""
    check_bind(config.host, config.password)
    Proxies.parse(config.trusted_proxies)  # a mistake in it is said before connecting
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
    runner = web.AppRunner(
        app, access_log=None, handle_signals=False, logger=MalformedRequests(log)
    )
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
