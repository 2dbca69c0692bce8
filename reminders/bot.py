"""``reminders bot``: the vazifalar bot on python-telegram-bot's ``Application``.

Long polling by default; with a webhook URL, a webhook server for production behind HTTPS.
Every update is handled in one database transaction (``reminders.chat``): the change, the reply
(enqueued in the outbox, sent by the relay) and the claim of the update commit together, so two
bot processes, or a webhook delivered twice, never act on one update twice.

Two answers do not go through the outbox, because they are the bot's answer to a button press
in the person's hands: ``answerCallbackQuery`` (Telegram shows a spinner on the button until it
comes, and forgets the query after a short while, which a queue behind a flood-control pause or
a broadcast could miss: the outbox has no priority lane yet) and ``editMessageText`` of the
pressed reminder (repeating it is harmless). The bot makes both calls itself after the
transaction has committed. A task changed any other way edits its sent reminder through the
outbox (``reminders.service``); completing it by the button does too, with the same text, so
the later of the two edits is "not modified" and counts as done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy.orm import Session
from telegram import BotCommand, CallbackQuery, Update
from telegram import error as tg
from telegram.constants import ParseMode
from telegram.ext import (
    Application,
    CallbackQueryHandler,
    ChatMemberHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from outbox.db import create_engine
from outbox.redact import redact, register_secret
from outbox.telegram import bot_id_of
from outbox.tracing import configure_from_env
from reminders import chat
from reminders.messages import CALLBACK_ANSWER_LIMIT, fit_html, shorten

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["BotConfig", "build_application", "run_bot"]

log = logging.getLogger("reminders.bot")
T = TypeVar("T")
# The default Application: its six type parameters (bot, context, user/chat/bot data, job
# queue) are python-telegram-bot's defaults here.
_App: TypeAlias = "Application[Any, Any, Any, Any, Any, Any]"

DEFAULT_POLL_TIMEOUT = 10.0
DEFAULT_WEBHOOK_LISTEN = "0.0.0.0"  # noqa: S104 - a webhook server listens for Telegram
DEFAULT_WEBHOOK_PORT = 8443
_DB_ATTEMPTS = 4
# Claims of handled updates older than two days are dropped at start and every so many updates.
_FORGET_EVERY = 1000
_COMMANDS = [
    BotCommand("add", "vazifa qo'shish: /add Hisobot ertaga 09:00"),
    BotCommand("list", "ochiq vazifalar"),
    BotCommand("done", "bajarildi: /done N"),
    BotCommand("delete", "o'chirish: /delete N"),
    BotCommand("tz", "vaqt zonasi: /tz Europe/Berlin"),
    BotCommand("quiet", "tinch soatlar: /quiet 22:00 07:00"),
    BotCommand("help", "yordam"),
]
# The commands a span is named after ("vazifalar /add"); any other is "/other".
_TRACED_COMMANDS = frozenset({"/start", *(f"/{c.command}" for c in _COMMANDS)})


@dataclass(frozen=True, slots=True)
class BotConfig:
    database_url: str
    token: str
    api_url: str
    poll_timeout: float = DEFAULT_POLL_TIMEOUT  # long polling: seconds one getUpdates may wait
    webhook_url: str | None = None  # set: run a webhook server instead of polling
    webhook_listen: str = DEFAULT_WEBHOOK_LISTEN
    webhook_port: int = DEFAULT_WEBHOOK_PORT
    webhook_secret: str | None = None  # Telegram sends it back in a header with every update

    def __repr__(self) -> str:  # the token and the secret stay out of logs and tracebacks
        return f"BotConfig(api_url={self.api_url!r}, webhook_url={self.webhook_url!r})"


class _Handlers:
    """The update handlers, bound to one database engine and one bot id."""

    def __init__(
        self, engine: sa.Engine, bot_id: int, tracer_provider: TracerProvider | None = None
    ) -> None:
        self._engine = engine
        self._bot_id = bot_id
        self._handled = 0
        self._tracer = None if tracer_provider is None else tracer_provider.get_tracer(__name__)

    def transaction(self, work: Callable[[Session], T], attempts: int = _DB_ATTEMPTS) -> T:
        """Run ``work`` in one transaction; retry a few times when the database is away.

        python-telegram-bot confirms an update to Telegram once it was fetched, whatever its
        handler did, so a short outage is waited out here rather than losing the update.
        """
        for attempt in range(1, attempts + 1):
            try:
                with Session(self._engine) as session, session.begin():
                    return work(session)
            except sa.exc.OperationalError as err:
                if attempt == attempts:
                    raise
                log.warning("database unavailable (%s); retrying", type(err).__name__)
                time.sleep(0.5 * 2**attempt)
        raise AssertionError("unreachable")

    async def _handle(self, work: Callable[[Session], T], update: Update) -> T:
        """``work`` in a transaction of its own, off the event loop."""
        with self._traced(update):
            # The thread runs in a copy of this context: what it enqueues joins the span.
            result = await asyncio.to_thread(self.transaction, work)
        self._handled += 1
        if self._handled % _FORGET_EVERY == 0:
            await asyncio.to_thread(self.transaction, chat.forget_old_updates)
        return result

    @contextlib.contextmanager
    def _traced(self, update: Update) -> Iterator[None]:
        """With tracing on, a span for the update's handling: the replies and reminders it
        enqueues carry its trace context, and the relay's sends of them join the trace."""
        if self._tracer is None:
            yield
            return
        from opentelemetry.trace import SpanKind  # noqa: PLC0415 - the otel extra, loaded by now

        text = update.message.text if update.message and update.message.text else ""
        command = text.split(maxsplit=1)[0].split("@", 1)[0].lower() if text[:1] == "/" else ""
        if command and command not in _TRACED_COMMANDS:
            command = "/other"  # a span's name comes from a short list, never from input
        kind = "button" if update.callback_query else (command or "message")
        if update.my_chat_member is not None:
            kind = "membership"
        attributes: dict[str, str | int] = {
            "telegram.update_id": update.update_id,
            "vazifalar.update": kind,
        }
        with self._tracer.start_as_current_span(
            f"vazifalar {kind}", kind=SpanKind.SERVER, attributes=attributes
        ):
            yield

    def _incoming(self, update: Update) -> chat.Incoming | None:
        where, who = update.effective_chat, update.effective_user
        if where is None:
            return None
        return chat.Incoming(
            bot_id=self._bot_id,
            update_id=update.update_id,
            chat_id=where.id,
            private=where.type == "private",
            first_name=(who.first_name if who else "") or "",
        )

    async def on_message(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        message, incoming = update.message, self._incoming(update)
        if message is None or incoming is None:
            return
        if message.migrate_to_chat_id:
            new_chat = message.migrate_to_chat_id
            await self._handle(lambda s: chat.handle_migration(s, incoming, new_chat), update)
            return
        # A private message without text (a photo, a sticker) is answered as one not understood.
        text = message.text or ""
        if not (text or incoming.private):
            return
        if not await self._handle(lambda s: chat.handle_text(s, incoming, text), update):
            log.info("update %s was handled by another bot process", update.update_id)

    async def on_button(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        query, incoming = update.callback_query, self._incoming(update)
        if query is None or incoming is None:
            return
        message = query.message
        if message is None or not query.data:
            await _answer(query, "Bu tugma eskirgan.")
            return
        data, message_id = query.data, message.message_id
        outcome = await self._handle(
            lambda s: chat.handle_button(s, incoming, message_id, data), update
        )
        if outcome is None:  # another bot process handled this update and answers it
            log.info("update %s was handled by another bot process", update.update_id)
            return
        await _answer(query, outcome.answer)
        if outcome.edit is not None:
            edit = fit_html(outcome.edit)
            await _quietly(query.edit_message_text(edit, parse_mode=ParseMode.HTML))

    async def on_membership(self, update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
        """The bot was unblocked or added back to a group (or blocked, removed): the outbox
        may send to the chat again in the first case."""
        change, incoming = update.my_chat_member, self._incoming(update)
        if change is None or incoming is None:
            return
        status = change.new_chat_member.status
        if await self._handle(lambda s: chat.handle_membership(s, incoming, status), update):
            log.info("chat %s: the bot may write there again (%s)", incoming.chat_id, status)

    async def on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        """The last resort: an update whose handler failed unexpectedly is logged, and the
        person is told (an apology), so that no input leaves the bot silent."""
        err = context.error
        update_id = getattr(update, "update_id", None)
        log.error(
            "update %s not handled: %s: %s", update_id, type(err).__name__, redact(str(err))[:300]
        )
        if not isinstance(update, Update):  # a polling error: nobody waits for an answer
            return
        try:
            await self._apologise(update)
        except Exception as failure:  # noqa: BLE001 - an error handler has nobody to raise to
            log.warning(
                "no apology for update %s: %s: %s",
                update_id,
                type(failure).__name__,
                redact(str(failure))[:300],
            )

    async def _apologise(self, update: Update) -> None:
        if update.callback_query is not None:  # answered directly, like every button press
            await _answer(update.callback_query, chat.BUTTON_APOLOGY)
            return
        message, incoming = update.message, self._incoming(update)
        if message is None or incoming is None:
            return
        text = message.text or ""
        try:  # through the outbox like every reply, claiming the update; one attempt
            await asyncio.to_thread(
                self.transaction, lambda s: chat.handle_failure(s, incoming, text), 1
            )
        except Exception as failure:  # noqa: BLE001 - the database itself fails: send it directly
            log.warning(
                "apology for update %s sent directly: %s", update.update_id, type(failure).__name__
            )
            if incoming.private or text.startswith("/"):
                await _quietly(message.chat.send_message(chat.APOLOGY))


async def _answer(query: CallbackQuery, text: str) -> None:
    """The answer to a button press, within Telegram's 200 characters."""
    await _quietly(query.answer(shorten(text, CALLBACK_ANSWER_LIMIT)))


async def _quietly(call: Awaitable[object]) -> None:
    """A direct answer whose failure changes nothing already committed: log it and go on."""
    try:
        await call
    except tg.BadRequest as err:
        # "message is not modified", "query is too old": the person sees the right thing.
        log.info("Telegram declined an answer: %s", redact(str(err)))
    except tg.TelegramError as err:
        log.warning("could not answer the button press: %s", redact(str(err)))


def build_application(
    config: BotConfig, engine: sa.Engine, tracer_provider: TracerProvider | None = None
) -> _App:
    """The bot's ``Application`` with its handlers; run it with ``run_bot``. With
    ``tracer_provider``, each update's handling is a span."""
    register_secret(config.token)
    if config.webhook_secret:
        register_secret(config.webhook_secret, "[secret]")
    handlers = _Handlers(
        engine, bot_id=int(bot_id_of(config.token)), tracer_provider=tracer_provider
    )

    async def post_init(app: _App) -> None:
        await app.bot.set_my_commands(_COMMANDS)
        forgotten = await asyncio.to_thread(handlers.transaction, chat.forget_old_updates)
        log.info("bot started; forgot %d old update claims", forgotten)

    app = (
        Application.builder()
        .token(config.token)
        .base_url(config.api_url.rstrip("/") + "/bot")
        .post_init(post_init)
        .build()
    )
    private_other = filters.ChatType.PRIVATE & ~filters.StatusUpdate.ALL
    app.add_handler(
        MessageHandler(
            filters.UpdateType.MESSAGE
            & (filters.TEXT | filters.StatusUpdate.MIGRATE | private_other),
            handlers.on_message,
        )
    )
    app.add_handler(CallbackQueryHandler(handlers.on_button))
    app.add_handler(ChatMemberHandler(handlers.on_membership, ChatMemberHandler.MY_CHAT_MEMBER))
    app.add_error_handler(handlers.on_error)
    return app


def run_bot(config: BotConfig) -> None:
    """Run until SIGINT or SIGTERM: long polling, or the webhook server if a URL is set."""
    # Traces only when OTEL_* variables ask for them, as for the relay (outbox.tracing).
    tracer_provider = configure_from_env("vazifalar-bot")
    # A pooled connection is tried before use: after a failover (or a restart) the pool's
    # connections to the old server are dropped and a new one goes where the URL leads.
    engine = create_engine(config.database_url, pool_pre_ping=True)
    try:
        app = build_application(config, engine, tracer_provider)
        # my_chat_member: the person unblocked the bot, a group added it back (chat.py).
        allowed = [Update.MESSAGE, Update.CALLBACK_QUERY, Update.MY_CHAT_MEMBER]
        if config.webhook_url:
            app.run_webhook(
                listen=config.webhook_listen,
                port=config.webhook_port,
                url_path=urlsplit(config.webhook_url).path.lstrip("/"),
                webhook_url=config.webhook_url,
                secret_token=config.webhook_secret,
                allowed_updates=allowed,
            )
        else:
            app.run_polling(
                poll_interval=0.0, timeout=int(config.poll_timeout), allowed_updates=allowed
            )
    finally:
        engine.dispose()
        if tracer_provider is not None:
            tracer_provider.shutdown()
