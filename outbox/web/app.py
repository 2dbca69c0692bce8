"""The operator's page: an aiohttp application rendering Jinja2 templates.

Reading and writing go through ``outbox.ops`` on psycopg's async connections, one per request
and its transaction. Every request passes ``gate`` (sign-in, origin and form token, the
security headers and error pages); every action is a POST and leaves its trace in the row's
tarix.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, ParamSpec, TypeVar

from aiohttp import web

from outbox import ops
from outbox.db import check_schema, redact_url
from outbox.errors import NotFound, OutboxError
from outbox.ops.views import message as message_view
from outbox.ops.views import status as status_view
from outbox.queries import Message, Operation
from outbox.schema import DEFAULT_QUEUE, checked_queue
from outbox.states import State
from outbox.web import inputs
from outbox.web.auth import Guard, Proxies, check_bind
from outbox.web.base import (
    CONFIG,
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
P = ParamSpec("P")
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


# --- the database ---------------------------------------------------------------------------------


async def run(request: web.Request, op: Operation[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run one operation on a connection of its own, in one transaction, committed if it
    returns."""
    async with ops.connect_async(request.app[CONFIG].database_url) as conn:
        return await op.run_async(conn, *args, **kwargs)


def _overview(shown: ops.Overview, config: WebConfig) -> dict[str, Any]:
    return {
        "status": shown.status,
        "bars": status_view.chart_bars(shown.activity),
        "delivered_hour": sum(shown.activity.delivered),
        "failed_hour": sum(shown.activity.failed),
        "updated": datetime.now(UTC).strftime("%H:%M:%S UTC"),
        "lease": config.lease_seconds,
        "relays": shown.relays,
        "unserved": shown.unserved,
        "bots": shown.bots,
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
            checked_queue(queue)
        since_text = inputs.field(values, "since", "time filter")
        since = inputs.duration_seconds(since_text, "time filter") if since_text else None
        # "tur" likewise: the page's old spelling of the kind filter.
        kind = inputs.field(values, "kind", "kind") or inputs.field(values, "tur", "kind") or None
        priority_text = inputs.field(values, "priority", "priority")
        priority = inputs.priority(priority_text) if priority_text else None
        return cls(kind, queue, since_text, since, priority)

    def filters(self) -> dict[str, Any]:
        """The filter as the operations take it."""
        return {
            "kind": self.kind,
            "queue": self.queue,
            "failed_within_seconds": self.since,
            "priority": self.priority,
        }

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
    front = await run(
        request,
        ops.front_page,
        schema=config.schema,
        lease_seconds=config.lease_seconds,
        limit=FAILED_LIMIT + 1,
        **chosen.filters(),
    )
    # The status counts every queue's failed rows already: the filter's choices come from it.
    per_queue = front.overview.status.queues
    did = _PAUSE_NOTICES.get(request.query.get("did", ""))
    return render(
        request,
        "index.html",
        notice=did,
        **chosen.fields(),
        **_overview(front.overview, config),
        failed=front.failed[:FAILED_LIMIT],
        more_failed=len(front.failed) > FAILED_LIMIT,
        kinds=front.kinds,
        # Offered once a failed row has a priority (an outbox without lanes: no filter).
        priorities=[str(p) for p in front.priorities],
        queues=[name for name, figures in per_queue.items() if figures.counts[State.FAILED]],
        # Each card names its queue unless the outbox has only the default one (one bot).
        with_queue=any(queue != DEFAULT_QUEUE for queue in per_queue),
        pauses=front.pauses,
    )


_PAUSE_NOTICES = {
    "paused": "Paused: no relay claims its waiting messages until it is resumed.",
    "resumed": "Resumed: its waiting messages are sent again.",
}


async def overview_part(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
    shown = await run(
        request, ops.overview, schema=config.schema, lease_seconds=config.lease_seconds
    )
    return render(request, "_overview.html", **_overview(shown, config))


async def _message_or_404(request: web.Request) -> Message:
    message_id = _message_id(request)
    config = request.app[CONFIG]
    message = await run(request, ops.get_message, message_id, schema=config.schema)
    if message is None:
        raise NotFound(f"no outbox message with id {message_id}")
    return message


def _message_id(request: web.Request) -> int:
    return inputs.message_id(request.match_info["id"])


_NOTICES = {
    "replayed": "Replayed: the message is waiting to be sent again (kutmoqda).",
    "cancelled": "Cancelled: the message moved to xato and will not be sent.",
}


async def message_page(request: web.Request) -> web.StreamResponse:
    message = await _message_or_404(request)
    notice = _NOTICES.get(request.query.get("did", ""))
    return render(request, "message.html", m=message, notice=notice, refused=None)


async def message_part(request: web.Request) -> web.StreamResponse:
    return render(request, "_message.html", m=await _message_or_404(request))


async def search(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
    text = inputs.field(request.query, "q", "search")
    found: list[Message] = []
    if text:
        found = await run(
            request, ops.search_messages, text, schema=config.schema, limit=SEARCH_LIMIT
        )
    return render(request, "search.html", q=text, found=found, limit=SEARCH_LIMIT)


# --- actions --------------------------------------------------------------------------------------


def _about(message: Message) -> dict[str, Any]:
    """The fields of a log line about one message."""
    payload = message.payload
    chat = payload.get("chat_id") if isinstance(payload, dict) else None
    return {"outbox_id": message.id, "key": message.key, "chat_id": chat}


async def _act(
    request: web.Request, op: Operation[P, tuple[T, Message | None]], *a: P.args, **k: P.kwargs
) -> tuple[T, Message]:
    """Run the action and read the message as it left it, in one transaction."""
    done, message = await run(request, op, *a, **k)
    if message is None:
        raise NotFound(f"no outbox message with id {_message_id(request)}")
    return done, message


async def replay_one(request: web.Request) -> web.StreamResponse:
    message_id = _message_id(request)
    form = await read_form(request)
    force = form.get("force") == "1"
    if force and form.get("confirmed") != "1":
        return render(request, "confirm_force.html", m=await _message_or_404(request))
    schema = request.app[CONFIG].schema
    result, message = await _act(
        request, ops.replay_message, message_id, schema=schema, force=force
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
        refused=message_view.replay_refusal(result, force_hint=False),
        # --force resends a sent message; it cannot reach a chat that blocked the bot.
        can_force=result.state == State.FAILED and result.blocked_chat is None,
    )


async def cancel_one(request: web.Request) -> web.StreamResponse:
    message_id = _message_id(request)
    schema = request.app[CONFIG].schema
    cancelled, message = await _act(request, ops.cancel_message, message_id, schema=schema)
    if cancelled:
        log.info("web: cancelled outbox %s", message_id, extra=_about(message))
        raise web.HTTPSeeOther(f"/messages/{message_id}?did=cancelled")
    reason = (
        f"Not cancelled: the message is {message.state} "
        f"({message_view.STATE_NAMES.get(message.state, '?')}); only a waiting message "
        "(kutmoqda) can be cancelled."
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
        results = await run(request, ops.replay, ids, force=force, schema=config.schema)
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
            refused=[
                message_view.replay_refusal(r, force_hint=False) for r in results if not r.replayed
            ],
            forced=force,
        )
    chosen = _FailedFilter.read(form)
    selected = await run(
        request,
        ops.list_messages,
        schema=config.schema,
        state=State.FAILED,
        limit=SELECTION_LIMIT + 1,
        **chosen.filters(),
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


def build_app(config: WebConfig) -> web.Application:
    app = web.Application(middlewares=[answers], client_max_size=256 * 1024)
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
    asyncio.run(_serve(build_app(config), config))


async def _serve(app: web.Application, config: WebConfig) -> None:
    await check_schema(config.database_url, schema=config.schema)
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
