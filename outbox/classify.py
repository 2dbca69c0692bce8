"""Telegram error classification: the one place that knows what each failure means.

python-telegram-bot's ``BadRequest`` and ``TimedOut`` are subclasses of ``NetworkError`` and it
strips "Bad Request: " from descriptions, so the order of the checks below matters and
descriptions are matched case-insensitively by substring.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import re
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from outbox.payload import MalformedPayload
from outbox.ratelimit import MAX_FLOOD_PAUSE
from outbox.redact import redact
from outbox.states import FailureCode

if TYPE_CHECKING:
    from telegram import error as tg

__all__ = ["MAX_FLOOD_PAUSE", "Failure", "FailureKind", "MalformedPayload", "classify"]


class FailureKind(enum.Enum):
    TRANSIENT = "transient"  # try again later (backoff), counts as an attempt
    PERMANENT = "permanent"  # no retry can help: xato at once
    MIGRATED = "migrated"  # the group became a supergroup: resend to the new id at once
    UNAUTHORIZED = "unauthorized"  # the token is bad: stop the relay, release the row
    DONE = "done"  # what the request asked for is already so (an edit to the same text)
    # No connection to the Bot API (connect error or timeout, no free connection in time): the
    # request never left, so the bot pauses (outbox.relay.reach) and the row goes back unsent.
    UNREACHABLE = "unreachable"
    # A paid broadcast refused for the bot's Stars balance or its audience: not the message's
    # fault, and every paid send of the bot would be refused alike. The bot's paid lane stops
    # (outbox.relay.flood) and the row goes back unsent, keeping its attempts.
    PAID_REFUSED = "paid_refused"


@dataclass(frozen=True, slots=True)
class Failure:
    kind: FailureKind
    reason: str  # for oxirgi_xato: a sentence a person understands, never the token
    retry_after: float = 0.0  # Telegram's flood-control wait, seconds
    maybe_delivered: bool = False  # the request may have reached Telegram (no answer came)
    new_chat_id: int | None = None
    code: FailureCode = FailureCode.TRANSIENT  # for xato_turi: what a program tests
    # The chat is gone for this bot (blocked, deactivated, kicked): the relay records it, and
    # later messages to it end without a request until the app unblocks it.
    chat_gone: bool = False

    @property
    def answered(self) -> bool:
        """Whether the Bot API answered (with an error): it can be reached."""
        return self.kind is not FailureKind.UNREACHABLE and not self.maybe_delivered


# Telegram's 403 descriptions for a person who can no longer receive the bot's messages.
_GONE = ("blocked by the user", "user is deactivated")
# ... and for a group, supergroup or channel the bot was removed from. With _GONE, the chat is
# gone for this bot until someone acts (unblocks, re-adds): the code stays forbidden.
_REMOVED = (
    "bot was kicked from the",  # group chat, supergroup chat, channel chat
    "bot is not a member of the supergroup chat",
    "bot is not a member of the channel chat",
)


def _forbidden(message: str) -> Failure:
    lowered = message.lower()
    blocked = any(s in lowered for s in _GONE)
    return Failure(
        FailureKind.PERMANENT,
        f"Telegram refused (403): {message}",
        code=FailureCode.BLOCKED if blocked else FailureCode.FORBIDDEN,
        chat_gone=blocked or any(s in lowered for s in _REMOVED),
    )


# 400 descriptions by what they mean (substrings, lower case). Telegram's own words; a multisend
# (an album) wraps its item's error in 'failed to send message #N with the error message "..."'.
_BAD_MEDIA = (
    "wrong file identifier",
    "wrong http url",
    "wrong remote file",
    "wrong type of the web page content",
    "media_empty",
    "photo_invalid_dimensions",
    "unsupported extension",
    "can't use the media of the specified type in the album",
)
_MESSAGE_GONE = (
    "message to edit not found",
    "message to copy not found",
    "message to forward not found",
    "message to pin not found",
    "message to unpin not found",
    "message to be replied not found",
    "replied message not found",
    "message thread not found",
    "message can't be edited",
    "message can't be copied",
    "message can't be forwarded",
    "message has protected content",
)
# Telegram could not fetch a URL's content (its source was slow or down): a few retries.
_FETCH_FAILED = ("failed to get http url content",)
# A 429 that reaches the relay inside a 400 (an album's item, some proxies).
_RETRY_AFTER_TEXT = re.compile(r"too many requests: retry after (\d+)")
# What a follow-up asked for is already so: counts as done.
_ALREADY_SO = {
    "edit": ("message is not modified",),
    "delete": ("message to delete not found",),
}


# Telegram's refusal of allow_paid_broadcast for the bot itself (under 10,000 Stars, or 10,000
# monthly users). The Bot API reference lists no descriptions; the server passes MTProto error
# names through (BALANCE_TOO_LOW), so these match those names and likely wordings. Unsure: a new
# wording is found by its log line (an xato row saying "paid broadcast" or "stars").
_PAID_REFUSED = (
    "balance_too_low",
    "not enough stars",
    "stars balance",
    "star balance",
    "paid_broadcast",
    "paid broadcast",
    "monthly active users",
)


def _bad_request(lowered: str) -> FailureCode:
    if "chat not found" in lowered:
        return FailureCode.CHAT_NOT_FOUND
    if any(s in lowered for s in _BAD_MEDIA):
        return FailureCode.BAD_MEDIA
    if any(s in lowered for s in _MESSAGE_GONE):
        return FailureCode.MESSAGE_NOT_FOUND
    if "message can't be deleted" in lowered:
        return FailureCode.CANNOT_DELETE
    return FailureCode.BAD_REQUEST


def _bad_request_failure(message: str, method: str) -> Failure:
    lowered, name = message.lower(), method.lower()
    family = "edit" if name.startswith("editmessage") else "delete" if "delete" in name else ""
    if any(s in lowered for s in _ALREADY_SO.get(family, ())):
        return Failure(FailureKind.DONE, f"already so: {message}")
    if (flood := _RETRY_AFTER_TEXT.search(lowered)) is not None:
        seconds = min(max(float(flood.group(1)), 1.0), MAX_FLOOD_PAUSE)
        return Failure(
            FailureKind.TRANSIENT,
            f"Telegram flood control (429 inside a 400): retry after {seconds:g} s",
            retry_after=seconds,
            code=FailureCode.RATE_LIMITED,
            maybe_delivered="failed to send message #" in lowered,
        )
    if any(s in lowered for s in _FETCH_FAILED):
        return Failure(
            FailureKind.TRANSIENT, f"Telegram could not fetch the media's URL (400): {message}"
        )
    code = _bad_request(lowered)
    reason = f"Telegram rejected the message (400): {message}"
    if code is FailureCode.CANNOT_DELETE:
        # Bots may delete their messages for 48 hours only: the row ends xato, saying so; the
        # app may send an editMessageText instead (docs/sending.md, follow-ups).
        reason += " (bots can delete messages for 48 hours; edit it instead)"
    if "failed to send message #" in lowered:
        reason += "; the album's earlier items may have been delivered"
    return Failure(FailureKind.PERMANENT, reason, code=code)


def _retry_after_seconds(err: tg.RetryAfter) -> float:
    """Telegram's wait in seconds, capped at MAX_FLOOD_PAUSE (nan and negatives read as 1 s)."""
    with warnings.catch_warnings():
        # PTB 22 warns that retry_after will become a timedelta; accept both forms.
        warnings.simplefilter("ignore")
        value = err.retry_after
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    if not seconds > 0:  # also nan
        return 1.0
    return min(seconds, MAX_FLOOD_PAUSE)


@functools.cache
def _transport() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """The HTTP clients' errors under python-telegram-bot's (aiohttp's, and httpx's for a sender
    given python-telegram-bot's own request), then those of a connection never made. Loaded at
    the first failure: a command that sends nothing starts without the HTTP clients."""
    import aiohttp  # noqa: PLC0415
    import httpx  # noqa: PLC0415

    not_connected = (
        aiohttp.ClientConnectorError,  # refused, no route, DNS, TLS
        aiohttp.ConnectionTimeoutError,  # no connection made, or none free, in time
        aiohttp.ClientHttpProxyError,  # the proxy refused the tunnel: nothing reached Telegram
        httpx.ConnectError,
        httpx.ConnectTimeout,
        httpx.PoolTimeout,
    )
    return (aiohttp.ClientError, httpx.HTTPError), not_connected


def _transport_cause(err: BaseException) -> BaseException | None:
    cause = err.__cause__
    while cause is not None and not isinstance(cause, _transport()[0]):
        cause = cause.__cause__
    return cause


def _without_body(message: str) -> str:
    """python-telegram-bot quotes a non-JSON answer (a proxy's HTML page) in full: drop it."""
    status, quoted, _ = message.partition(". Parsing the server response")
    return f"{status}, and the answer was not the Bot API's JSON" if quoted else message


def classify(err: BaseException, method: str = "sendMessage") -> Failure:  # noqa: PLR0911, PLR0912 - one branch per Telegram answer
    """Map an exception raised while sending ``method`` to what the relay should do about it."""
    from telegram import error as tg  # noqa: PLC0415 - see _transport

    message = _without_body(redact(str(err))) or type(err).__name__
    if isinstance(err, MalformedPayload):
        return Failure(
            FailureKind.PERMANENT, f"malformed payload: {message}", code=FailureCode.BAD_PAYLOAD
        )
    if isinstance(err, tg.RetryAfter):
        seconds = _retry_after_seconds(err)
        return Failure(
            FailureKind.TRANSIENT,
            f"Telegram flood control (429): retry after {seconds:g} s",
            retry_after=seconds,
            code=FailureCode.RATE_LIMITED,
        )
    if isinstance(err, tg.ChatMigrated):
        return Failure(
            FailureKind.MIGRATED,
            f"group chat was upgraded to supergroup {err.new_chat_id}",
            new_chat_id=int(err.new_chat_id),
            code=FailureCode.CHAT_MIGRATED,
        )
    if isinstance(err, tg.InvalidToken):
        return Failure(FailureKind.UNAUTHORIZED, "Telegram rejected the bot token (401/404)")
    if isinstance(err, tg.Forbidden | tg.BadRequest) and any(
        s in message.lower() for s in _PAID_REFUSED
    ):
        status = 403 if isinstance(err, tg.Forbidden) else 400
        return Failure(
            FailureKind.PAID_REFUSED,
            f"Telegram refused the paid broadcast ({status}): {message}",
            code=FailureCode.BAD_REQUEST,
        )
    if isinstance(err, tg.Forbidden):
        return _forbidden(message)
    if isinstance(err, tg.BadRequest):
        return _bad_request_failure(message, method)
    if isinstance(err, tg.NetworkError):  # TimedOut too
        cause = _transport_cause(err)
        if isinstance(cause, _transport()[1]):
            return Failure(FailureKind.UNREACHABLE, f"could not connect to Telegram: {message}")
        if isinstance(err, tg.TimedOut):
            return Failure(
                FailureKind.TRANSIENT,
                "Telegram did not answer in time; the message may have been delivered",
                maybe_delivered=True,
            )
        if cause is None:
            # An HTTP answer with an error status (5xx, a proxy's HTML page).
            return Failure(FailureKind.TRANSIENT, f"Telegram server error: {message}")
        return Failure(
            FailureKind.TRANSIENT,
            f"connection to Telegram broke ({type(cause).__name__}); "
            "the message may have been delivered",
            maybe_delivered=True,
        )
    if isinstance(err, tg.TelegramError):
        return Failure(FailureKind.TRANSIENT, f"Telegram error: {message}")
    if isinstance(err, KeyError):
        # A 200 answer with ok=false, or a result without message_id, surfaces as KeyError.
        return Failure(FailureKind.TRANSIENT, f"unexpected answer from the Bot API: {message}")
    return Failure(FailureKind.TRANSIENT, f"unexpected error while sending: {message}")
