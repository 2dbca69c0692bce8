"""The page's pauses and batches: pause or resume a queue, a bot, a kind or a batch (asked in
the browser first); a batch's progress, its report (CSV), and cancelling it (asked on a page of
its own first, as a forced replay is, since it withdraws many messages at once)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web

from outbox import ops
from outbox.errors import NotFound
from outbox.ops.views.batch import batch_lines, report_csv
from outbox.queries import Operation, Scope
from outbox.queries.pause import check_batch_name
from outbox.web import inputs
from outbox.web.base import CONFIG, render, run
from outbox.web.gate import SECURITY_HEADERS, Handler, read_form

__all__ = ["add_routes"]

log = logging.getLogger("outbox.web")

_DONE = {"paused": "Paused", "resumed": "Resumed"}


def _scope_action(act: Operation[..., bool], did: str) -> Handler:
    """The handler that pauses or resumes the scope of its form, then goes back to the batch's
    page for a batch, else to the front page."""

    async def handler(request: web.Request) -> web.StreamResponse:
        form = await read_form(request)
        word = inputs.field(form, "scope", "pause scope")
        scope, value = Scope.from_option(word), inputs.field(form, "value", "name")
        await run(request, act, scope, value, schema=request.app[CONFIG].schema)
        log.info("web: %s %s %s", did, scope.option, value)
        back = _batch_path(value) if word == "batch" else "/"
        raise web.HTTPSeeOther(f"{back}?did={did}")

    return handler


def _batch_path(name: str) -> str:
    return f"/batches/{quote(name, safe='')}"


def _batch_name(request: web.Request) -> str:
    return check_batch_name(inputs.field(request.match_info, "name", "batch"))


async def batch_page(request: web.Request) -> web.StreamResponse:
    name = _batch_name(request)
    _, progress = await run(request, ops.batch, name, schema=request.app[CONFIG].schema)
    if progress.total == 0:
        raise NotFound(f"no outbox rows in batch {name!r}")
    did = request.query.get("did", "")
    return render(
        request,
        "batch.html",
        b=progress,
        lines=batch_lines(progress),
        paused=any(p.scope == Scope.BATCH and p.value == name for p in progress.paused_by),
        notice=_DONE.get(did) and f"{_DONE[did]} batch {name}.",
        cancelled=request.query.get("cancelled"),
    )


async def batch_report(request: web.Request) -> web.StreamResponse:
    """The batch's report as a CSV file, written as it is read from the database."""
    name = _batch_name(request)
    schema = request.app[CONFIG].schema
    async with ops.connect_async(request.app[CONFIG].database_url) as conn:
        _, progress = await ops.batch.run_async(conn, name, schema=schema)
        if progress.total == 0:
            raise NotFound(f"no outbox rows in batch {name!r}")
        pages = ops.batch_report_async(conn, name, schema=schema)
        # Read before the answer starts: a fault until then is still an error page.
        first: list[tuple[Any, ...]] = await anext(pages, [])
        response = web.StreamResponse(headers=SECURITY_HEADERS)
        response.content_type = "text/csv"
        response.charset = "utf-8"
        filename = "batch-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        response.headers["Content-Disposition"] = f'attachment; filename="{filename}.csv"'
        await response.prepare(request)
        try:
            await response.write(report_csv(first, header=True).encode())
            async for page in pages:
                await response.write(report_csv(page).encode())
        except Exception:
            # Half a file must not look whole: the connection is cut, the download fails.
            log.warning("web: the report of batch %s broke off", name, exc_info=True)
            if request.transport is not None:
                request.transport.abort()
            return response
        await response.write_eof()
    return response


async def cancel_batch(request: web.Request) -> web.StreamResponse:
    """Two steps: the first shows what would be cancelled; the confirmation cancels it."""
    name = _batch_name(request)
    form = await read_form(request)
    confirmed = form.get("confirmed") == "1"
    schema = request.app[CONFIG].schema
    cancelled, progress = await run(request, ops.batch, name, schema=schema, cancel=confirmed)
    if cancelled is None:
        return render(request, "confirm_batch_cancel.html", b=progress)
    log.info("web: cancelled %d waiting messages of batch %s", cancelled, name)
    raise web.HTTPSeeOther(f"{_batch_path(name)}?{urlencode({'cancelled': cancelled})}")


def add_routes(app: web.Application) -> None:
    app.router.add_post("/pause", _scope_action(ops.pause, "paused"))
    app.router.add_post("/resume", _scope_action(ops.resume, "resumed"))
    app.router.add_get("/batches/{name}", batch_page)
    app.router.add_get("/batches/{name}/report.csv", batch_report)
    app.router.add_post("/batches/{name}/cancel", cancel_batch)
