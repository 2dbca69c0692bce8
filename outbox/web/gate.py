"""What every request passes on its way in and every answer on its way out: the host check (DNS
rebinding), the origin and form token of a POST, the sign-in (each password through the
``throttle``), a trusted proxy's word on the browser's address and scheme; the security headers
and the error pages (docs/web.md, "Safety" and "Bad input")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psycopg
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from outbox.errors import InvalidInput, NotFound, OutboxError
from outbox.redact import redact
from outbox.web.auth import Guard
from outbox.web.base import CONFIG, GUARD, PROXIES, SESSION_COOKIE, THROTTLE, error_page, render
from outbox.web.throttle import client_key

__all__ = [
    "SECURITY_HEADERS",
    "Handler",
    "MalformedRequests",
    "answers",
    "form_text",
    "login_page",
    "logout",
    "read_form",
]

log = logging.getLogger("outbox.web")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class TooManyAttempts(Exception):
    """A password check refused by the throttle; ``seconds`` until the next may be tried."""

    def __init__(self, seconds: int) -> None:
        super().__init__(seconds)
        self.seconds = seconds


# Scripts and styles only from the page's own files; nothing may frame it.
SECURITY_HEADERS = {
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
_NOT_MIGRATED = (
    "the database's tables are not the ones this version expects, or its role may not read "
    "them: run `outbox migrate` with this version, or check the role's grants"
)
_PAGE_FAULT = (
    "The page met an error of its own; its log says what. Reload the page to see where things "
    "stand."
)


@web.middleware
async def answers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Input the page cannot use (``inputs``) is a 400 or 404 saying why, the database away or
    not migrated a 503; anything else is a fault of the page: logged once, a plain 500 page."""
    try:
        request = _as_forwarded(request)
        response = await _checked(request, handler, request.app[GUARD])
    except web.HTTPException as err:
        err.headers.update(SECURITY_HEADERS)
        raise
    except (InvalidInput, NotFound) as err:
        status = 404 if isinstance(err, NotFound) else 400
        title = "Not found" if status == 404 else "Not understood"
        response = error_page(request, status, title, str(err))
    except TooManyAttempts as err:
        wait = f"Too many sign-in attempts: try again in {err.seconds} s."
        response = error_page(request, 429, "Too many attempts", wait)
        response.headers["Retry-After"] = str(err.seconds)
    except (OutboxError, psycopg.OperationalError) as err:
        # The database went away or refused: one line on the page, the details in the log.
        reason = str(err) if isinstance(err, OutboxError) else "the database did not answer"
        log.warning("web: %s", reason)
        response = error_page(request, 503, "Unavailable", reason)
    except Exception as err:  # noqa: BLE001 - _fault logs it, with its traceback
        response = _fault(request, err)
    response.headers.update(SECURITY_HEADERS)
    return response


def _fault(request: web.Request, err: Exception) -> web.Response:
    """An error no input explains: SQLSTATE class 42 (a table, a column or a grant missing) is a
    database this version does not expect, 503; anything else is a fault of the page, 500."""
    if isinstance(err, psycopg.ProgrammingError) and (err.sqlstate or "").startswith("42"):
        log.warning("web: the database refused a query (%s): %s", err.sqlstate, err)
        return error_page(request, 503, "Unavailable", _NOT_MIGRATED)
    log.exception("web: an unexpected error answering %s %s", request.method, request.path)
    return error_page(request, 500, "Something went wrong", _PAGE_FAULT)


def _as_forwarded(request: web.Request) -> web.Request:
    """Behind a trusted proxy: the browser's address and scheme, as the proxy tells them."""
    proxies = request.app[PROXIES]
    if not proxies.trusts(request.remote):
        return request
    peer, headers = request.remote, request.headers
    https = proxies.https(peer, headers.get("X-Forwarded-Proto"))
    client = proxies.client(peer, headers.get("X-Forwarded-For")) or peer or ""
    return request.clone(remote=client, scheme="https" if https else "http")


async def _checked(request: web.Request, handler: Handler, guard: Guard) -> web.StreamResponse:
    if not guard.host_allowed(request.headers.get("Host")):
        return _refuse(request, 421, "This page answers only to localhost and 127.0.0.1.")
    # A script's bearer header is never added by a browser on its own: no cross-site risk.
    given = guard.bearer_password(request.headers.get("Authorization"))
    bearer = given is not None and _password_checked(request, given)
    if request.method not in {"GET", "HEAD"} and not bearer:
        origin = request.headers.get("Origin")
        if not guard.origin_matches(origin, request.headers.get("Host")):
            log.warning("web: refused a %s to %s from %s", request.method, request.path, origin)
            return _refuse(request, 403, "Refused: the form was sent from another site.")
        token = form_text(await read_form(request), "csrf")
        if not guard.form_token_valid(request.cookies.get(SESSION_COOKIE), token):
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
    return error_page(request, status, "Refused", reason)


async def read_form(request: web.Request) -> Mapping[str, Any]:
    """The posted form; one that cannot be read (an unknown charset, a broken multipart body)
    is a mistake of the sender."""
    try:
        return await request.post()
    except (LookupError, ValueError, AssertionError, HttpProcessingError) as err:
        raise InvalidInput(f"the form could not be read ({type(err).__name__})") from None


def form_text(form: Mapping[str, Any], name: str) -> str:
    """A form field that only the page fills in (token, password): '' if absent or a file."""
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


def _password_checked(request: web.Request, given: str) -> bool:
    """Compare a password, unless the client (or everyone) has guessed too often lately."""
    throttle = request.app[THROTTLE]
    client = client_key(request.remote)
    wait = throttle.wait_seconds(client)
    if wait:
        raise TooManyAttempts(wait)
    if request.app[GUARD].password_matches(given):
        throttle.succeeded(client)
        return True
    throttle.failed(client)
    return False


async def login_page(request: web.Request) -> web.StreamResponse:
    guard = request.app[GUARD]
    if not guard.required:
        raise web.HTTPSeeOther("/")
    if request.method == "GET":
        return render(request, "login.html", failed=False)
    if request.method != "POST":
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST"])
    form = await read_form(request)
    if not _password_checked(request, form_text(form, "password")):
        log.warning("web: a sign-in with a wrong password from %s", request.remote)
        await asyncio.sleep(request.app[CONFIG].wrong_password_pause)
        return render(request, "login.html", http_status=401, failed=True)
    response = web.HTTPSeeOther("/")
    response.set_cookie(
        SESSION_COOKIE,
        guard.sign_in(),
        httponly=True,
        samesite="Strict",
        secure=request.secure,  # https, or a trusted proxy's X-Forwarded-Proto: https
        path="/",
    )
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    request.app[GUARD].sign_out(request.cookies.get(SESSION_COOKIE))
    response = web.HTTPSeeOther("/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    raise response


class MalformedRequests(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's log for requests it cannot parse (a bad request line, a header too long): one
    line each instead of a traceback."""

    def exception(self, msg: object, *args: object, **kwargs: Any) -> None:
        err = kwargs.get("exc_info")
        if msg != "Error handling request from %s" or not isinstance(err, HttpProcessingError):
            self.logger.exception(msg, *args, **kwargs)  # not about the request: as it was
            return
        reason = (str(err.message).strip().splitlines() or ["?"])[0][:200]
        self.logger.info(
            "web: a malformed request from %s refused (%s): %s", args[0], err.code, redact(reason)
        )
