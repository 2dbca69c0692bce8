"""The operator's page: an aiohttp application rendering Jinja2 templates. Every request passes
``gate`` (sign-in, origin and form token, the security headers and error pages); every action
is a POST and leaves its trace in the row's tarix."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from aiohttp import web

from outbox import ops
from outbox.db import check_schema, redact_url
from outbox.errors import NotFound, OutboxError
from outbox.ops.views import message as message_view
from outbox.ops.views import status as status_view
from outbox.queries import Message
from outbox.schema import DEFAULT_QUEUE, checked_queue
from outbox.states import State
from outbox.web import inputs, pauses
from outbox.web.auth import Proxies, check_bind
from outbox.web.base import CONFIG, WebConfig, install, render, run
from outbox.web.gate import MalformedRequests, answers, form_text, login_page, logout, read_form

__all__ = ["WebConfig", "build_app", "serve"]

log = logging.getLogger("outbox.web")

FAILED_LIMIT = 100  # failed messages listed on the front page
SELECTION_LIMIT = 1000  # messages one bulk replay may take; the confirmation lists them
SEARCH_LIMIT = 100
_PAUSE_NOTICES = {
    "paused": "Paused: no relay claims its waiting messages until it is resumed.",
    "resumed": "Resumed: its waiting messages are sent again.",
}
_NOTICES = {
    "replayed": "Replayed: the message is waiting to be sent again (kutmoqda).",
    "cancelled": "Cancelled: the message moved to xato and will not be sent.",
}
_STATIC_TYPES = {"css": "text/css", "js": "text/javascript"}
# The page's own scripts and styles, read once: name -> (body, content type).
_STATIC = {
    item.name: (item.read_bytes(), _STATIC_TYPES[item.name.rpartition(".")[2]])
    for item in (resources.files("outbox.web") / "static").iterdir()
    if item.name.rpartition(".")[2] in _STATIC_TYPES
}


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


def _failed_filter(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The failed list's filters, from the address or from the bulk replay's form: as the
    operations take them, and as the templates show them and put them back into forms."""
    # "navbat" and "tur" are the page's old spellings: addresses saved with them keep working.
    queue = inputs.field(values, "queue", "queue") or inputs.field(values, "navbat", "queue")
    if queue:
        checked_queue(queue)
    since_text = inputs.field(values, "since", "time filter")
    since = inputs.duration_seconds(since_text, "time filter") if since_text else None
    kind = inputs.field(values, "kind", "kind") or inputs.field(values, "tur", "kind")
    priority_text = inputs.field(values, "priority", "priority")
    priority = inputs.priority(priority_text) if priority_text else None
    filters = {
        "kind": kind or None,
        "queue": queue or None,
        "failed_within_seconds": since,
        "priority": priority,
    }
    shown = {
        "kind": kind,
        "queue": queue,
        "since": since_text,
        "priority": "" if priority is None else str(priority),
    }
    return filters, shown


async def index(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
    filters, shown = _failed_filter(request.query)
    front = await run(
        request,
        ops.front_page,
        schema=config.schema,
        lease_seconds=config.lease_seconds,
        limit=FAILED_LIMIT + 1,
        **filters,
    )
    # The status counts every queue's failed rows already: the filter's choices come from it.
    per_queue = front.overview.status.queues
    return render(
        request,
        "index.html",
        notice=_PAUSE_NOTICES.get(request.query.get("did", "")),
        **shown,
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


async def overview_part(request: web.Request) -> web.StreamResponse:
    config = request.app[CONFIG]
    shown = await run(
        request, ops.overview, schema=config.schema, lease_seconds=config.lease_seconds
    )
    return render(request, "_overview.html", **_overview(shown, config))


def _message_id(request: web.Request) -> int:
    return inputs.message_id(request.match_info["id"])


def _found(message: Message | None, message_id: int) -> Message:
    if message is None:
        raise NotFound(f"no outbox message with id {message_id}")
    return message


async def _message_or_404(request: web.Request) -> Message:
    message_id = _message_id(request)
    message = await run(request, ops.get_message, message_id, schema=request.app[CONFIG].schema)
    return _found(message, message_id)


async def message_page(request: web.Request) -> web.StreamResponse:
    message = await _message_or_404(request)
    notice = _NOTICES.get(request.query.get("did", ""))
    return render(request, "message.html", m=message, notice=notice, refused=None)


async def message_part(request: web.Request) -> web.StreamResponse:
    return render(request, "_message.html", m=await _message_or_404(request))


async def search(request: web.Request) -> web.StreamResponse:
    schema = request.app[CONFIG].schema
    text = inputs.field(request.query, "q", "search")
    found: list[Message] = []
    if text:
        found = await run(request, ops.search_messages, text, schema=schema, limit=SEARCH_LIMIT)
    return render(request, "search.html", q=text, found=found, limit=SEARCH_LIMIT)


def _done(message: Message, did: str, forced: bool = False) -> web.HTTPSeeOther:
    """Log the action on one message, and send the browser back to the message's page."""
    payload = message.payload
    chat = payload.get("chat_id") if isinstance(payload, dict) else None
    about = {"outbox_id": message.id, "key": message.key, "chat_id": chat}
    log.info("web: %s outbox %s%s", did, message.id, " (forced)" if forced else "", extra=about)
    return web.HTTPSeeOther(f"/messages/{message.id}?did={did}")


def _not_done(
    request: web.Request, message: Message, reason: str, can_force: bool = False
) -> web.Response:
    shown = {"m": message, "notice": None, "refused": reason, "can_force": can_force}
    return render(request, "message.html", http_status=409, **shown)


async def replay_one(request: web.Request) -> web.StreamResponse:
    message_id = _message_id(request)
    form = await read_form(request)
    force = form.get("force") == "1"
    if force and form.get("confirmed") != "1":
        return render(request, "confirm_force.html", m=await _message_or_404(request))
    schema = request.app[CONFIG].schema
    # The action and the message as it left it, in one transaction.
    result, left = await run(request, ops.replay_message, message_id, schema=schema, force=force)
    message = _found(left, message_id)
    if result.replayed:
        raise _done(message, "replayed", forced=force)
    return _not_done(
        request,
        message,
        message_view.replay_refusal(result, force_hint=False),
        # --force resends a sent message; it cannot reach a chat that blocked the bot.
        can_force=result.state == State.FAILED and result.blocked_chat is None,
    )


async def cancel_one(request: web.Request) -> web.StreamResponse:
    message_id = _message_id(request)
    schema = request.app[CONFIG].schema
    cancelled, left = await run(request, ops.cancel_message, message_id, schema=schema)
    message = _found(left, message_id)
    if cancelled:
        raise _done(message, "cancelled")
    return _not_done(
        request,
        message,
        f"Not cancelled: the message is {message.state} "
        f"({message_view.STATE_NAMES.get(message.state, '?')}); only a waiting message "
        "(kutmoqda) can be cancelled.",
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
    filters, shown = _failed_filter(form)
    selected = await run(
        request,
        ops.list_messages,
        schema=config.schema,
        state=State.FAILED,
        limit=SELECTION_LIMIT + 1,
        **filters,
    )
    taken = selected[:SELECTION_LIMIT]
    return render(
        request,
        "confirm_selection.html",
        selected=taken,
        more=len(selected) > SELECTION_LIMIT,
        with_marker=[m for m in taken if m.marker],
        ids=",".join(str(m.id) for m in taken),
        **shown,
    )


async def static_file(request: web.Request) -> web.StreamResponse:
    found = _STATIC.get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    body, content_type = found
    return web.Response(body=body, content_type=content_type)


def build_app(config: WebConfig) -> web.Application:
    app = web.Application(middlewares=[answers], client_max_size=256 * 1024)
    install(app, config)
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
